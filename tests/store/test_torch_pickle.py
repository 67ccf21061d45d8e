"""Reading torch.save files without torch: exact values against torch, layouts, safety, corruption."""

from __future__ import annotations

import json
import pickle
import zipfile

import numpy as np
import pytest
import torch

from ember.errors import StoreError
from ember.store.torch_pickle import load_torch
from ember.store.torch_unpickler import ALLOWED_GLOBALS

from .conftest import assert_same_state, to_numpy, to_torch

LEGACY = {"_use_new_zipfile_serialization": False}


def small_model_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 6 * 6, 5))
    model(torch.randn(2, 3, 8, 8))  # training mode: running stats and num_batches_tracked move
    state = dict(model.state_dict())
    base = torch.randn(6, 4)
    state.update({
        "half": torch.randn(3, 2).half(),
        "brain": torch.randn(2, 5).bfloat16(),
        "transposed": base.t(),              # non-contiguous: strides (1, 4)
        "row": base[2],                      # shares base's storage at offset 8
        "strided": base[::2, 1::2],
        "expanded": torch.arange(3.0).expand(4, 3),  # stride 0
    })
    return state


@pytest.mark.parametrize("options", [{}, LEGACY, {"pickle_protocol": 4}, {**LEGACY, "pickle_protocol": 4}],
                         ids=["zip", "legacy", "zip-protocol4", "legacy-protocol4"])
@pytest.mark.parametrize("mmap", [True, False])
def test_small_model_matches_torch_exactly(tmp_path, options, mmap):
    want = small_model_state()
    path = tmp_path / "model.pt"
    torch.save(want, path, **options)
    got, metadata = load_torch(path, mmap=mmap)
    assert metadata == {}
    assert list(got) == list(want)
    assert_same_state(got, {k: to_numpy(v) for k, v in want.items()})
    assert got["1.num_batches_tracked"].dtype == np.int64 and got["1.num_batches_tracked"] == 1
    assert got["transposed"].strides == (4, 16)
    assert np.shares_memory(got["transposed"], got["row"])
    assert np.shares_memory(got["transposed"], got["strided"])
    assert all(a.flags.writeable != mmap for a in got.values() if a.size)


@pytest.mark.parametrize("options", [{}, LEGACY], ids=["zip", "legacy"])
def test_every_dtype_and_shape(tmp_path, every_dtype_state, options):
    path = tmp_path / "all.pt"
    torch.save({k: to_torch(v) for k, v in every_dtype_state.items()}, path, **options)
    got, _ = load_torch(path)
    assert_same_state(got, every_dtype_state)


def test_mmap_views_point_into_the_file(tmp_path):
    path = tmp_path / "m.pt"
    values = torch.arange(1000.0, 1016.0)
    torch.save({"w": values}, path)
    got, _ = load_torch(path)
    assert not got["w"].flags.owndata
    start = path.read_bytes().index(values.numpy().tobytes())
    with open(path, "r+b") as f:
        f.seek(start + 4)
        f.write(np.float32(2.5).tobytes())
    assert got["w"][1] == 2.5


def test_parameters_and_the_v3_untyped_path(tmp_path):
    path = tmp_path / "p.pt"
    torch.save({"p": torch.nn.Parameter(torch.arange(4.0)), "s": torch.Size([2, 3])}, path)
    got, metadata = load_torch(path)
    np.testing.assert_array_equal(got["p"], [0, 1, 2, 3])
    assert metadata == {"s": "[2, 3]"}


def test_checkpoint_nesting_flattens_or_selects(tmp_path):
    model = torch.nn.Linear(3, 2)
    # the shape of torch.optim.SGD(momentum=0.9).state_dict(), built by hand to keep torch.optim's import out
    optimizer = {"state": {0: {"momentum_buffer": torch.ones(2, 3)}, 1: {"momentum_buffer": torch.ones(2)}},
                 "param_groups": [{"lr": 0.1, "momentum": 0.9, "nesterov": False, "params": [0, 1]}]}
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optimizer": optimizer, "epoch": 7, "name": "run"}, path)

    state, metadata = load_torch(path, key="model")
    assert set(state) == {"weight", "bias"} and metadata == {}
    np.testing.assert_array_equal(state["weight"], model.weight.detach().numpy())

    state, metadata = load_torch(path)
    assert {"model.weight", "model.bias", "optimizer.state.0.momentum_buffer"} <= set(state)
    assert metadata["epoch"] == "7" and metadata["name"] == '"run"'
    assert json.loads(metadata["optimizer.param_groups"]) == optimizer["param_groups"]

    with pytest.raises(StoreError, match=r"no top-level key 'state_dict'; the file holds 'model', 'optimizer'"):
        load_torch(path, key="state_dict")


def test_a_bare_tensor_is_not_a_state_dict(tmp_path):
    torch.save(torch.ones(2), tmp_path / "t.pt")
    with pytest.raises(StoreError, match="holds a single tensor, not a dict of tensors"):
        load_torch(tmp_path / "t.pt")


def rewrite(path, transform) -> None:
    """Rewrite a zip archive member by member (fresh CRCs): transform(name, data) -> data."""
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, transform(i.filename, z.read(i))) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(name, data)


def test_big_endian_archives_are_swapped(tmp_path):
    path = tmp_path / "be.pt"
    want = {"f": torch.randn(5), "i": torch.arange(4, dtype=torch.int64), "b": torch.randn(3).bfloat16()}
    torch.save(want, path)
    swap = {"be/data/0": ">f4", "be/data/1": ">i8", "be/data/2": ">i2"}

    def to_big(name: str, data: bytes) -> bytes:
        if name == "be/byteorder":
            return b"big"
        if name in swap:
            return np.frombuffer(data, swap[name].replace(">", "<")).astype(swap[name]).tobytes()
        return data

    rewrite(path, to_big)
    got, _ = load_torch(path)
    assert_same_state(got, {k: to_numpy(v) for k, v in want.items()})


# --- safety: nothing from the file runs -----------------------------------------------------------

def call_payload(function: str, argument: str) -> bytes:
    """A protocol 2 pickle that calls `function(argument)`: GLOBAL, BINUNICODE, TUPLE1, REDUCE, STOP."""
    module, name = function.rsplit(".", 1)
    text = argument.encode()
    return b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"X" + len(text).to_bytes(4, "little") + text + b"\x85R."


PAYLOADS = {"os.system": "touch {marker}", "builtins.eval": 'open("{marker}", "w")', "posix.system": "touch {marker}"}


@pytest.mark.parametrize("refused", list(PAYLOADS))
def test_malicious_pickles_are_refused_and_nothing_runs(tmp_path, refused):
    marker = tmp_path / "pwned"
    payload = call_payload(refused, PAYLOADS[refused].replace("{marker}", str(marker)))
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(1)}, path)
    rewrite(path, lambda name, data: payload if name.endswith("data.pkl") else data)
    with pytest.raises(StoreError) as e:
        load_torch(path)
    assert str(path) in str(e.value) and f"refused to load global {refused}" in str(e.value)
    assert not marker.exists()


def test_protocol_0_pickles_are_refused_before_unpickling(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(1)}, path)
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    rewrite(path, lambda name, data: payload if name.endswith("data.pkl") else data)
    with pytest.raises(StoreError, match="opcode GLOBAL in a protocol 0 pickle"):
        load_torch(path)
    assert not marker.exists()


def test_malicious_legacy_pickle_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        for part in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
            pickle.dump(part, f, protocol=2)
        f.write(call_payload("os.system", f"touch {marker}"))
    with pytest.raises(StoreError, match="refused to load global os.system"):
        load_torch(path)
    assert not marker.exists()


def test_allowed_globals_cannot_be_mutated_through_build(tmp_path):
    before = dict(ALLOWED_GLOBALS)
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(1)}, path)
    # GLOBAL torch.FloatStorage, then BUILD it with state {"dtype": "x"}: must fail, not mutate
    payload = b"\x80\x02ctorch\nFloatStorage\n}X\x05\x00\x00\x00dtypeX\x01\x00\x00\x00xsb."
    rewrite(path, lambda name, data: payload if name.endswith("data.pkl") else data)
    with pytest.raises(StoreError, match="refused to set state"):
        load_torch(path)
    assert ALLOWED_GLOBALS == before and ALLOWED_GLOBALS[("torch", "FloatStorage")].dtype.name == "f32"


# --- corrupt files ----------------------------------------------------------------------------------

def _refused(path) -> str:
    with pytest.raises(StoreError) as e:
        load_torch(path)
    assert str(path) in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("options", [{}, LEGACY], ids=["zip", "legacy"])
def test_truncated_files(tmp_path, options):
    path = tmp_path / "t.pt"
    torch.save({"w": torch.randn(100)}, path, **options)
    good = path.read_bytes()
    for cut in (len(good) - 50, len(good) // 2, 10):
        path.write_bytes(good[:cut])
        _refused(path)
    path.write_bytes(b"")
    assert "not a PyTorch file" in _refused(path)


def test_a_view_past_its_storage_is_refused(tmp_path):
    path = tmp_path / "oob.pt"
    torch.save({"w": torch.ones(7)}, path)
    # the size tuple (7,) becomes (9,): two elements past the 7-element storage
    rewrite(path, lambda name, data: data.replace(b"K\x07\x85", b"K\x09\x85", 1) if name.endswith("data.pkl") else data)
    assert "reaches element 8 of storage '0', which holds 7 f32 elements" in _refused(path)


def test_a_storage_shorter_than_declared_is_refused(tmp_path):
    path = tmp_path / "short.pt"
    torch.save({"w": torch.ones(7)}, path)
    rewrite(path, lambda name, data: data[:12] if name.endswith("data/0") else data)
    assert "declares 7 x f32 but its record has 12 bytes" in _refused(path)


def test_a_missing_storage_record_is_refused(tmp_path):
    path = tmp_path / "missing.pt"
    torch.save({"w": torch.ones(7)}, path)
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist() if not i.filename.endswith("data/0")]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            z.writestr(name, data)
    assert "missing record 'missing/data/0'" in _refused(path)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_and_tar_files_are_refused_by_name(tmp_path):
    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path)
    assert "TorchScript archive" in _refused(path)
    tar = tmp_path / "old.pt"
    tar.write_bytes(bytes(257) + b"ustar" + bytes(250))
    assert "tar format of torch < 0.4" in _refused(tar)


def test_a_dict_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "cycle.pt"
    torch.save({"w": torch.ones(1)}, path)
    # {"a": <itself>} through the memo: EMPTY_DICT, BINPUT 0, key, BINGET 0, SETITEM, STOP
    payload = b"\x80\x02}q\x00X\x01\x00\x00\x00ah\x00s."
    rewrite(path, lambda name, data: payload if name.endswith("data.pkl") else data)
    assert "reuses its containers" in _refused(path)


@pytest.mark.parametrize("dtype,named", [(torch.uint16, "torch.uint16"), (torch.uint32, "torch.uint32")])
def test_dtypes_ember_lacks_are_named(tmp_path, dtype, named):
    path = tmp_path / "other.pt"
    torch.save({"w": torch.zeros(2, dtype=dtype)}, path)
    assert f"a tensor of type {named} has no ember dtype" in _refused(path)


def test_a_huge_memo_index_is_refused_before_unpickling():
    # PROTO 2, EMPTY_DICT, LONG_BINPUT 2**31-1, STOP: the C unpickler would allocate a 16 GB memo table
    import io

    from ember.store.torch_unpickler import SafeUnpickler
    crafted = b"\x80\x02}r\xff\xff\xff\x7f."
    with pytest.raises(StoreError, match="memo index 2147483647"):
        SafeUnpickler(io.BytesIO(crafted), "crafted.pt").load()
