"""The primitive: one named op with its rules registered beside it (the JAX idea).

A `Primitive` carries everything ember knows about one op of the backend protocol:

- `infer(*avals, **params) -> Aval`: the shape and dtype rule; raises `ShapeError`/`DTypeError` naming the
  op and the offending shapes. It runs before any backend sees the op, so every backend (eager, lazy,
  remote) gets the same checks and the same errors.
- `reference(*arrays, **params) -> ndarray`: the NumPy reference. The NumPy backend runs it; other
  backends are tested against it.
- `vjp(ctx, g) -> tuple`: the reverse-mode rule, written with ordinary `Tensor` ops. It receives the
  cotangent `g` of the output and returns one cotangent (or `None`) per input.
- `cost`: `"memory"` for cheap ops whose outputs autodiff may recompute instead of keeping (elementwise,
  movement), `"compute"` for ops worth keeping (matmul, conv, reductions, sorts).

Every primitive has exactly one output; ops that return several tensors (sort, max with indices) are
compositions of single-output primitives in the tensor layer.

Example:
    >>> from ember.ops import registry
    >>> registry["exp"].infer(Aval((2, 3), f32))
    Aval(shape=(2, 3), dtype=f32)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import ml_dtypes
import numpy as np

from ..dtype import DType
from ..errors import ShapeError


class Aval(NamedTuple):
    """An abstract value: what is known of a tensor before it is computed."""

    shape: tuple[int, ...]
    dtype: DType


class VjpContext:
    """What a gradient rule may read: the inputs and output as tensors (on the inner device) and params.

    Inputs are given lazily through `inputs` so that autodiff checkpointing can recompute them only
    when a rule actually asks.
    """

    __slots__ = ("_node", "params")

    def __init__(self, node, params: dict) -> None:
        self._node = node
        self.params = params

    @property
    def inputs(self) -> tuple:
        return self._node.input_tensors()

    @property
    def output(self):
        return self._node.output_tensor()

    @property
    def input_avals(self) -> tuple[Aval, ...]:
        return self._node.input_avals

    def needs_grad(self, i: int) -> bool:
        """Whether input `i` is tracked (rules may skip work for constant inputs)."""
        return self._node.parent_is_tracked(i)


class Primitive:
    """A named op of the backend protocol with its shape rule, NumPy reference and gradient rule."""

    __slots__ = ("name", "infer", "reference", "vjp", "cost")

    def __init__(
        self,
        name: str,
        *,
        infer: Callable[..., Aval],
        reference: Callable[..., Any],
        vjp: Callable[[VjpContext, Any], tuple] | None = None,
        cost: str = "memory",
    ) -> None:
        self.name = name
        self.infer = infer
        self.reference = reference
        self.vjp = vjp
        self.cost = cost

    def __repr__(self) -> str:
        return f"Primitive({self.name})"


registry: dict[str, Primitive] = {}


def primitive(name: str, *, infer, vjp=None, cost: str = "memory"):
    """Register the decorated NumPy reference as primitive `name` with its rules.

    Example:
        >>> @primitive("double", infer=same_aval, vjp=lambda ctx, g: (g * 2,))
        ... def double(x):
        ...     return x * 2
    """

    def register(reference: Callable) -> Primitive:
        if name in registry:
            raise ValueError(f"primitive {name!r} registered twice")
        prim = Primitive(name, infer=infer, reference=reference, vjp=vjp, cost=cost)
        registry[name] = prim
        return prim

    return register


# ---- shape helpers shared by the rules -----------------------------------------------------------

_broadcast_cache: dict[tuple, tuple[int, ...]] = {}


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy/PyTorch broadcasting of shapes; raises `ShapeError` naming the op and all shapes."""
    key = shapes
    hit = _broadcast_cache.get(key)
    if hit is not None:
        return hit
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(ndim):
        size = 1
        for s in shapes:
            k = axis - ndim + len(s)
            if k < 0:
                continue
            d = s[k]
            if d == size or d == 1:
                continue
            if size == 1:
                size = d
            else:
                listed = " and ".join(str(tuple(s)) for s in shapes)
                raise ShapeError(op, f"shapes {listed} do not broadcast (dimension {axis})")
        out.append(size)
    result = tuple(out)
    if len(_broadcast_cache) < 4096:
        _broadcast_cache[key] = result
    return result


def normalize_dim(op: str, dim: int, ndim: int) -> int:
    """A dim in [-ndim, ndim) as a non-negative index; 0-d tensors accept dim 0 and -1 like PyTorch."""
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise ShapeError(op, f"dim {dim} is out of range for a tensor of {ndim} dimensions")
    return dim % bound


def normalize_dims(op: str, dims, ndim: int) -> tuple[int, ...]:
    """`None` -> all dims; an int or a sequence -> sorted unique non-negative dims (none for 0-d)."""
    if ndim == 0:
        for d in (() if dims is None else (dims,) if isinstance(dims, int) else dims):
            normalize_dim(op, d, 0)
        return ()
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(sorted({normalize_dim(op, d, ndim) for d in dims}))
    if len(out) != len(tuple(dims)):
        raise ShapeError(op, f"dims {tuple(dims)} name a dimension twice")
    return out


F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)


def is_half(dtype: np.dtype) -> bool:
    """Whether a NumPy dtype is f16 or bf16 (references compute those in f32, as PyTorch does)."""
    return dtype is F16 or dtype is BF16


def same_aval(x: Aval, **_params) -> Aval:
    """Shape rule of ops whose output looks exactly like their input."""
    return x
