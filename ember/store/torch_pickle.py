"""Read PyTorch `.pt` / `.pth` / `.bin` files (state dicts, checkpoints) without torch and without
executing pickled code.

Both containers are read: the zip archive `torch.save` writes since 1.6 and the legacy stream. The
pickle goes through `SafeUnpickler` (`torch_unpickler`), which refuses every global but a state dict's
tensor and storage helpers. Tensors come back as NumPy views of their storage bytes with torch's own
offset, shape and strides (read-only views into the mapped file with `mmap=True`, the default). The
loaded object is flattened: nested keys join with dots, and non-tensor leaves go into the metadata as
JSON text, so nothing is dropped; `key=` first selects one top-level entry. Formats and the safety
argument: docs/store.md, "PyTorch files, and why loading one is safe".

Example:
    >>> state, metadata = load_torch("checkpoint.pt", key="state_dict")
    >>> state["fc.weight"].shape
    (10, 784)
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from ..errors import StoreError, brief
from .mapped import map_file
from .state import check_shape
from .torch_unpickler import STAND_INS, SafeUnpickler, StorageRef, TensorRef

__all__ = ["load_torch", "ZIP_MAGIC", "is_legacy_stream"]

ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
_LOCAL_HEADER = struct.Struct("<4s22xHH")
# Deflate cannot expand more than 1032-fold; a member claiming more is damaged or a bomb.
_MAX_INFLATION = 1032
_MAX_PICKLE = 1 << 28  # 256 MiB: a state dict's pickle needs ~100 bytes per tensor
_MAX_DEPTH = 64  # nesting of dicts and lists in the loaded object; a checkpoint needs a handful
_CONTAINERS = (dict, list, tuple, set, frozenset)


def load_torch(path: str | os.PathLike, mmap: bool = True, key: str | None = None
               ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a PyTorch file: `(state, metadata)` with nested containers flattened to dotted keys.

    `key` selects one entry of a top-level dict first (e.g. `"state_dict"`, `"model"`).

    Validated at least as strictly as `torch.load(weights_only=True)`: storage records of exactly
    their declared size, tensors inside their storages, known opcodes, globals and devices; zip
    members bounded before they inflate; an object no larger, walked as a tree, than its pickle
    (docs/store.md, "Hostile files"). Anything else raises `StoreError` naming the file.

    Example:
        >>> state, _ = load_torch("resnet18.pth")
        >>> state["bn1.num_batches_tracked"].dtype
        dtype('int64')
    """
    name = os.fspath(path)
    buffer = map_file(path, mmap)
    head = bytes(buffer[:4])
    if head == ZIP_MAGIC:
        obj, records, byteorder, node_limit = _read_zip(name, buffer)
    elif is_legacy_stream(head):
        with open(path, "rb") as stream:
            obj, records, node_limit = _read_legacy(name, stream, buffer)
        byteorder = "little"
    elif bytes(buffer[257:262]) == b"ustar":
        raise StoreError(f"{name}: the tar format of torch < 0.4 is not supported; re-save it with a newer torch")
    else:
        raise StoreError(f"{name}: not a PyTorch file: expected a zip archive (PK\\x03\\x04) or a legacy "
                         f"pickle stream (\\x80 and a protocol 2 to 5), found {head!r}")
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            found = _describe(obj)
            raise StoreError(f"{name}: no top-level key {key!r}; the file holds {found}")
        obj = obj[key]
    if not isinstance(obj, (dict, list, tuple)):
        raise StoreError(f"{name}: holds {_describe(obj)}, not a dict of tensors")
    _check_tree(name, obj, node_limit)
    state: dict[str, np.ndarray] = {}
    metadata: dict[str, str] = {}
    _flatten(name, obj, "", _Storages(records, "<" if byteorder == "little" else ">"), state, metadata)
    return state, metadata


def is_legacy_stream(head: bytes) -> bool:
    """Whether a file's first bytes start a pickle, as torch's legacy format does (the pickle of its
    magic number 0x1950a86a20f9469cfc6c, in whichever protocol `pickle_protocol=` chose).

    Example:
        >>> is_legacy_stream(b"\\x80\\x02\\x8a\\x0a")
        True
    """
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _describe(obj: Any) -> str:
    if isinstance(obj, dict):
        keys = list(obj)
        return ", ".join(map(brief, keys[:10])) + (f" and {len(keys) - 10} more keys" if len(keys) > 10 else "")
    return "a single tensor" if isinstance(obj, TensorRef) else f"a {type(obj).__name__}"


class _Storages(NamedTuple):
    """The raw bytes of each storage record, by key, and the byte order they were written in."""

    records: dict[str, memoryview]
    byteorder: str  # "<" or ">", as NumPy spells it


def _read_zip(name: str, buffer: memoryview) -> tuple[Any, dict[str, memoryview], str, int]:
    # zipfile reads the directory through its own handle; the records themselves are sliced out of
    # `buffer`, so a memory-mapped file is never copied.
    try:
        with zipfile.ZipFile(name) as archive:
            _check_members(name, buffer, archive)
            names = archive.namelist()
            if any(n.count("/") >= 2 and n.split("/")[1] == "code" for n in names):
                raise StoreError(f"{name}: a TorchScript archive (torch.jit.save) holds code, not a state dict; "
                                 "save model.state_dict() with torch.save instead")
            pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(pickles) != 1:
                raise StoreError(f"{name}: expected one <name>/data.pkl in the zip archive, found {len(pickles)}")
            prefix = pickles[0][: -len("data.pkl")]
            stray = [n for n in names if not n.startswith(prefix)]
            if stray:  # as torch: every record lives in the archive's one folder
                raise StoreError(f"{name}: zip member {brief(stray[0])} is outside the archive's folder "
                                 f"{brief(prefix)}")
            if archive.getinfo(pickles[0]).file_size > _MAX_PICKLE:
                raise StoreError(f"{name}: {brief(pickles[0])} is over {_MAX_PICKLE >> 20} MiB; not a state dict")
            with archive.open(pickles[0]) as pkl:
                unpickler = SafeUnpickler(pkl, name)
                obj = unpickler.load()
            byteorder = "little"
            if prefix + "byteorder" in names:
                if archive.getinfo(prefix + "byteorder").file_size > len("little"):
                    raise StoreError(f"{name}: the byteorder record is longer than 'little'")
                byteorder = archive.read(prefix + "byteorder").decode("ascii", "replace")
            if byteorder not in ("little", "big"):
                raise StoreError(f"{name}: byteorder record says {byteorder!r}, expected 'little' or 'big'")
            records = {}
            for ref in unpickler.storages.values():
                record = f"{prefix}data/{ref.key}"
                if record not in names:
                    raise StoreError(f"{name}: missing record {brief(record)} in the zip archive")
                info = archive.getinfo(record)
                _check_size(name, ref, info.file_size)
                records[ref.key] = _record(name, buffer, archive, info)
    except StoreError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError, RuntimeError, ValueError,
            OSError, zlib.error) as e:
        # EOFError: a member cut short; NotImplementedError: an unknown compression; RuntimeError: encryption;
        # OSError: a directory entry pointing before the start of the file; zlib.error: a damaged deflate stream
        raise StoreError(f"{name}: corrupt zip archive: {type(e).__name__}: {str(e)[:200]}") from e
    return obj, records, byteorder, unpickler.opcodes


def _check_members(name: str, buffer: memoryview, archive: zipfile.ZipFile) -> None:
    """Check the members' layout as torch's reader needs it (the archive starts the file) and bound what
    inflating them can cost: members stored or deflated (as torch reads), each
    inflating at most 1032-fold (deflate's limit), none overlapping another (so no byte is inflated
    twice, and the whole archive inflates to at most 1032 times the file)."""
    members, end = archive.infolist(), archive.start_dir
    for info in members:  # the entries the directory lists fill it, up to the end-of-directory record
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        end += 46 + len(info.orig_filename.encode(encoding)) + len(info.extra) + len(info.comment)
    ends = bytes(buffer[end:end + 4]) in (b"PK\x06\x06", b"PK\x05\x06")
    if any(info.volume for info in members):
        raise StoreError(f"{name}: the zip archive claims to span several disks")
    if not ends or _declared_entries(name, buffer) != len(members):
        raise StoreError(f"{name}: the zip's central directory does not hold the {len(members)} entries it lists")
    end = 0
    if members and min(info.header_offset for info in members) != 0:
        raise StoreError(f"{name}: the zip archive does not start at the file's first byte, as torch's reader needs")
    for info in sorted(members, key=lambda i: i.header_offset):
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise StoreError(f"{name}: member {brief(info.filename)} uses zip compression {info.compress_type}; "
                             "torch files are stored or deflated")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise StoreError(f"{name}: stored member {brief(info.filename)} has {info.compress_size} bytes in the "
                             f"archive but claims {info.file_size}")
        if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > _MAX_INFLATION * max(info.compress_size, 1):
            raise StoreError(f"{name}: member {brief(info.filename)} claims to inflate {info.compress_size} bytes to "
                             f"{info.file_size}, more than deflate can")
        if info.header_offset < end or info.header_offset + _LOCAL_HEADER.size > len(buffer):
            raise StoreError(f"{name}: member {brief(info.filename)} at byte {info.header_offset} overlaps the one "
                             f"before it or lies past the end of the file")
        _, name_len, extra_len = _LOCAL_HEADER.unpack_from(buffer, info.header_offset)
        end = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size


def _declared_entries(name: str, buffer: memoryview) -> int:
    """The entry count of the end-of-central-directory record (the zip64 one's where it defers to it),
    after checking the record ends the file and describes one disk, as torch's reader needs."""
    if len(buffer) < 22 or bytes(buffer[-22:-18]) != b"PK\x05\x06":
        raise StoreError(f"{name}: the zip archive does not end with its end-of-directory record, as torch writes it")
    disk, directory_disk, here, count = struct.unpack_from("<HHHH", buffer, len(buffer) - 18)
    single = disk == directory_disk == 0 and here == count
    if count == 0xFFFF and len(buffer) >= 42 and bytes(buffer[-42:-38]) == b"PK\x06\x07":
        locator_disk, at, disks = struct.unpack_from("<IQI", buffer, len(buffer) - 38)
        if at + 56 <= len(buffer) and bytes(buffer[at:at + 4]) == b"PK\x06\x06":
            disk, directory_disk, here, count = struct.unpack_from("<IIQQ", buffer, at + 16)
            single = locator_disk == disk == directory_disk == 0 and disks == 1 and here == count
    if not single:
        raise StoreError(f"{name}: the zip archive claims to span several disks")
    return count


def _record(name: str, buffer: memoryview, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> memoryview:
    if info.compress_type != zipfile.ZIP_STORED:  # torch never compresses, but other zip tools might
        return memoryview(archive.read(info))
    if info.header_offset + _LOCAL_HEADER.size > len(buffer):
        raise StoreError(f"{name}: record {brief(info.filename)} lies past the end of the file")
    signature, name_len, extra_len = _LOCAL_HEADER.unpack_from(buffer, info.header_offset)
    begin = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    if signature != ZIP_MAGIC or begin + info.file_size > len(buffer):
        raise StoreError(f"{name}: record {brief(info.filename)} needs bytes {begin}..{begin + info.file_size} "
                         f"but the file has {len(buffer)}")
    return buffer[begin:begin + info.file_size]  # a slice of the map: no copy


def _check_size(name: str, ref: StorageRef, nbytes: int) -> None:
    # as torch: a storage's record holds exactly what its declared element count needs
    if nbytes != ref.numel * ref.dtype.itemsize:
        raise StoreError(f"{name}: storage {brief(ref.key)} declares {ref.numel} x {ref.dtype.name} "
                         f"but its record has {nbytes} bytes")


def _read_legacy(name: str, stream: BinaryIO, buffer: memoryview) -> tuple[Any, dict[str, memoryview], int]:
    # the pickles are read from `stream`, which each unpickler leaves just past its STOP opcode;
    # the storages that follow are sliced out of `buffer`
    preamble = SafeUnpickler(stream, name)
    if preamble.load() != _LEGACY_MAGIC_NUMBER:
        raise StoreError(f"{name}: legacy magic number mismatch; corrupt file?")
    if (version := SafeUnpickler(stream, name).load()) != _LEGACY_PROTOCOL:
        raise StoreError(f"{name}: legacy protocol version {brief(version)}, expected {_LEGACY_PROTOCOL}")
    sys_info = SafeUnpickler(stream, name).load()
    if not isinstance(sys_info, dict) or sys_info.get("little_endian") is not True:
        raise StoreError(f"{name}: only little-endian legacy files are supported (sys_info {brief(sys_info)})")
    unpickler = SafeUnpickler(stream, name, legacy=True)
    obj = unpickler.load()
    keys = SafeUnpickler(stream, name).load()
    if not isinstance(keys, list) or set(keys) != set(unpickler.storages):
        raise StoreError(f"{name}: legacy storage key list {brief(keys)} does not match the storages the object uses")
    offset, records = stream.tell(), {}
    for key in keys:
        ref = unpickler.storages[key]
        if offset + 8 > len(buffer):
            raise StoreError(f"{name}: storage {brief(key)} header needs bytes {offset}..{offset + 8} "
                             f"but the file has {len(buffer)}")
        (numel,) = struct.unpack_from("<q", buffer, offset)
        _check_size(name, ref, numel * ref.dtype.itemsize)
        begin, end = offset + 8, offset + 8 + numel * ref.dtype.itemsize
        if end > len(buffer):
            raise StoreError(f"{name}: storage {brief(key)} needs bytes {begin}..{end} but the file has {len(buffer)}")
        records[key] = buffer[begin:end]
        offset = end
    return obj, records, unpickler.opcodes


def _flatten(name: str, obj: Any, prefix: str, storages: _Storages,
             state: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for k, value in items:
        key = f"{prefix}{k}"
        if isinstance(value, TensorRef):
            state[key] = _view(name, key, value, storages.records[value.storage.key], storages.byteorder)
        elif isinstance(value, (dict, list, tuple)) and value and _holds_tensors(value):
            _flatten(name, value, key + ".", storages, state, metadata)
        else:
            metadata[key] = _text(name, key, value)


def _text(name: str, key: str, value: Any) -> str:
    """A non-tensor leaf as metadata: JSON text, else its repr (sets, bytes, tuple keys)."""
    try:
        try:
            return json.dumps(value)
        except TypeError:
            return repr(value)
    except ValueError:  # an int past Python's 4300-digit limit for text
        raise StoreError(f"{name}: {brief(key)} holds an integer too long to write as text") from None


def _check_tree(name: str, obj: Any, limit: int) -> None:
    """Refuse objects whose walk as a tree costs more than the pickle could describe as one, and
    torch objects where a state dict has none.

    Each container of a tree costs the pickle at least one opcode, so a tree has at most as many of
    them as the pickle has opcodes (`limit`). Memo references can share containers (`a = [t, t];
    b = [a, a]; ...` doubles per level in a few bytes) or make one contain itself; flattening those
    to dotted keys would take exponential time and memory, so they are refused here, as is nesting
    deeper than 64. Tensors may be dict values and list items only (not dict keys or set members),
    and a bare storage, storage type, dtype or rebuild function nowhere: ember has no value for them.
    """
    stack, visited = [(obj, 0, True)], 0
    while stack:
        node, depth, tensors_allowed = stack.pop()
        visited += 1
        if depth > _MAX_DEPTH:
            raise StoreError(f"{name}: the pickled object nests more than {_MAX_DEPTH} deep or contains itself")
        if visited > limit:
            raise StoreError(f"{name}: the pickled object reuses its containers: walked as a tree it has more "
                             f"than the {limit} parts its pickle describes")
        parts = [(v, tensors_allowed) for v in (node.values() if isinstance(node, dict) else node)]
        if isinstance(node, dict):
            parts += [(k, False) for k in node]
        for part, allowed in parts:
            if isinstance(part, _CONTAINERS):
                stack.append((part, depth + 1, allowed and not isinstance(part, (set, frozenset))))
            elif isinstance(part, STAND_INS) and not (allowed and isinstance(part, TensorRef)):
                where = "a tensor as a dict key or set member" if isinstance(part, TensorRef) else brief(part)
                raise StoreError(f"{name}: the pickled object holds {where}, which a state dict cannot hold")


def _holds_tensors(obj: Any) -> bool:
    values = obj.values() if isinstance(obj, dict) else obj
    return any(isinstance(v, TensorRef) or (isinstance(v, (dict, list, tuple)) and _holds_tensors(v)) for v in values)


def _view(name: str, key: str, ref: TensorRef, record: memoryview, byteorder: str) -> np.ndarray:
    """The tensor as a strided NumPy view of its storage, after proving every element lies inside it."""
    size, stride, offset, dtype = ref.size, ref.stride, ref.offset, ref.dtype
    if not (type(offset) is int and offset >= 0 and len(size) == len(stride)
            and all(type(s) is int and s >= 0 for s in size + stride)):
        raise StoreError(f"{name}: tensor {brief(key)} has a bad layout: offset {brief(offset)}, size {brief(size)}, "
                         f"stride {brief(stride)}")
    check_shape(f"{name}: tensor {brief(key)}", size, dtype.itemsize)
    numel = len(record) // dtype.itemsize
    if 0 in size:
        return np.zeros(size, dtype.np)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= numel:
        raise StoreError(f"{name}: tensor {brief(key)} reaches element {last} of storage {brief(ref.storage.key)}, "
                         f"which holds {numel} {dtype.name} elements")
    # a length-1 dim never steps, so its stride may be anything torch liked; 0 keeps numpy in range
    strides = tuple(0 if n == 1 else s * dtype.itemsize for n, s in zip(size, stride))
    base = np.frombuffer(record, dtype.np.newbyteorder(byteorder), count=numel)
    try:
        view = np.lib.stride_tricks.as_strided(base[offset:], shape=size, strides=strides)
    except ValueError as e:  # e.g. an expanded (stride 0) shape too big for numpy to index
        raise StoreError(f"{name}: tensor {brief(key)} of size {brief(size)} cannot be viewed: {e}") from e
    return view if byteorder == "<" else view.astype(dtype.np)
