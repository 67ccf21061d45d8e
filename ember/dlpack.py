"""DLPack between ember and other libraries on the host, every ember dtype included.

NumPy, which ember's host arrays are, refuses bf16 both ways ("Unsupported dtype in DLTensor"). Here a
bf16 tensor crosses as what it is: the capsule's DLTensor is retagged (kDLBfloat 16 <-> kDLUInt 16)
so that NumPy moves the memory, and the array is viewed as `ml_dtypes.bfloat16` on ember's side. Nothing
is copied for host producers and consumers: the array and the capsule share one buffer, and the capsule
keeps its producer's memory alive as DLPack says.

Example:
    >>> import torch
    >>> ember.from_dlpack(torch.ones(2, dtype=torch.bfloat16)).dtype
    bf16
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

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
