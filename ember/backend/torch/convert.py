"""What the torch backend's rows share: the dtype map, host transfers, f32 compute for halves.

ember's dtypes are all torch dtypes (bf16 crosses the host as its 16 bits, since `torch.from_numpy`
cannot read `ml_dtypes.bfloat16`). Host arrays enter through `torch.from_numpy` (`torch.from_dlpack`
for read-only ones) and leave through `.numpy()`, so `Device.torch("cpu")` copies no bytes either way.

Example:
    >>> to_host(from_host(np.arange(3, dtype=np.int8), torch.device("cpu"))).tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import numpy as np
import torch

from ...dtype import DType, bf16

TORCH = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "u8": torch.uint8,
    "bool": torch.bool, "c64": torch.complex64, "c128": torch.complex128,
}
"""ember dtype name -> torch dtype (every ember dtype has one)."""

HALVES = (torch.float16, torch.bfloat16)


class Unsupported(Exception):
    """Raised by a row for a case torch does not run (an integer max pool, a 4-d convolution): the
    backend then runs the primitive's NumPy reference and records it in `fallbacks`."""


def tdtype(dtype: DType) -> torch.dtype:
    """The torch dtype of an ember dtype.

    Example:
        >>> tdtype(bf16)
        torch.bfloat16
    """
    return TORCH[dtype.name]


def from_host(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array as a torch tensor on `device`, sharing its memory on the CPU where NumPy's strides
    allow (negative strides, as of a flipped view, are copied first)."""
    array = np.asarray(array)
    if any(s < 0 for s in array.strides):
        array = np.ascontiguousarray(array)
    is_bf16 = array.dtype.name == "bfloat16"  # by name: comparing with bf16.np would import ml_dtypes
    bits = array.view(np.int16) if is_bf16 else array
    # torch.from_numpy warns on a read-only array (ember's host arrays often are); DLPack takes it as it is.
    tensor = torch.from_numpy(bits) if bits.flags.writeable else torch.from_dlpack(bits)
    if is_bf16:
        tensor = tensor.view(torch.bfloat16)
    return tensor if device.type == "cpu" else tensor.to(device)


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's values as a host array of its ember dtype (a view of a CPU tensor's memory)."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(bf16.np)
    return tensor.numpy()


def f32_for_halves(fn):
    """`fn(out, *inputs, **params)` computed in f32 when its first input is f16 or bf16, the result
    rounded once to the output's dtype (as the NumPy references and PyTorch's CPU kernels do)."""

    def run(out, *inputs, **params):
        if inputs and inputs[0].dtype in HALVES:
            result = fn(out, *(t.float() if t.dtype in HALVES else t for t in inputs), **params)
            return result.to(tdtype(out.dtype))
        return fn(out, *inputs, **params)

    return run
