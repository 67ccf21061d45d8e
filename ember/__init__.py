"""ember: a deep-learning framework on Burn's design.

One tensor API; devices chosen at run time (`Device.cpu()`, `Device.numpy()`, ...); backends stacked
as decorators (`device.autodiff()`). See README.md and docs/architecture.md; coming from PyTorch,
docs/coming-from-pytorch.md.

Submodules (`ember.nn`, `ember.optim`, `ember.store`, `ember.data`, `ember.train`, ...) are imported on
first attribute access, so `import ember` stays cheap. PyTorch's dtype names are aliases of ember's
(`ember.float32 is ember.f32`, `ember.half is ember.f16`).

Example:
    >>> import ember
    >>> device = ember.Device.cpu().autodiff()
    >>> w = ember.randn(3, device=device).require_grad()
    >>> grads = (w * w).sum().backward()
    >>> w.grad(grads).shape
    (3,)
    >>> ember.nn.Linear(3, 2).to(ember.bfloat16).weight.dtype
    bf16
"""

import importlib as _importlib

from .dtype import DType, f64, f32, f16, bf16, i64, i32, i16, i8, u8, bool_, c64, c128, promote_types, result_type
from .errors import EmberError, ShapeError, DTypeError, DeviceError, DeviceUnavailableError, OutOfMemoryError
from .device import Device
from .tensor import Tensor
from .random import seed
from .random import seed as manual_seed  # PyTorch's name
from .autodiff.grad_mode import no_grad, grad_enabled
from .autodiff.gradients import Gradients
from .config import Config
from .api import activation
from .api.creation import (
    tensor, from_numpy, zeros, ones, full, empty, arange, linspace, eye, rand, uniform,
    randn, normal, randint, bernoulli, zeros_like, ones_like, full_like, empty_like, rand_like,
    randn_like, randint_like,
)
from .api.math import *  # noqa: F401,F403  (elementwise functions, PyTorch names)
from .api.math import abs, round, pow, where  # noqa: A004
from .api.reduce import (
    sum, prod, mean, amax, amin, max, min, argmax, argmin, var, std, logsumexp, norm, all, any,
    cumsum, cumprod, cummax, cummin, argsort, sort, topk, median, gather,
)
from .api.shape import (
    reshape, permute, transpose, movedim, flatten, unflatten, squeeze, unsqueeze, expand, broadcast_to,
    repeat, tile, flip, narrow, roll, chunk, split, cat, stack, pad, tril, triu, diagonal,
)
from .api.index import (
    s, slice_assign, scatter, scatter_add, index_select, index_add, masked_select, take, one_hot, nonzero,
)
from .api.linalg import matmul, outer, einsum, trace
from .api.index import scatter_reduce, index_put, index_put_
from .api.creation import randperm, multinomial
from .api.dlpack import from_dlpack
from .api.shape import meshgrid, cartesian_prod
from .api.statistics import unique, unique_consecutive, bincount, histc, searchsorted, bucketize
from .api.distance import cdist
from .api.quantize import QTensor, quantize, dequantize, fake_quantize
from .api.complex import complex, polar, conj, real, imag, angle, sgn, view_as_real, view_as_complex, is_complex
from .qscheme import qtype
from . import debug  # noqa: E402  (ember.debug.explain, fusion_stats, set_fusion)
from .extension import backend_extension
from .api.checkpoint import checkpoint
from .amp import autocast, GradScaler  # noqa: E402  (ember.amp: mixed precision)

__version__ = "0.1.0"

# PyTorch's dtype names (dtype.TORCH_NAMES), so code written against torch reads the same.
float64 = double = f64
float32 = float = f32  # noqa: A001
float16 = half = f16
bfloat16 = bf16
int64 = long = i64
int32 = int = i32  # noqa: A001
int16 = short = i16
int8 = i8
uint8 = u8
bool = bool_  # noqa: A001
complex64 = cfloat = c64
complex128 = cdouble = c128


def __getattr__(name: str):
    """Import a submodule on first access (PEP 562): `ember.nn`, `ember.optim`, `ember.store`, ..."""
    if not name.startswith("_"):
        try:
            return _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    import pkgutil
    submodules = (m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    return sorted(set(globals()) | set(submodules))
