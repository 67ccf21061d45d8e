"""The hostile files of ember issue #27, built here, each refused with ember's own error, quickly,
in little memory and with a short message naming the file (and where a reference exists, refused by
it too, or loaded by it only where docs/store.md says ember is stricter).
"""

from __future__ import annotations

import json
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from ember.config import Config
from ember.errors import ConfigError, StoreError
from ember.settings import load as load_settings
from ember.store import load
from ember.store.native import save_native
from ember.store.safetensors import save_safetensors

from .conftest import attempt

DEEP = "[" * 100_000 + "]" * 100_000
LONG_INT = "9" * 4301  # past Python's 4300-digit limit for int(str)


def refused(path, error=StoreError, **kwargs) -> str:
    """The message of the StoreError `load(path)` raises within the time bound; peak Python memory
    stays under 16 MiB (bombs are refused before they inflate)."""
    tracemalloc.start()
    try:
        got, message = attempt(load, path, error=error, names=(path,), **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got is None, "the hostile file loaded"
    assert peak < 16 << 20, f"peak {peak >> 20} MiB while refusing"
    return message


def torch_refuses(path) -> bool:
    try:
        torch.load(path, weights_only=True)
    except Exception:
        return True
    return False


def rezip(path, edit, compress: dict[str, int] | None = None) -> None:
    """Rewrite the zip at `path` with each member through `edit(name, data)`, CRCs valid."""
    with zipfile.ZipFile(path) as source:
        members = [(i.filename, edit(i.filename, source.read(i))) for i in source.infolist()]
    with zipfile.ZipFile(path, "w") as target:
        for name, data in members:
            kind = next((c for suffix, c in (compress or {}).items() if name.endswith(suffix)), zipfile.ZIP_STORED)
            target.writestr(name, data, compress_type=kind)


def patch_central(path, member: str, **fields) -> None:
    """Overwrite fields of `member`'s central-directory entry in place (offsets per the zip spec)."""
    raw = bytearray(path.read_bytes())
    at = raw.index(b"PK\x01\x02")  # the first entry
    while not raw[at + 46:at + 46 + struct.unpack_from("<H", raw, at + 28)[0]].decode().endswith(member):
        at = raw.index(b"PK\x01\x02", at + 46)
    layout = {"file_size": (24, "<I"), "header_offset": (42, "<I")}
    for field, value in fields.items():
        offset, fmt = layout[field]
        struct.pack_into(fmt, raw, at + offset, value)
    path.write_bytes(bytes(raw))


# --- PyTorch files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("leaf", ["tensor", "int"])
def test_memo_shared_nested_lists(tmp_path, leaf):
    """18 levels of [a, a] pickle to a kilobyte and flatten to 262,144 entries: refused at once."""
    nested = [torch.ones(1), torch.ones(1)] if leaf == "tensor" else [1, 1]
    for _ in range(18):
        nested = [nested, nested]
    path = tmp_path / "shared.pt"
    torch.save({"x": nested}, path)
    assert path.stat().st_size < 4096
    assert "reuses its containers" in refused(path)


def test_a_deflated_byteorder_bomb(tmp_path):
    path = tmp_path / "bomb.pt"
    torch.save({"w": torch.ones(2)}, path)
    rezip(path, lambda name, data: b"little" * (64 << 20 // 6) if name.endswith("byteorder") else data,
          compress={"byteorder": zipfile.ZIP_DEFLATED})
    assert path.stat().st_size < 1 << 20
    assert "byteorder record is longer than 'little'" in refused(path)


def test_a_deflated_storage_bigger_than_its_tensor(tmp_path):
    path = tmp_path / "bomb.pt"
    torch.save({"w": torch.ones(2)}, path)
    rezip(path, lambda name, data: bytes(64 << 20) if name.endswith("data/0") else data,
          compress={"data/0": zipfile.ZIP_DEFLATED})
    assert "declares 2 x f32 but its record has 67108864 bytes" in refused(path)
    assert torch_refuses(path)


def test_members_sharing_their_bytes(tmp_path):
    """Central-directory entries pointing at one deflated member inflate it once each: refused."""
    path = tmp_path / "overlap.pt"
    torch.save({"a": torch.ones(2), "b": torch.zeros(2)}, path)
    rezip(path, lambda name, data: data, compress={"data/0": zipfile.ZIP_DEFLATED, "data/1": zipfile.ZIP_DEFLATED})
    with zipfile.ZipFile(path) as archive:
        first = archive.getinfo(next(n for n in archive.namelist() if n.endswith("data/0"))).header_offset
    patch_central(path, "data/1", header_offset=first)
    assert "overlaps the one before it" in refused(path)


def test_a_member_claiming_more_than_deflate_can(tmp_path):
    path = tmp_path / "claim.pt"
    torch.save({"w": torch.ones(2)}, path)
    rezip(path, lambda name, data: data, compress={"data.pkl": zipfile.ZIP_DEFLATED})
    patch_central(path, "data.pkl", file_size=0xFFFFFFF0)
    assert "more than deflate can" in refused(path)


def test_a_stored_member_whose_sizes_disagree(tmp_path):
    path = tmp_path / "sizes.pt"
    torch.save({"w": torch.ones(2)}, path)
    with zipfile.ZipFile(path) as archive:
        version = next(n for n in archive.namelist() if n.endswith("/version"))
    patch_central(path, version, file_size=5)
    assert torch_refuses(path)
    assert "has 2 bytes in the archive but claims 5" in refused(path)


def test_a_long_storage_relabelled_float(tmp_path):
    path = tmp_path / "relabel.pt"
    torch.save({"w": torch.arange(4)}, path)
    rezip(path, lambda name, data: data.replace(b"LongStorage", b"FloatStorage") if name.endswith(".pkl") else data)
    assert torch_refuses(path)
    assert "declares 4 x f32 but its record has 32 bytes" in refused(path)


@pytest.mark.parametrize("edit,message", [
    ((b"K\x00K\x03\x86", b"K\x00\x8a\x09" + (2**63).to_bytes(9, "little") + b"\x86"), "larger than any array"),
    ((b"X\x03\x00\x00\x00cpu", b"X\x03\x00\x00\x00bpu"), "not a device ember can read from"),
], ids=["shape-0-2**63", "unknown-location"])
def test_damaged_torch_pickles(tmp_path, edit, message):
    path = tmp_path / "edited.pt"
    torch.save({"w": torch.zeros(0, 3)}, path)
    rezip(path, lambda name, data: data.replace(*edit) if name.endswith(".pkl") else data)
    assert message in refused(path)
    assert torch_refuses(path)


def test_an_integer_too_long_for_text(tmp_path):
    path = tmp_path / "long.pt"
    torch.save({"w": torch.ones(1), "n": 10**4400}, path)
    assert "'n' holds an integer too long to write as text" in refused(path)


def test_bytes_before_the_zip_archive(tmp_path):
    """Python's zipfile finds an archive after a prefix (self-extracting zips); torch's reader does not."""
    path = tmp_path / "prefixed.pt"
    torch.save({"w": torch.ones(2)}, path)
    path.write_bytes(b"PK\x03\x04" + path.read_bytes())
    assert torch_refuses(path)
    assert "does not start at the file's first byte" in refused(path)


def test_a_rebuild_call_with_an_extra_argument(tmp_path):
    path = tmp_path / "extra.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    raw = path.read_bytes()
    # the rebuild's arguments end with its hooks, OrderedDict() (REDUCE, BINPUT), before TUPLE: add two Nones
    at = raw.index(b"tq", raw.index(b"OrderedDict"))
    path.write_bytes(raw[:at] + b"NN" + raw[at:])
    assert torch_refuses(path)
    assert "_rebuild_tensor_v2 takes 6 to 7 arguments, the file passes 8" in refused(path)


@pytest.mark.parametrize("where", ["entry", "end record"])
def test_a_multi_disk_claim(tmp_path, where):
    path = tmp_path / "disks.pt"
    torch.save({"w": torch.ones(2)}, path)
    raw = bytearray(path.read_bytes())
    at = raw.index(b"PK\x01\x02") + 34 if where == "entry" else len(raw) - 18  # disk number start / this disk
    struct.pack_into("<H", raw, at, 2)
    path.write_bytes(bytes(raw))
    assert torch_refuses(path) or where == "end record"  # torch reads past that field when zip64 is there
    assert "span several disks" in refused(path)


def test_a_central_directory_hiding_entries(tmp_path):
    """A comment length that swallows the directory's last entries: zipfile lists fewer than the end
    record declares; torch's reader refuses the archive."""
    path = tmp_path / "hidden.pt"
    torch.save({"w": torch.ones(2)}, path)
    with zipfile.ZipFile(path) as archive:
        members = archive.namelist()
    raw = bytearray(path.read_bytes())
    at = [i for i in range(len(raw) - 4) if raw[i:i + 4] == b"PK\x01\x02"][-3]  # the third entry from the end
    name_len, extra_len = struct.unpack_from("<HH", raw, at + 28)
    struct.pack_into("<H", raw, at + 32, raw.index(b"PK\x06\x06") - (at + 46 + name_len + extra_len))
    path.write_bytes(bytes(raw))
    assert len(members) > 3 and torch_refuses(path)
    assert "does not hold the" in refused(path)


def test_requires_grad_on_an_integer_tensor(tmp_path):
    path = tmp_path / "grad.pt"
    torch.save({"w": torch.arange(3)}, path)
    rezip(path, lambda name, data: data.replace(b"\x89", b"\x88", 1) if name.endswith(".pkl") else data)
    assert torch_refuses(path)
    assert "requires_grad True" in refused(path)


# --- safetensors -----------------------------------------------------------------------------------

def _safetensors(path, header_text: str, data: bytes = b"") -> None:
    raw = header_text.encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


ENTRY = '{"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'


@pytest.mark.parametrize("header,data,message", [
    ('{"a": ' + ENTRY + ', "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}', bytes(12), "overlaps"),
    ('{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', bytes(8), "leaves bytes 0..4 unused"),
    ('{"a": ' + ENTRY + '}', bytes(12), "the file goes on to"),
    ('{"__metadata__": [], "a": ' + ENTRY + '}', bytes(8), "'__metadata__' must be an object of strings"),
    ('{"a": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}}', bytes(8), "is not a safetensors dtype"),
    ('{"a": {"dtype": "F32", "shape": [0, 9223372036854775808], "data_offsets": [0, 0]}}', b"",
     "larger than any array"),
    ('{"a": ' + ENTRY + ', "x": ' + DEEP + '}', bytes(8), "nests too deeply"),
    ('{"a": {"dtype": "F32", "shape": [' + LONG_INT + '], "data_offsets": [0, 8]}}', bytes(8), "is out of range"),
    ('{"a": {"dtype": "' + "F" * 1_000_000 + '", "shape": [2], "data_offsets": [0, 8]}}', bytes(8), "dtype"),
    ('{"a": {"dtype": "F32", "shape": [' + "1" * 30 + '], "data_offsets": [0, 8]}}', bytes(8), "larger than any array"),
], ids=["overlap", "gap", "trailing", "metadata-list", "dtype-list", "shape-0-2**63", "deep", "4301-digits",
        "1MB-dtype", "30-digits"])
def test_hostile_safetensors(tmp_path, header, data, message):
    path = tmp_path / "m.safetensors"
    _safetensors(path, header, data)
    assert message in refused(path)
    with pytest.raises(Exception):
        load_file(str(path))


# --- native ----------------------------------------------------------------------------------------

def _native_with_header(path, edit) -> None:
    save_native(path, {"b": np.arange(3, dtype=np.int64)})
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw, 8)
    header = edit(raw[16:16 + n].rstrip(b" ").decode())
    padded = header.encode() + b" " * (-(16 + len(header.encode())) % 64)
    path.write_bytes(raw[:8] + struct.pack("<Q", len(padded)) + padded + raw[16 + n:])


@pytest.mark.parametrize("edit,message", [
    (lambda h: h.replace('"dtype"', '"dtypd"'), "exactly dtype, nbytes, offset, shape"),  # one bit: e -> d
    (lambda h: h.replace('"offset":0', '"offset":64'), "should start at 0"),
    (lambda h: h.replace('"b":', '"c":{"dtype":"i64","shape":[3],"offset":0,"nbytes":24},"b":'),
     "gaps or overlaps"),
    (lambda h: h.replace('"tensors":{', '"tensors":{"b":{"dtype":"i64","shape":[3],"offset":0,"nbytes":24},'),
     "duplicate key 'b'"),
    (lambda h: h.replace('"shape":[3]', '"shape":[0,9223372036854775808]'), "larger than any array"),
    (lambda h: h.replace('"metadata":{}', '"metadata":{"x":' + DEEP + '}'), "nests too deeply"),
    (lambda h: h.replace('"offset":0', '"offset":' + LONG_INT), "is out of range"),
    (lambda h: h.replace('"metadata":{}', '"metadata":[]'), "'metadata' must be an object of strings"),
], ids=["dtype-key-bit", "gap", "overlap", "duplicate", "shape-0-2**63", "deep", "4301-digits", "metadata-list"])
def test_hostile_native(tmp_path, edit, message):
    path = tmp_path / "m.ember"
    _native_with_header(path, edit)
    assert message in refused(path)


# --- sharded indexes -------------------------------------------------------------------------------

@pytest.mark.parametrize("index,message", [
    ({"weight_map": {"w": "other.index.json"}}, "is a sharded file"),
    ('{"weight_map": {"w": "s.safetensors"}, "metadata": ' + DEEP + '}', "nests too deeply"),
    ('{"weight_map": {"w": "s.safetensors"}, "metadata": {"total_size": ' + LONG_INT + '}}', "is out of range"),
    ({"weight_map": {"w": "s.safetensors"}, "weightmap": {}}, "unknown key(s) ['weightmap']"),
    ({"weight_map": {"w": "s.safetensors"}, "metadata": []}, "'metadata' must be an object"),
    ({"weight_map": {}}, "holds 'w', which the weight map does not list"),
], ids=["index-as-shard", "deep", "4301-digits", "unknown-key", "metadata-list", "unlisted-tensor"])
def test_hostile_sharded_indexes(tmp_path, index, message):
    save_safetensors(tmp_path / "s.safetensors", {"w": np.ones(2, np.float32)})
    (tmp_path / "other.index.json").write_text(json.dumps({"weight_map": {}}))
    path = tmp_path / "model.index.json"
    if index == {"weight_map": {}}:  # a map that lists nothing, next to a shard it would have to name
        index = {"weight_map": {"v": "s.safetensors"}}
        save_safetensors(tmp_path / "s.safetensors", {"v": np.ones(1, np.float32), "w": np.ones(2, np.float32)})
    path.write_text(index if isinstance(index, str) else json.dumps(index))
    assert message in refused(path)


# --- config files ----------------------------------------------------------------------------------

class _Small(Config):
    steps: int = 1


@pytest.mark.parametrize("text", ['{"steps": ' + DEEP + '}', '{"steps": ' + LONG_INT + '}', '{"steps": "\udc00"}'],
                         ids=["deep", "4301-digits", "surrogate"])
def test_hostile_config_json(tmp_path, text):
    path = tmp_path / "c.json"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    got, message = attempt(_Small.load, path, error=ConfigError, names=(path,))
    assert got is None and len(message) < 1000


@pytest.mark.parametrize("text", ["[memory]\npage_size_mb = " + "[" * 5000 + "]" * 5000,
                                  "[memory]\npage_size_mb = " + LONG_INT, "[memory]\npage_size_mb = '\xff'"],
                         ids=["deep", "4301-digits", "not-utf8"])
def test_hostile_settings_toml(tmp_path, monkeypatch, text):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-user-config"))
    (tmp_path / "ember.toml").write_bytes(text.encode("latin-1"))
    got, message = attempt(load_settings, tmp_path, {}, error=ConfigError, names=(tmp_path / "ember.toml",))
    assert got is None and len(message) < 1000
