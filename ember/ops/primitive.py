"""The primitive: one named op with its rules registered beside it (the JAX idea).

A `Primitive` carries everything ember knows about one op of the backend protocol:

- `infer(*avals, **params) -> Aval`: the shape and dtype rule, raising `ShapeError`/`DTypeError` naming
  the op and the shapes, before any backend sees the op: every backend gets the same checks and errors.
- `reference(*arrays, **params) -> ndarray`: the NumPy reference. The NumPy backend runs it; other
  backends are tested against it.
- `vjp(ctx, g) -> tuple`: the reverse-mode rule, written with ordinary `Tensor` ops: the cotangent `g`
  of the output in, one cotangent (or `None`) per input out.
- `cost`: `"memory"` for cheap ops whose outputs autodiff may recompute instead of keeping (elementwise,
  movement), `"compute"` for ops worth keeping (matmul, conv, reductions, sorts).
- `complex_rule`: whether `vjp` handles complex operands itself (conj, real, abs, cast, ...). Without
  it the rule is written for real operands and, as every such rule is the derivative of a holomorphic
  (or real-linear) map, autodiff applies it to complex ones as `conj(vjp(conj(g)))`: PyTorch's
  conjugate-Wirtinger convention (docs/complex.md).
- `saves(tracked) -> (input indices, output?)`: what `vjp` reads, given which inputs are tracked;
  autodiff keeps exactly these values for the backward pass, so a value no rule reads is freed (or,
  under fusion, never written) as soon as the user drops it. `saves_all` (the default), `saves_none`,
  `saves_inputs`, `saves_output` and `saves_partners` (input i's gradient reads the other inputs, as
  `mul` and `matmul`) cover most rules.

Every primitive has exactly one output; ops that return several tensors (sort, max with indices) are
compositions of single-output primitives in the tensor layer.

Example:
    >>> from ember.ops import registry
    >>> registry["exp"].infer(Aval((2, 3), f32))
    Aval(shape=(2, 3), dtype=f32)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from ..dtype import HALF_NP, DType
from ..errors import ShapeError


class Aval(NamedTuple):
    """An abstract value: what is known of a tensor before it is computed."""

    shape: tuple[int, ...]
    dtype: DType


class VjpContext:
    """What a gradient rule may read: the inputs and output as tensors (on the inner device) and params.

    Inputs are given lazily through `inputs` so that autodiff checkpointing can recompute them only
    when a rule actually asks. They are made as tensors like `like`, the rule's cotangent: rules compute
    with the methods of the tensors they are given, so this package imports no tensor layer.
    """

    __slots__ = ("_node", "params", "_like")

    def __init__(self, node, params: dict, like) -> None:
        self._node = node
        self.params = params
        self._like = like

    @property
    def inputs(self) -> tuple:
        return self._node.input_tensors(self._like)

    def input(self, i: int):
        """Input `i` alone (a rule that reads one input asks for that one, so the others need not be kept)."""
        return self._node.input_tensor(i, self._like)

    @property
    def output(self):
        return self._node.output_tensor(self._like)

    @property
    def input_avals(self) -> tuple[Aval, ...]:
        return self._node.input_avals

    def needs_grad(self, i: int) -> bool:
        """Whether input `i` is tracked (rules may skip work for constant inputs)."""
        return self._node.parent_is_tracked(i)


class Primitive:
    """A named op of the backend protocol with its shape rule, NumPy reference and gradient rule."""

    __slots__ = ("name", "infer", "reference", "vjp", "cost", "saves", "complex_rule")

    def __init__(
        self,
        name: str,
        *,
        infer: Callable[..., Aval],
        reference: Callable[..., Any],
        vjp: Callable[[VjpContext, Any], tuple] | None = None,
        cost: str = "memory",
        saves: Callable[[tuple[bool, ...]], tuple[tuple[int, ...], bool]] | None = None,
        complex_rule: bool = False,
    ) -> None:
        self.name = name
        self.infer = infer
        self.reference = reference
        self.vjp = vjp
        self.cost = cost
        self.saves = saves or saves_all
        self.complex_rule = complex_rule

    def __repr__(self) -> str:
        return f"Primitive({self.name})"


registry: dict[str, Primitive] = {}


# ---- what a gradient rule reads (`Primitive.saves`): (input indices, whether the output) ---------

def saves_all(tracked: tuple[bool, ...]) -> tuple[tuple[int, ...], bool]:
    """Every input and the output (the default: right for any rule).

    Example:
        >>> saves_all((True, False))
        ((0, 1), True)
    """
    return tuple(range(len(tracked))), True


def saves_none(tracked: tuple[bool, ...]) -> tuple[tuple[int, ...], bool]:
    """Nothing: the rule reads only the cotangent, avals and params (add, reshape, sum).

    Example:
        >>> saves_none((True, True))
        ((), False)
    """
    return (), False


def saves_inputs(tracked: tuple[bool, ...]) -> tuple[tuple[int, ...], bool]:
    """Every input, not the output (log, sin).

    Example:
        >>> saves_inputs((True,))
        ((0,), False)
    """
    return tuple(range(len(tracked))), False


def saves_output(tracked: tuple[bool, ...]) -> tuple[tuple[int, ...], bool]:
    """The output only (exp, tanh, sigmoid).

    Example:
        >>> saves_output((True,))
        ((), True)
    """
    return (), True


def saves_partners(tracked: tuple[bool, ...]) -> tuple[tuple[int, ...], bool]:
    """Input j when another input is tracked: input i's gradient reads the others (mul, matmul).

    Example:
        >>> saves_partners((True, False))   # x * c: c is kept, x is not
        ((1,), False)
    """
    return tuple(j for j in range(len(tracked)) if any(t for i, t in enumerate(tracked) if i != j)), False


def saves_inputs_at(*indices: int) -> Callable[[tuple[bool, ...]], tuple[tuple[int, ...], bool]]:
    """The inputs at `indices`, not the output (an index op's rule reads its index only).

    Example:
        >>> saves_inputs_at(1)((True, False))
        ((1,), False)
    """
    return lambda tracked: (indices, False)


def primitive(name: str, *, infer, vjp=None, cost: str = "memory", saves=None, complex_rule: bool = False):
    """Register the decorated NumPy reference as primitive `name` with its rules.

    Example:
        >>> @primitive("double", infer=same_aval, vjp=lambda ctx, g: (g * 2,), saves=saves_none)
        ... def double(x):
        ...     return x * 2
    """

    def register(reference: Callable) -> Primitive:
        if name in registry:
            raise ValueError(f"primitive {name!r} registered twice")
        prim = Primitive(name, infer=infer, reference=reference, vjp=vjp, cost=cost, saves=saves,
                         complex_rule=complex_rule)
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
        raise ShapeError(op, f"dim {dim} is out of range for a tensor of {ndim} dimensions: valid dims are "
                             f"{-bound} to {bound - 1}")
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


def is_half(dtype: np.dtype) -> bool:
    """Whether a NumPy dtype is f16 or bf16 (references compute those in f32, as PyTorch does)."""
    return dtype in HALF_NP


def same_aval(x: Aval, **_params) -> Aval:
    """Shape rule of ops whose output looks exactly like their input."""
    return x
