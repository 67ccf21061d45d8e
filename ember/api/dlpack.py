"""DLPack between ember and other libraries: host memory through NumPy, CUDA memory shared as it is,
every ember dtype included.

NumPy, which ember's host arrays are, refuses bf16 both ways ("Unsupported dtype in DLTensor"). Here a
bf16 tensor crosses as what it is: the capsule's DLTensor is retagged (kDLBfloat 16 <-> kDLUInt 16)
so that NumPy moves the memory, and the array is viewed as `ml_dtypes.bfloat16` on ember's side. Nothing
is copied for host producers and consumers: the array and the capsule share one buffer, and the capsule
keeps its producer's memory alive as DLPack says. CUDA tensors cross without a copy in both directions:
ember builds and reads the DLManagedTensor itself (`managed_capsule`, `Imported`); stream order is kept
by synchronizing ember's stream before handing memory out, and by giving a producer ember's stream.

Example:
    >>> import torch
    >>> ember.from_dlpack(torch.ones(2, dtype=torch.bfloat16)).dtype
    bf16
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from ..device import Device
from ..dtype import dtype_of
from ..ops.primitive import Aval
from ..tensor import Tensor
from .creation import _device, from_numpy

KDL_CPU = 1
_UINT, _BFLOAT = 1, 4  # DLDataTypeCode
# Where the DLTensor starts in the struct a capsule holds: a DLManagedTensor begins with it; a
# DLManagedTensorVersioned has its version, manager_ctx, deleter and flags (8 bytes each) first.
_TENSOR_AT = {b"dltensor": 0, b"dltensor_versioned": 32}
_DTYPE_AT = 20  # DLTensor: data (8), device (8), ndim (4), then dtype: code (u8), bits (u8), lanes (u16)

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _dtype_field(capsule: Any) -> ctypes.Array:
    """The (code, bits) bytes of the DLTensor in an unconsumed DLPack capsule."""
    name = _capsule_name(capsule)
    if name not in _TENSOR_AT:
        raise TypeError(f"from_dlpack: __dlpack__ returned a capsule named {name!r}, not a DLPack tensor "
                        f"(or one already consumed)")
    address = _capsule_pointer(capsule, name) + _TENSOR_AT[name] + _DTYPE_AT
    return (ctypes.c_uint8 * 2).from_address(address)


class _Taken:
    """An object whose `__dlpack__` hands NumPy a capsule already taken from its producer."""

    def __init__(self, capsule: Any, device: tuple) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple:
        return self.device


def to_numpy(obj: Any) -> np.ndarray:
    """A NumPy array sharing the memory of `obj` (anything with `__dlpack__`) when it is on the host;
    bf16 arrays are `ml_dtypes.bfloat16`. Other producers go through `np.from_dlpack` as they are.

    Example:
        >>> to_numpy(torch.arange(3)).tolist()
        [0, 1, 2]
    """
    device = tuple(obj.__dlpack_device__())
    if device[0] != KDL_CPU:
        return np.from_dlpack(obj)
    capsule = obj.__dlpack__()
    field = _dtype_field(capsule)
    if tuple(field) != (_BFLOAT, 16):
        return np.from_dlpack(_Taken(capsule, device))
    import ml_dtypes
    field[0] = _UINT
    return np.from_dlpack(_Taken(capsule, device)).view(ml_dtypes.bfloat16)


def export(array: np.ndarray, *args: Any, **kwargs: Any) -> Any:
    """`array.__dlpack__(...)` for a host array, bf16 included (its capsule tagged kDLBfloat 16).

    Example:
        >>> torch.from_dlpack(ember.ones(2, dtype="bf16")).dtype  # Tensor.__dlpack__ calls this
        torch.bfloat16
    """
    if array.dtype.name != "bfloat16":
        return array.__dlpack__(*args, **kwargs)
    capsule = array.view(np.uint16).__dlpack__(*args, **kwargs)
    _dtype_field(capsule)[0] = _BFLOAT
    return capsule


# ---- device memory: DLPack structs built and read here (NumPy speaks only host memory) ---------------

KDL_CUDA = 2
_NUMPY_OF = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
             (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64", (2, 16): "float16", (2, 32): "float32",
             (2, 64): "float64", (4, 16): "bfloat16", (6, 8): "bool"}
_CODE_OF = {name: code for code, name in _NUMPY_OF.items()}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
# The destructor gets the dying capsule as a raw pointer: a py_object there would revive it.
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_raw_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_GetName", ctypes.pythonapi))
_raw_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.restype, _capsule_rename.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_LIVE: dict[int, tuple] = {}  # what each exported DLManagedTensor keeps alive, until its deleter runs


@_DELETER
def _delete(managed) -> None:
    _LIVE.pop(ctypes.addressof(managed.contents), None)


@_DESTRUCTOR
def _destroy(capsule: int) -> None:  # a capsule nobody consumed frees its tensor itself (DLPack's rule)
    if _raw_name(capsule) == b"dltensor":
        _LIVE.pop(_raw_pointer(capsule, b"dltensor"), None)


def managed_capsule(address: int, shape: tuple, strides: tuple, dtype: np.dtype, device: tuple, keep: Any) -> Any:
    """A legacy "dltensor" capsule over `address` (`strides` in bytes), keeping `keep` (the memory's
    owner) alive until the consumer calls the deleter.

    Example:
        >>> torch.from_dlpack(_Wrap(managed_capsule(a.ctypes.data, a.shape, a.strides, a.dtype, (1, 0), a)))  # doctest: +SKIP
    """
    dtype = np.dtype(dtype)
    code, bits = _CODE_OF[dtype.name]
    ndim = len(shape)
    sizes, steps = (ctypes.c_int64 * max(ndim, 1))(*shape), (ctypes.c_int64 * max(ndim, 1))(
        *[s // dtype.itemsize for s in strides])
    managed = _Managed(_Tensor(address, _Device(*device), ndim, _DataType(code, bits, 1), sizes, steps, 0),
                       None, _delete)
    _LIVE[ctypes.addressof(managed)] = (managed, sizes, steps, keep)
    return _capsule_new(ctypes.addressof(managed), b"dltensor", _destroy)


class Imported:
    """Memory taken from a DLPack capsule: `address` (element 0), `shape`, `strides` (bytes), `dtype`,
    `device`; the producer's deleter runs when this object goes."""

    def __init__(self, capsule: Any) -> None:
        name = _capsule_name(capsule)
        if name != b"dltensor":
            raise TypeError(f"from_dlpack: expected an unconsumed \"dltensor\" capsule, got {name!r}")
        self._managed = ctypes.cast(_capsule_pointer(capsule, name), ctypes.POINTER(_Managed))
        _capsule_rename(capsule, b"used_dltensor")  # ours now: the capsule's destructor leaves it alone
        t = self._managed.contents.dl_tensor
        key = (t.dtype.code, t.dtype.bits)
        if key not in _NUMPY_OF or t.dtype.lanes != 1:
            raise TypeError(f"from_dlpack: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
                            f"{t.dtype.lanes} lanes) is none of ember's")
        import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
        self.dtype = np.dtype(ml_dtypes.bfloat16) if key == (4, 16) else np.dtype(_NUMPY_OF[key])
        self.shape = tuple(t.shape[k] for k in range(t.ndim))
        if t.strides:
            self.strides = tuple(t.strides[k] * self.dtype.itemsize for k in range(t.ndim))
        else:
            self.strides = tuple(int(s) for s in np.empty(0, self.dtype).itemsize * np.cumprod(
                (self.shape[1:] + (1,))[::-1])[::-1]) if t.ndim else ()
        self.address = (t.data or 0) + t.byte_offset
        self.device = (t.device.device_type, t.device.device_id)

    def __del__(self) -> None:
        managed = getattr(self, "_managed", None)
        if managed is not None and managed.contents.deleter:
            self._managed = None
            managed.contents.deleter(managed)


# ---- ember tensors ----------------------------------------------------------------------------------


def device_of(tensor: Any) -> tuple:
    """`__dlpack_device__` of an ember tensor: (kDLCUDA, index) on a CUDA device, else the host."""
    device = tensor._device.inner
    return (KDL_CUDA, device.index) if device.kind == "cuda" else (KDL_CPU, 0)


def export_tensor(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    """`Tensor.__dlpack__`: host tensors through NumPy (`export`); a dense CUDA tensor shares its device
    memory (a strided view is copied dense first), after ember's stream has run everything queued before
    it (so any consumer stream sees the values)."""
    if device_of(tensor)[0] != KDL_CUDA:
        return export(np.ascontiguousarray(tensor._device.backend.to_host(tensor._handle)), *args, **kwargs)
    from ..backend.fusion import Fusion  # lazy: import ember loads no backend
    plain = tensor.inner() if tensor._device.is_autodiff else tensor
    backend = plain._device.backend
    # the CudaArray: under fusion, its pending work run first; unfused, the handle is the array
    array = backend.data(plain._handle) if isinstance(backend, Fusion) else plain._handle
    if not array.flags.c_contiguous:  # a view (transposed, flipped): consumers get a dense copy of it
        array = array.copy()
    array.runtime.synchronize()
    return managed_capsule(array.ptr, array.shape, array.strides, array.dtype,
                           (KDL_CUDA, array.runtime.device_index), array)


def tensor_from(obj: Any, device: Any = None) -> Any:
    """`ember.from_dlpack`: a CUDA producer's memory becomes a tensor of the CUDA device it is on (the
    producer orders its work before ember's stream, which it is given); host producers share memory on
    the host devices (`to_numpy`)."""
    kind, index = tuple(obj.__dlpack_device__())
    if kind != KDL_CUDA:
        return from_numpy(to_numpy(obj), device)
    target = _device(device) if device is not None else Device.cuda(index)
    there = Device.cuda(index)
    from ..backend.fusion import Fusion, LazyHandle  # lazy: import ember loads no backend
    fused = isinstance(there.backend, Fusion)
    runtime = (there.backend.inner if fused else there.backend).runtime
    imported = Imported(obj.__dlpack__(stream=int(runtime.stream)))
    aval = Aval(imported.shape, dtype_of(imported.dtype))
    array = _foreign_array_type()(runtime, imported)
    out = Tensor._make(there, LazyHandle.concrete(array, aval) if fused else array, aval)
    return out if target is there else out.to(target)


@functools.cache
def _foreign_array_type() -> type:
    from ..cube.runtime.arguments import DeviceArray  # lazy: the cube runtimes load on first use
    from ..cube.runtime.cuda import CudaArray  # lazy: the `cuda` extra

    class ForeignCudaArray(CudaArray):
        """Device memory another library owns, taken through DLPack: never given to ember's pool; the
        producer's deleter runs when the array and its views are gone."""

        __slots__ = ("source",)

        def __init__(self, runtime: Any, imported: Imported) -> None:
            DeviceArray.__init__(self, runtime, imported.shape, imported.dtype, imported.strides)
            self.memory, self._address, self.source = None, imported.address, imported

    return ForeignCudaArray


def from_dlpack(obj, device=None) -> Tensor:
    """A tensor from any object speaking DLPack, every ember dtype (bf16 included); a host producer's
    memory is shared on the NumPy and CPU devices, a CUDA producer's on its CUDA device.

    Example:
        >>> ember.from_dlpack(torch.ones(2, dtype=torch.bfloat16)).dtype
        bf16
    """
    return tensor_from(obj, device)


METHODS = {"__dlpack__": export_tensor, "__dlpack_device__": device_of}
