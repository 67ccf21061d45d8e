"""`save_module` / `load_module`: round trips of a model holding every kind of layer through every format,
strict and partial loading, dtype casts, metadata, and damaged files."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
import torch

import ember
from ember import nn
from ember.errors import ShapeError, StoreError
from ember.store import load, load_module, save, save_module
from ember.store.module import CLASS_KEY, VERSION_KEY, module_state

from .conftest import assert_same_state

FORMATS = ["model.ember", "model.safetensors", "model.pt"]


class EveryLayer(nn.Module):
    """One of each layer that holds parameters or buffers; `forward` runs each on its own input."""

    def __init__(self, dtype=None):
        kw = dict(dtype=dtype)
        self.linear = nn.Linear(4, 3, **kw)
        self.bilinear = nn.Bilinear(4, 2, 3, **kw)
        self.embedding = nn.Embedding(10, 4, **kw)
        self.convs = [nn.Conv1d(2, 3, 3, **kw), nn.Conv2d(2, 3, 3, **kw), nn.Conv3d(2, 3, 3, **kw)]
        self.deconvs = [nn.ConvTranspose1d(2, 3, 3, stride=2, **kw), nn.ConvTranspose2d(2, 3, 3, **kw),
                        nn.ConvTranspose3d(2, 3, 3, **kw)]
        self.batch_norms = [nn.BatchNorm1d(2, **kw), nn.BatchNorm2d(2, **kw), nn.BatchNorm3d(2, **kw)]
        self.instance_norm = nn.InstanceNorm1d(2, affine=True, track_running_stats=True, **kw)
        self.norms = {"layer": nn.LayerNorm(4, **kw), "group": nn.GroupNorm(2, 4, **kw), "rms": nn.RMSNorm(4, **kw)}
        self.prelu = nn.PReLU(2, **kw)
        self.swiglu = nn.SwiGLU(4, 8, **kw)
        self.recurrent = [nn.RNN(4, 3, **kw), nn.LSTM(4, 3, num_layers=2, bidirectional=True, **kw),
                          nn.GRU(4, 3, **kw)]
        self.attention = nn.MultiHeadAttention(4, 2, **kw)
        self.encoder = nn.TransformerEncoder(4, 2, 8, num_layers=1, final_norm=True, **kw)
        self.decoder = nn.TransformerDecoder(4, 2, 8, num_layers=1, **kw)

    def forward(self, x: ember.Tensor) -> list[ember.Tensor]:
        """`x` is (2, 2, 4): a batch of 2 sequences of 2 steps, or 2 channels of 4 values."""
        images, volumes = x.reshape(1, 2, 2, 4).repeat(1, 1, 2, 1), x.reshape(1, 2, 2, 2, 2).repeat(1, 1, 2, 2, 2)
        ids = (x.abs() * 3).cast("i64").clamp(0, 9)[:, :, 0]
        outs = [self.linear(x), self.bilinear(x, x[..., :2]), self.embedding(ids)]
        outs += [conv(inp) for conv, inp in zip(self.convs, (x, images, volumes))]
        outs += [deconv(inp) for deconv, inp in zip(self.deconvs, (x, images, volumes))]
        outs += [norm(inp) for norm, inp in zip(self.batch_norms, (x, images, volumes))]
        outs += [self.instance_norm(x), self.prelu(x), self.swiglu(x), self.attention(x)]
        outs += [norm(x if name != "group" else x.transpose(1, 2)) for name, norm in self.norms.items()]
        outs += [ember.cat([rnn(x)[0] for rnn in self.recurrent], dim=-1)]
        outs += [self.decoder(x, self.encoder(x))]
        return outs


def make_input(dtype="f32") -> ember.Tensor:
    return ember.tensor(np.random.default_rng(0).standard_normal((2, 2, 4)), dtype=dtype)


@pytest.fixture(scope="module")
def trained() -> EveryLayer:
    """A model whose buffers moved away from their initial values (one training-mode forward)."""
    ember.seed(0)
    model = EveryLayer()
    model(make_input() * 2 + 1)
    return model.eval()


def assert_same_outputs(a: nn.Module, b: nn.Module, x: ember.Tensor) -> None:
    for i, (got, want) in enumerate(zip(a(x), b(x), strict=True)):
        assert got.numpy().tobytes() == want.numpy().tobytes(), f"output {i}"


@pytest.mark.parametrize("name", FORMATS)
def test_round_trip_is_bit_identical(tmp_path, trained, name):
    path = tmp_path / name
    save_module(trained, path)
    ember.seed(1)
    fresh = EveryLayer().eval()
    assert module_state(fresh).keys() == module_state(trained).keys()
    report = load_module(fresh, path)
    assert report.ok
    assert_same_state(module_state(fresh), module_state(trained))
    assert fresh.batch_norms[0].num_batches_tracked.item() == 1
    assert_same_outputs(fresh, trained, make_input())


def test_metadata_records_version_and_class(tmp_path, trained):
    save_module(trained, tmp_path / "m.ember", metadata={"epoch": "3"})
    _, metadata = load(tmp_path / "m.ember")
    assert metadata == {"epoch": "3", VERSION_KEY: ember.__version__, CLASS_KEY: "EveryLayer"}


def test_pytorch_files_carry_no_metadata(tmp_path, trained):
    with pytest.raises(StoreError, match="carry no metadata"):
        save_module(trained, tmp_path / "m.pt", metadata={"epoch": "3"})


def test_format_argument_overrides_the_extension(tmp_path):
    save_module(nn.Linear(2, 3), tmp_path / "weights.data", format="safetensors")
    assert load_module(nn.Linear(2, 3), tmp_path / "weights.data").ok


def test_load_moves_values_to_the_module_device(tmp_path):
    source = nn.Linear(3, 2)
    save_module(source, tmp_path / "m.ember")
    target = nn.Linear(3, 2).to(ember.Device.numpy().autodiff())
    load_module(target, tmp_path / "m.ember")
    assert target.weight.device == ember.Device.numpy().autodiff() and target.weight.requires_grad
    np.testing.assert_array_equal(target.weight.numpy(), source.weight.numpy())


def test_native_file_is_used_memory_mapped(tmp_path):
    save_module(nn.Linear(8, 8), tmp_path / "m.ember")
    model = nn.Linear(8, 8)
    load_module(model, tmp_path / "m.ember")
    base = model.weight.numpy()
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def test_torch_reads_a_saved_pt_file(tmp_path, trained):
    save_module(trained, tmp_path / "m.pt")
    loaded = torch.load(tmp_path / "m.pt", weights_only=True)
    state = module_state(trained)
    assert list(loaded) == list(state)
    for key, array in state.items():
        np.testing.assert_array_equal(loaded[key].numpy(), array, err_msg=key)


# ---- dtypes ---------------------------------------------------------------------------------------

def test_values_take_each_parameter_dtype(tmp_path, trained):
    save_module(trained, tmp_path / "m.safetensors")
    half = EveryLayer(dtype="f16")
    assert load_module(half, tmp_path / "m.safetensors").ok
    assert half.linear.weight.dtype == ember.f16
    assert half.batch_norms[0].num_batches_tracked.dtype == ember.i64
    np.testing.assert_array_equal(half.linear.weight.numpy(), trained.linear.weight.numpy().astype(np.float16))


def test_cast_rounds_the_file_before_loading(tmp_path):
    source = nn.Linear(3, 2)
    save_module(source, tmp_path / "m.ember")
    target = nn.Linear(3, 2)
    load_module(target, tmp_path / "m.ember", cast="bf16")
    assert target.weight.dtype == ember.f32
    rounded = source.weight.cast("bf16").cast("f32").numpy()
    np.testing.assert_array_equal(target.weight.numpy(), rounded)


def test_bf16_model_round_trip(tmp_path):
    source = nn.Linear(3, 2, dtype="bf16")
    save_module(source, tmp_path / "m.safetensors")
    target = nn.Linear(3, 2, dtype="bf16")
    load_module(target, tmp_path / "m.safetensors")
    assert target.weight.numpy().tobytes() == source.weight.numpy().tobytes()


# ---- strict and partial loading -------------------------------------------------------------------

class Small(nn.Module):
    def __init__(self, hidden: int = 4):
        self.body = nn.Linear(3, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.head = nn.Linear(hidden, 2)


def test_strict_load_lists_missing_and_unexpected_keys_and_loads_nothing(tmp_path):
    state = module_state(Small())
    del state["head.bias"]
    state["extra.weight"] = np.zeros(2, np.float32)
    save(tmp_path / "m.ember", state)
    target = Small()
    before = target.body.weight.numpy().copy()
    with pytest.raises(KeyError, match=r"m\.ember.*missing keys \['head\.bias'\].*unexpected keys \['extra\.weight'\]"):
        load_module(target, tmp_path / "m.ember")
    np.testing.assert_array_equal(target.body.weight.numpy(), before)


def test_partial_load_loads_what_fits_and_reports_the_rest(tmp_path):
    source = Small(hidden=5)
    source.head = nn.Linear(4, 2)  # fits Small(4)'s head
    save_module(source, tmp_path / "m.ember")
    target = Small()
    report = load_module(target, tmp_path / "m.ember", strict=False)
    assert report.missing == [] and report.unexpected == []
    assert ("body.weight", (4, 3), (5, 3)) in report.mismatched
    assert {k for k, _, _ in report.mismatched} == {"body.weight", "body.bias", "norm.weight", "norm.bias",
                                                    "norm.running_mean", "norm.running_var"}
    np.testing.assert_array_equal(target.head.weight.numpy(), source.head.weight.numpy())


def test_strict_shape_mismatch_names_the_file_key_and_both_shapes(tmp_path):
    save_module(nn.Linear(3, 5), tmp_path / "m.ember")
    with pytest.raises(ShapeError, match=r"m\.ember.*weight: expected \(4, 3\), found \(5, 3\)"):
        load_module(nn.Linear(3, 4), tmp_path / "m.ember")


def test_prefix_and_rename_select_a_sub_model(tmp_path):
    source = Small()
    save_module(source, tmp_path / "m.ember")
    head = nn.Linear(4, 2)
    assert load_module(head, tmp_path / "m.ember", prefix="head.").ok
    np.testing.assert_array_equal(head.weight.numpy(), source.head.weight.numpy())
    renamed = nn.Linear(4, 2)
    report = load_module(renamed, tmp_path / "m.ember", rename=[(r"^head\.", "")], strict=False)
    assert report.missing == [] and "body.weight" in report.unexpected


def test_unknown_adapter():
    with pytest.raises(ValueError, match="unknown adapter 'tf'"):
        load_module(nn.Linear(1, 1), "unused.ember", adapter="tf")


def test_custom_adapter_function(tmp_path):
    save(tmp_path / "m.ember", {"W": np.ones((3, 2), np.float32), "b": np.zeros(3, np.float32)})
    target = nn.Linear(2, 3)
    load_module(target, tmp_path / "m.ember", adapter=lambda module, state: {"weight": state["W"], "bias": state["b"]})
    np.testing.assert_array_equal(target.weight.numpy(), np.ones((3, 2)))


# ---- damaged files --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FORMATS)
def test_truncated_file_raises_store_error_naming_it(tmp_path, name):
    path = tmp_path / name
    save_module(Small(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match=name.replace(".", r"\.")):
        load_module(Small(), path)


@pytest.mark.parametrize("name", FORMATS)
def test_corrupt_header_raises_store_error_naming_it(tmp_path, name):
    path = tmp_path / name
    save_module(Small(), path)
    data = bytearray(path.read_bytes())
    # Overwrite the bytes that describe the tensors: the native and safetensors JSON headers (after
    # their length fields) and, for PyTorch's zip, the first record's name and pickle.
    data[16:80] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=name.replace(".", r"\.")):
        load_module(Small(), path)


def test_garbage_file_raises_store_error(tmp_path):
    path = tmp_path / "m.ember"
    path.write_bytes(b"not a model at all")
    with pytest.raises(StoreError, match=r"m\.ember"):
        load_module(Small(), path)
