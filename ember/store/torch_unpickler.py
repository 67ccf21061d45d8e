"""A pickle reader that understands PyTorch state dicts and executes nothing else.

`torch.save` pickles tensors as calls to `torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, ...)`, with each storage a *persistent id* `("storage", torch.FloatStorage, key, location,
numel)` whose bytes live outside the pickle. A normal unpickler imports and calls whatever globals the
file names, so loading an untrusted `.pt` runs arbitrary code. `SafeUnpickler.find_class` instead
maps the handful of names a state dict needs to ember's own inert stand-ins (frozen objects that only
record their arguments) and refuses every other global. No torch import, no code from the file.

The result holds `TensorRef`s (storage key, dtype, offset, size, stride); `torch_pickle` turns them
into NumPy views of the storage bytes once it knows where those bytes are.

Example:
    >>> obj = SafeUnpickler(open("data.pkl", "rb"), "model.pt").load()
    >>> obj["fc.weight"]
    TensorRef(storage=StorageRef(key='0', dtype=f32, numel=6), offset=0, size=(2, 3), stride=(3, 1), dtype=f32)
"""

from __future__ import annotations

import collections
import pickle
import pickletools
import re
from dataclasses import dataclass
from typing import BinaryIO

from ..dtype import DType, bf16, bool_, c64, c128, f16, f32, f64, i8, i16, i32, i64, u8
from ..errors import StoreError, brief

__all__ = ["SafeUnpickler", "StorageRef", "TensorRef", "ALLOWED_GLOBALS", "STORAGE_DTYPES", "STAND_INS"]

STORAGE_DTYPES: dict[str, DType] = {
    "DoubleStorage": f64, "FloatStorage": f32, "HalfStorage": f16, "BFloat16Storage": bf16,
    "LongStorage": i64, "IntStorage": i32, "ShortStorage": i16, "CharStorage": i8, "ByteStorage": u8,
    "BoolStorage": bool_, "ComplexFloatStorage": c64, "ComplexDoubleStorage": c128,
}
_TORCH_DTYPES: dict[str, DType] = {
    "float64": f64, "float32": f32, "float16": f16, "bfloat16": bf16, "int64": i64, "int32": i32,
    "int16": i16, "int8": i8, "uint8": u8, "bool": bool_,
}


def _refuse_state(self, state: object) -> None:
    # pickle's BUILD opcode calls __setstate__ on whatever object is on its stack; frozen slotted
    # dataclasses get one that writes through `frozen`, so every object the unpickler can reach
    # replaces it with this refusal.
    raise StoreError(f"refused to set state {brief(state)} on {type(self).__name__}")

# torch dtypes ember lacks, by name prefix: only for a clearer refusal message
_OTHER_DTYPES = ("uint16", "uint32", "uint64", "complex", "cfloat", "cdouble", "chalf", "float8", "float4", "qint",
                 "quint", "bits")


@dataclass(frozen=True, slots=True)
class StorageRef:
    """One storage record of the file: its key, element dtype (u8 for untyped storages) and element count."""

    key: str
    dtype: DType
    numel: int
    __setstate__ = _refuse_state


@dataclass(frozen=True, slots=True)
class TensorRef:
    """A tensor as the pickle describes it: a strided view (in elements) of a storage, not yet read."""

    storage: StorageRef
    offset: int
    size: tuple
    stride: tuple
    dtype: DType
    __setstate__ = _refuse_state


# Everything find_class hands out is a frozen, slotted instance that refuses __setstate__, so the
# BUILD opcode cannot change the shared table below.
@dataclass(frozen=True, slots=True)
class _StorageType:
    dtype: DType
    __setstate__ = _refuse_state


@dataclass(frozen=True, slots=True)
class _TorchDType:
    dtype: DType
    __setstate__ = _refuse_state


@dataclass(frozen=True, slots=True)
class _Rebuild:
    """Stand-in for one of torch's `_rebuild_*` functions; calling it returns a `TensorRef`."""

    name: str
    __setstate__ = _refuse_state

    def __call__(self, *args):
        low, high = _ARITY[self.name]
        if not low <= len(args) <= high:
            raise StoreError(f"torch._utils.{self.name} takes {low} to {high} arguments, the file passes {len(args)}")
        if self.name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            data, requires_grad = args[:2]
            if not isinstance(data, TensorRef):
                raise StoreError(f"{self.name} expected a tensor, got {type(data).__name__}")
            _check_requires_grad(data.dtype, requires_grad)
            return data  # a Parameter is its data; requires_grad and hooks mean nothing here
        requires_grad, metadata = False, None
        if self.name == "_rebuild_tensor":
            storage, offset, size, stride = args
            dtype = storage.dtype if isinstance(storage, StorageRef) else None
        elif self.name == "_rebuild_tensor_v2":
            storage, offset, size, stride, requires_grad, _hooks, *rest = args
            dtype, metadata = storage.dtype if isinstance(storage, StorageRef) else None, rest[0] if rest else None
        else:  # _rebuild_tensor_v3: an untyped storage with the dtype passed separately
            storage, offset, size, stride, requires_grad, _hooks, torch_dtype, *rest = args
            if not isinstance(torch_dtype, _TorchDType):
                raise StoreError(f"_rebuild_tensor_v3 expected a torch dtype, got {brief(torch_dtype)}")
            dtype, metadata = torch_dtype.dtype, rest[0] if rest else None
        if not isinstance(storage, StorageRef):
            raise StoreError(f"{self.name} expected a storage, got {type(storage).__name__}")
        if metadata:
            raise StoreError(f"tensor metadata {brief(metadata)} (a conj/neg view) is not supported")
        _check_requires_grad(dtype, requires_grad)
        return TensorRef(storage, offset, tuple(size), tuple(stride), dtype)


# the positional arguments torch's rebuild functions take, fewest to most
_ARITY = {"_rebuild_tensor": (4, 4), "_rebuild_tensor_v2": (6, 7), "_rebuild_tensor_v3": (7, 8),
          "_rebuild_parameter": (3, 3), "_rebuild_parameter_with_state": (4, 4)}


def _check_requires_grad(dtype: DType, requires_grad: object) -> None:
    # as torch: only floating-point tensors can require gradients
    if type(requires_grad) is not bool or (requires_grad and not dtype.is_float):
        raise StoreError(f"a {dtype.name} tensor has requires_grad {brief(requires_grad)}")

STAND_INS = (StorageRef, TensorRef, _StorageType, _TorchDType, _Rebuild)  # everything a file can make us build


def _allowed() -> dict[tuple[str, str], object]:
    table: dict[tuple[str, str], object] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch", "Size"): tuple,
        ("torch.storage", "UntypedStorage"): _StorageType(u8),
        ("torch", "UntypedStorage"): _StorageType(u8),
    }
    for name in ("_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
                 "_rebuild_parameter_with_state"):
        table[("torch._utils", name)] = _Rebuild(name)
    for name, dtype in STORAGE_DTYPES.items():
        table[("torch", name)] = _StorageType(dtype)
    for name, dtype in _TORCH_DTYPES.items():
        table[("torch", name)] = _TorchDType(dtype)
    return table


ALLOWED_GLOBALS: dict[tuple[str, str], object] = _allowed()


class SafeUnpickler(pickle.Unpickler):
    """An unpickler whose globals are ember's inert stand-ins for torch's state-dict helpers.

    Any other global (`os.system`, `builtins.eval`, a model class, `numpy` scalars) raises
    `StoreError` naming the file and the global, before anything from the file runs.

    Example:
        >>> SafeUnpickler(io.BytesIO(pickle.dumps(print)), "x.pt").load()
        Traceback (most recent call last):
        ember.errors.StoreError: x.pt: refused to load global builtins.print: ...
    """

    def __init__(self, file: BinaryIO, filename: str, legacy: bool = False) -> None:
        super().__init__(file)
        self.file = file
        self.filename = filename
        self.legacy = legacy
        self.storages: dict[str, StorageRef] = {}
        self.opcodes = 0  # how many opcodes the last `load` read: a bound on the objects it can describe

    def find_class(self, module: str, name: str) -> object:
        found = ALLOWED_GLOBALS.get((module, name))
        if found is None and module == "torch" and (name.endswith("Storage") or name.startswith(_OTHER_DTYPES)):
            raise StoreError(f"a tensor of type torch.{name} has no ember dtype; ember holds "
                             f"{', '.join(f'torch.{n}' for n in _TORCH_DTYPES)}")
        if found is None:
            raise StoreError(
                f"refused to load global {module}.{name}: a state dict needs only tensors, "
                "storages and plain containers, and ember runs no code from model files")
        return found

    def load(self) -> object:
        """Unpickle one object; any failure becomes a `StoreError` naming the file.

        Example:
            >>> SafeUnpickler(io.BytesIO(pickle.dumps({"a": 1})), "x.pt").load()
            {'a': 1}
        """
        self.opcodes = _check_opcodes(self.file, self.filename)
        try:
            return super().load()
        except StoreError as e:
            raise StoreError(f"{self.filename}: {e}") from None
        except Exception as e:  # a malformed pickle: only ember's own stand-ins ran, so report and stop
            raise StoreError(f"{self.filename}: corrupt pickle: {type(e).__name__}: {str(e)[:200]}") from e

    def persistent_load(self, pid: object) -> StorageRef:
        # zip format: ("storage", type, key, location, numel); legacy adds a 6th item, view metadata
        size = 6 if self.legacy else 5
        if not (isinstance(pid, tuple) and len(pid) == size and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str) and type(pid[4]) is int):
            raise StoreError(f"unexpected persistent id {brief(pid)}; expected a torch storage")
        if not (isinstance(pid[3], str) and _LOCATION.fullmatch(pid[3])):
            # as torch: a storage saved from an unknown device (or the data-less "meta") cannot be restored
            raise StoreError(f"storage {brief(pid[2])} was saved on {brief(pid[3])}, not a device ember can read from")
        if self.legacy and pid[5] is not None:
            raise StoreError("storage views of the legacy format are not supported")
        key = pid[2]
        ref = StorageRef(key, pid[1].dtype, pid[4])
        known = self.storages.setdefault(key, ref)
        if known != ref:
            raise StoreError(f"storage {brief(key)} is declared twice, as {brief(known)} and {brief(ref)}")
        return known


_LOCATION = re.compile(r"cpu|(cuda|mps|xpu|hpu)(:[0-9]+)?")
MEMO_LIMIT = 1 << 20
_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"}
# The opcodes torch's weights-only unpickler accepts, and those protocols 3 to 5 add for what a
# state dict holds (framing, bytes, sets, long strings): what `pickle.dump` of a checkpoint writes.
# Protocol 0/1 text opcodes and stack shuffles (POP, DUP, POP_MARK) are not among them.
OPCODES = frozenset({
    "PROTO", "STOP", "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "MARK",
    "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE", "NEWFALSE", "NEWTRUE", "EMPTY_TUPLE", "EMPTY_LIST",
    "EMPTY_DICT", "EMPTY_SET", "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING",
    "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT", "LONG1",
    "FRAME", "MEMOIZE", "SHORT_BINUNICODE", "BINUNICODE8", "STACK_GLOBAL", "SHORT_BINBYTES", "BINBYTES",
    "BINBYTES8", "BYTEARRAY8", "ADDITEMS", "FROZENSET", "LONG4",
})


def _check_opcodes(file: BinaryIO, filename: str) -> int:
    """Refuse, before the C unpickler sees them, opcodes no pickler writes for a state dict and memo
    indices no state dict needs; returns the number of opcodes read.

    The pickle must start with PROTO 2 or later and use only `OPCODES`, none newer than the protocol
    it declares. The unpickler grows its memo table to the largest index it meets, so one damaged or
    crafted `LONG_BINPUT` would make it allocate gigabytes; a state dict's pickle has a few thousand.
    """
    start, count, protocol = file.tell(), 0, 0
    try:
        for opcode, arg, _ in pickletools.genops(file):
            count += 1
            if count == 1 and opcode.name == "PROTO":
                protocol = arg
            if opcode.name not in OPCODES or opcode.proto > protocol or (count == 1 and protocol < 2):
                raise StoreError(f"{filename}: corrupt pickle: opcode {opcode.name} in a protocol {protocol} "
                                 "pickle; torch writes state dicts in protocol 2 or later, with none of it")
            if opcode.name in _MEMO_OPS and isinstance(arg, int) and arg > MEMO_LIMIT:
                raise StoreError(f"{filename}: corrupt pickle: memo index {arg} (a state dict needs "
                                 f"fewer than {MEMO_LIMIT})")
    except StoreError:
        raise
    except Exception as e:  # malformed: refused here, so the unpickler never runs what was not checked
        raise StoreError(f"{filename}: corrupt pickle: {type(e).__name__}: {str(e)[:200]}") from None
    finally:
        file.seek(start)
    return count
