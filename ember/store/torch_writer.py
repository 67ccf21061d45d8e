"""Write a state as a PyTorch zip file that `torch.load(path, weights_only=True)` reads, without torch.

The archive is what `torch.save(state_dict)` writes: `<stem>/data.pkl`, a pickle of an
`OrderedDict` of `torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())`
calls whose storages are persistent ids `("storage", torch.FloatStorage, key, "cpu", numel)`;
`<stem>/data/<key>` with each tensor's contiguous little-endian bytes; `<stem>/byteorder`
and `<stem>/version`. Records are stored uncompressed and start on 64-byte boundaries, as torch's
own writer does, so both torch and `load_torch` can memory-map them. The pickle is written opcode by
opcode because pickling torch's globals by reference would need torch imported.

Example:
    >>> save_torch("model.pt", {"fc.weight": np.ones((2, 3), np.float32)})
    >>> torch.load("model.pt", weights_only=True)["fc.weight"].shape
    torch.Size([2, 3])
"""

from __future__ import annotations

import os
import struct
import zipfile
from typing import BinaryIO, Mapping

import numpy as np

from ..dtype import DType
from ..errors import StoreError
from ..atomic import atomic_open
from .state import check_state, little_endian_bytes
from .torch_unpickler import STORAGE_DTYPES

__all__ = ["save_torch"]

_STORAGE_NAMES: dict[DType, str] = {dtype: name for name, dtype in STORAGE_DTYPES.items()}
_ALIGNMENT = 64
_LOCAL_HEADER_SIZE = 30
_ZIP64_EXTRA_SIZE = 20  # zipfile appends this to the local header when force_zip64 is set
_PADDING_ID = 0x4246  # "FB": the extra-field id torch's own writer pads with


def save_torch(path: str | os.PathLike, state: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Write `state` as a PyTorch state dict (`torch.load` reads it), atomically.

    PyTorch files hold no string metadata, so passing any raises `StoreError`.

    Example:
        >>> save_torch("model.pt", {"bn.num_batches_tracked": np.array(5)})
    """
    if metadata:
        raise StoreError(f"{os.fspath(path)}: PyTorch files carry no metadata; use .ember or .safetensors to keep it")
    entries = check_state(path, state)
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0] or "archive"
    stem = "".join(c if c.isalnum() or c in "_-" else "_" for c in stem)
    with atomic_open(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as archive:
        _write(archive, f, f"{stem}/data.pkl", _pickle(entries))
        _write(archive, f, f"{stem}/byteorder", b"little")
        for key, (_, array, _) in enumerate(entries):
            _write(archive, f, f"{stem}/data/{key}", little_endian_bytes(array))
        _write(archive, f, f"{stem}/version", b"3\n")


def _write(archive: zipfile.ZipFile, f: BinaryIO, name: str, data: bytes | memoryview) -> None:
    """One stored record whose data starts on a 64-byte boundary of the file `f` the archive writes."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    # zipfile writes each record at the end of `f` and leaves the position there
    start = f.tell() + _LOCAL_HEADER_SIZE + len(name.encode()) + _ZIP64_EXTRA_SIZE + 4
    padding = -start % _ALIGNMENT
    info.extra = struct.pack("<HH", _PADDING_ID, padding) + b"Z" * padding
    # force_zip64 makes the local header's size predictable whatever the record's size
    with archive.open(info, "w", force_zip64=True) as record:
        record.write(data)


def _pickle(entries: list[tuple[str, np.ndarray, DType]]) -> bytes:
    """Protocol-2 opcodes for an OrderedDict of tensors, each its own storage, keys '0', '1', ..."""
    out = bytearray(b"\x80\x02" + _global("collections", "OrderedDict") + b")R(")
    for storage_key, (name, array, dtype) in enumerate(entries):
        strides = [int(np.prod(array.shape[i + 1:], dtype=np.int64)) for i in range(array.ndim)]
        out += _string(name) + _global("torch._utils", "_rebuild_tensor_v2") + b"("
        out += b"(" + _string("storage") + _global("torch", _STORAGE_NAMES[dtype]) + _string(str(storage_key))
        out += _string("cpu") + _int(array.size) + b"tQ"  # TUPLE, BINPERSID
        out += _int(0) + _tuple(array.shape) + _tuple(strides) + b"\x89"  # offset, size, stride, False
        out += _global("collections", "OrderedDict") + b")R" + b"tR"  # hooks; TUPLE, REDUCE
    return bytes(out + b"u.")  # SETITEMS, STOP


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True) if value else b""
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1: any size, one opcode


def _tuple(values) -> bytes:
    return b"(" + b"".join(_int(int(v)) for v in values) + b"t"
