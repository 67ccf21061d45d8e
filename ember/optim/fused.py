"""One op per parameter for optimizer updates: the Adam/AdamW step as a backend extension.

`adam_update` is an `@ember.backend_extension` primitive (ember/extension.py) over the cube kernel of
`ember/kernels/optim.py` (its docstring gives the arithmetic): on a device with a cube target
(Device.cpu(), wgpu, CUDA) one kernel launch reads the parameter, its gradient and the previous step's
packed result and writes the new parameter and moments packed in one array; `Device.numpy()` runs the
NumPy reference, the same operations in the same order. `adam_step` calls it and takes the new
parameter back with one slice (a view: the rows are contiguous blocks along the first dim); the
optimizer keeps the packed array itself as the moments for the next step.

- The hyperparameters of a step travel in a small tensor (`adam_scalars`, in the parameter's compute
  dtype: f32 for f16/bf16, else its own), not as primitive params, made once per step and option set
  and shared by the parameters of that step.
- The packed array's row 0 is the parameter of its step, the very memory the module holds.
- No gradient: updates run on the inner device, outside autodiff; reaching the op in a backward pass
  raises an error naming it.
- Pure (`pure=True`), so the fusion decorator records it as an inner step of the plan. Why each of
  these: docs/training.md, "The fused Adam update".

Example:
    >>> p = ember.randn(4, 5)
    >>> s = adam_scalars(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, decoupled=True, step=1)
    >>> new, packed = adam_step(p, ember.ones_like(p), None, s, amsgrad=False)
    >>> new.shape, packed.shape
    ((4, 5), (12, 5))
"""

from __future__ import annotations

from ..api.creation import from_numpy
from ..api._common import apply
from ..kernels import optim as kernels
from ..dtype import DType
from ..extension import backend_extension
from ..tensor import Tensor


def _shape(param: tuple, grad: tuple, moments: tuple, scalars: tuple, *, amsgrad: bool, first: bool) -> tuple:
    kernels.check_shapes(param, grad, moments, scalars, amsgrad, first)
    return kernels.packed_shape(param, kernels.rows(amsgrad))


def _dtype(param: DType, grad: DType, moments: DType, scalars: DType, *, amsgrad: bool, first: bool) -> DType:
    kernels.check_dtypes(param, grad, moments, scalars, first)
    return param


@backend_extension(shape=_shape, dtype=_dtype, name="adam_update", pure=True, reference=kernels.adam_reference)
def adam_update(param, grad, moments, scalars, *, amsgrad: bool, first: bool, out=None):
    """One Adam step: the new parameter, exp_avg, exp_avg_sq and (AMSGrad) max_exp_avg_sq packed along the
    first dim, from the previous step's packed result `moments` (not read when `first`;
    `ember.kernels.optim`); written over `out` (`moments`, donated by the fusion decorator) where
    the kernel may."""
    return kernels.adam_update(param, grad, moments, scalars, amsgrad=amsgrad, first=first, out=out)


_scalars: dict[tuple, tuple[int, Tensor]] = {}  # option set -> (step, its scalars): shared by a step's parameters


def adam_scalars(like: Tensor, *, lr: float, betas: tuple, eps: float, weight_decay: float, decoupled: bool,
                 step: int) -> Tensor:
    """The hyperparameters of one Adam step as a tensor on `like`'s device, in the compute dtype of
    `like`'s dtype (the slots of `ember.kernels.optim.SCALARS`). `decoupled`: AdamW's weight decay.
    The last one of each option set is reused (tensors are immutable), so the parameters of one step
    share one tensor; a new step's replaces it, let go of before the new one is made, so that on a device
    the new one lands where the last one was (a fusion plan reading it then meets the same address every
    step, `ember/backend/cube/fused/cuda_graphs.py`).

    Example:
        >>> adam_scalars(ember.zeros(3), lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
        ...              decoupled=True, step=1).shape
        (9,)
    """
    key = (like.dtype, like.device, lr, tuple(betas), eps, weight_decay, decoupled)
    hit = _scalars.pop(key, None)
    if hit is None or hit[0] != step:
        hit = None  # the last step's tensor goes first
        if len(_scalars) >= 64:
            _scalars.clear()
        values = kernels.scalars(like.dtype.np, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                 decoupled=decoupled, step=step)
        values.flags.writeable = False
        hit = (step, from_numpy(values, like.device))
    _scalars[key] = hit
    return hit[1]


def adam_step(param: Tensor, grad: Tensor, packed: Tensor | None, scalars: Tensor, *,
              amsgrad: bool) -> tuple[Tensor, Tensor]:
    """(new parameter, new packed result) after one Adam step, by one op and one view.

    `grad` has the parameter's shape (any float dtype); `packed` is the previous step's packed result
    (its rows: the parameter, exp_avg, exp_avg_sq and, with `amsgrad`, max_exp_avg_sq), None on the
    first step (zero moments); `scalars` comes from `adam_scalars`. `packed_rows` splits a packed result.

    Example:
        >>> new, packed = adam_step(p, g, packed, adam_scalars(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
        ...                         weight_decay=0.0, decoupled=False, step=t), amsgrad=False)
    """
    first = packed is None
    packed = adam_update(param, grad, grad if first else packed, scalars, amsgrad=amsgrad, first=first)
    return _row(packed, param.shape, 0), packed


def packed_rows(packed: Tensor, shape: tuple, *, amsgrad: bool) -> list[Tensor]:
    """The blocks of a packed Adam result for a parameter of `shape`, as tensors of that shape: the
    parameter, exp_avg, exp_avg_sq and, with `amsgrad`, max_exp_avg_sq.

    Example:
        >>> [r.shape for r in packed_rows(packed, (4, 5), amsgrad=False)]       # packed of shape (12, 5)
        [(4, 5), (4, 5), (4, 5)]
    """
    return [_row(packed, shape, i) for i in range(kernels.rows(amsgrad))]


def _row(packed: Tensor, shape: tuple, i: int) -> Tensor:
    """Block `i` of a packed result as a tensor of `shape`: one `slice` (a 0-d parameter's also a
    reshape; the blocks of an empty one are the packed result itself)."""
    if not shape:
        return apply("slice", packed, ranges=((i, i + 1, 1),)).reshape(())
    n = shape[0]
    if n == 0:
        return packed
    return apply("slice", packed, ranges=((i * n, (i + 1) * n, 1),) + tuple((0, d, 1) for d in shape[1:]))
