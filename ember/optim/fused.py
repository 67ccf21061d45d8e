"""One op per parameter for optimizer updates: the Adam/AdamW step as a backend extension.

`adam_update` and `adam_update_amsgrad` are `@ember.backend_extension` primitives (ember/extension.py)
over the cube kernel of `ember/cube/kernels/optim.py` (its docstring gives the arithmetic): on a device
with a cube target (Device.cpu(), wgpu, CUDA) one kernel launch reads the parameter, its gradient and
its moments and writes the new parameter and moments packed in one array; `Device.numpy()` runs the
NumPy reference, the same operations in the same order. `adam_step` calls the right one and takes the
packed rows back with one slice each (a view: the rows are contiguous blocks along the first dim), so
an Adam update dispatches one op and three or four views instead of ~14 elementwise ops.

Design choices:

- The hyperparameters of a step travel in a small tensor (`adam_scalars`, in the parameter's compute
  dtype: f32 for f16/bf16, else its own), not as primitive params: the kernel compiles once per
  (dtypes, AMSGrad), and a recorded or cached plan does not change when the step count or the learning
  rate does. Its values are made on the host once per step and option set (on a GPU device, one small
  host-to-device copy) and shared by the parameters of that step.
- No gradient: optimizer updates run on the inner device, outside autodiff; reaching the op in a
  backward pass raises an error naming it.
- Both are pure (`pure=True`: every error is raised at the call, by the shape and dtype rules), so the
  fusion decorator records them as inner steps: a training step's updates join the plan of its
  backward pass instead of flushing the stream at the first one.
- The new parameter and moments are views of one packed array, which stays alive while any of them
  does (an old parameter value kept elsewhere keeps its step's moments alive too).

Example:
    >>> p = ember.randn(4, 5)
    >>> z = ember.zeros_like(p)
    >>> s = adam_scalars(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, decoupled=True, step=1)
    >>> new, m, v, vmax = adam_step(p, ember.ones_like(p), z, z, None, s)
    >>> new.shape, vmax is None
    ((4, 5), True)
"""

from __future__ import annotations

from ..api.creation import from_numpy
from ..api._common import apply
from ..cube.kernels import optim as kernels
from ..dtype import DType
from ..extension import backend_extension
from ..tensor import Tensor


def _operands(param, grad, exp_avg, exp_avg_sq, *rest) -> tuple:
    """Either primitive's inputs as (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq or None, scalars)."""
    return param, grad, exp_avg, exp_avg_sq, rest[0] if len(rest) == 2 else None, rest[-1]


def _shape(*shapes: tuple) -> tuple:
    kernels.check_shapes(*_operands(*shapes))
    return kernels.packed_shape(shapes[0], len(shapes) - 2)  # rows: every input but grad and scalars


def _dtype(*dtypes: DType) -> DType:
    kernels.check_dtypes(*_operands(*dtypes))
    return dtypes[0]


@backend_extension(shape=_shape, dtype=_dtype, name="adam_update", pure=True,
                   reference=lambda p, g, m, v, s: kernels.adam_reference(p, g, m, v, None, s))
def adam_update(param, grad, exp_avg, exp_avg_sq, scalars):
    """One Adam step without AMSGrad: the new parameter, exp_avg and exp_avg_sq packed along the first
    dim (`ember.cube.kernels.optim`)."""
    return kernels.adam_update(param, grad, exp_avg, exp_avg_sq, None, scalars)


@backend_extension(shape=_shape, dtype=_dtype, name="adam_update_amsgrad", pure=True,
                   reference=kernels.adam_reference)
def adam_update_amsgrad(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars):
    """One Adam step with AMSGrad: the new parameter, exp_avg, exp_avg_sq and max_exp_avg_sq packed along
    the first dim (`ember.cube.kernels.optim`)."""
    return kernels.adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars)


_scalars: dict[tuple, Tensor] = {}  # recent scalars tensors by value: one per step and option set, not per parameter


def adam_scalars(like: Tensor, *, lr: float, betas: tuple, eps: float, weight_decay: float, decoupled: bool,
                 step: int) -> Tensor:
    """The hyperparameters of one Adam step as a tensor on `like`'s device, in the compute dtype of
    `like`'s dtype (the slots of `ember.cube.kernels.optim.SCALARS`). `decoupled`: AdamW's weight decay.
    Recent ones are reused (tensors are immutable), so the parameters of one step share one tensor.

    Example:
        >>> adam_scalars(ember.zeros(3), lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
        ...              decoupled=True, step=1).shape
        (9,)
    """
    key = (like.dtype, like.device, lr, tuple(betas), eps, weight_decay, decoupled, step)
    hit = _scalars.get(key)
    if hit is None:
        if len(_scalars) >= 64:
            _scalars.clear()
        values = kernels.scalars(like.dtype.np, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                 decoupled=decoupled, step=step)
        values.flags.writeable = False
        hit = _scalars[key] = from_numpy(values, like.device)
    return hit


def adam_step(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, max_exp_avg_sq: Tensor | None,
              scalars: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """(new parameter, exp_avg, exp_avg_sq, max_exp_avg_sq or None) after one Adam step, by one op.

    `grad` and the moments have the parameter's shape (any float dtype; the results take the
    parameter's); `scalars` comes from `adam_scalars`; `max_exp_avg_sq` None: no AMSGrad.

    Example:
        >>> new, m, v, _ = adam_step(p, g, m, v, None, adam_scalars(p, lr=1e-3, betas=(0.9, 0.999),
        ...                          eps=1e-8, weight_decay=0.0, decoupled=False, step=t))
    """
    if max_exp_avg_sq is None:
        packed = adam_update(param, grad, exp_avg, exp_avg_sq, scalars)
    else:
        packed = adam_update_amsgrad(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, scalars)
    rows = _rows(packed, param.shape, 3 if max_exp_avg_sq is None else 4)
    return rows[0], rows[1], rows[2], rows[3] if len(rows) == 4 else None


def _rows(packed: Tensor, shape: tuple, count: int) -> list[Tensor]:
    """The `count` blocks of a packed result as tensors of `shape`: one `slice` each (a 0-d parameter's
    also a reshape; the rows of an empty one are the packed result itself)."""
    if not shape:
        return [apply("slice", packed, ranges=((i, i + 1, 1),)).reshape(()) for i in range(count)]
    n, rest = shape[0], tuple((0, d, 1) for d in shape[1:])
    if n == 0:
        return [packed] * count
    return [apply("slice", packed, ranges=((i * n, (i + 1) * n, 1),) + rest) for i in range(count)]
