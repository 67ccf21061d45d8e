"""`ember.func`: function transforms (torch.func's and JAX's names) on top of the tape autodiff.

- `grad(f)`, `grad_and_value(f)`: the gradient of a function returning one element, for `argnums`.
- `vjp(f, *primals)`: the output and a function mapping output cotangents to input cotangents.
- `jvp(f, primals, tangents)`: the output and its directional derivative, by the double-vjp trick (the
  vjp is linear in its cotangent `u`; differentiating `<vjp(u), t>` by `u` gives `J t`), so every op
  with a gradient rule has one: about three times the cost of a forward, no forward-mode rules.
- `jacrev(f)` (also `jacobian`), `jacfwd(f)`: the Jacobian, of shape `out.shape + in.shape`, a row
  per output element (reverse) or a column per input element (forward, through `jvp`).
- `hessian(f)`: `jacfwd(jacrev(f))`, as torch.func.
- `vmap(f, in_dims, out_dims)`: `f` mapped over a batch dimension, slice by slice (below).

Where the results live: given tensors of a device without autodiff, the transforms return tensors of
that device, without history. Given tensors of an autodiff device (tracked or not), they return tensors
of that device that keep their history, so transforms nest (`grad(grad(f))`, `jacfwd(jacrev(f))`,
`vmap(grad(f))`) and their results are differentiable with respect to what `f` closes over.

`vmap` runs `f` once per slice of the batch and stacks the results: every op takes this per-slice path
(there are no batching rules yet), so it is correct for any `f` and costs a call of `f` per example;
random ops draw anew per example (torch.func.vmap's `randomness="different"`).

Example:
    >>> f = lambda x: (x.sin() * x).sum()
    >>> ember.func.grad(f)(ember.tensor([0.0, 1.0])).tolist()      # sin(x) + x cos(x)
    [0.0, 1.3817732334136963]
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .api.creation import eye, ones_like, zeros_like
from .api.shape import stack
from .autodiff.backend import Tracked
from .autodiff.composite import Composite
from .autodiff.graph import Node, backward
from .errors import EmberError, ShapeError
from .tensor import Tensor

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "jacobian", "hessian", "vmap"]


# ---- the shared machinery: lift the inputs, run f, walk back -------------------------------------

_IDENTITY = Composite("func_input", lambda ctx, g: (g,), lambda inputs: inputs[0])


def _lift(x: Tensor, op: str) -> Tensor:
    """`x` as a fresh tracked value of this call: a leaf, or (when already tracked: a nested transform)
    an identity node over it, so this call's gradient is taken with respect to this use of `x`."""
    if not isinstance(x, Tensor):
        raise EmberError(f"{op}: differentiated arguments must be tensors, got {type(x).__name__}")
    node = getattr(x._handle, "node", None)
    if node is None:
        return x.require_grad()
    lifted = Node(_IDENTITY, {}, (node,), x._aval, x._handle.primal, node.tape, keep=False, capped=False)
    return Tensor._make(x._device, Tracked(x._handle.primal, lifted, x._aval), x._aval)


class _Call:
    """One evaluation of `f` with the arguments at `argnums` lifted; `pull` walks back from its outputs."""

    def __init__(self, op: str, f: Callable, args: tuple, argnums: Sequence[int], has_aux: bool,
                 create_graph: bool = False, kwargs: dict | None = None) -> None:
        self.op = op
        for i in argnums:
            if not -len(args) <= i < len(args):
                raise EmberError(f"{op}: argnums {i} is out of range for {len(args)} arguments")
        self.keep = any(isinstance(args[i], Tensor) and args[i]._device.is_autodiff for i in argnums)
        self.create = create_graph or self.keep
        args = list(args)
        for i in argnums:
            args[i] = _lift(args[i], op)
        self.inputs = [args[i] for i in argnums]
        result = f(*args, **(kwargs or {}))
        if has_aux:
            if not isinstance(result, tuple) or len(result) != 2:
                raise EmberError(f"{op}: with has_aux=True, f must return (output, aux)")
            result, self.aux = result
        self.single = isinstance(result, Tensor)
        self.outputs = (result,) if self.single else tuple(result) if isinstance(result, (tuple, list)) else None
        if self.outputs is None or not all(isinstance(o, Tensor) for o in self.outputs):
            raise EmberError(f"{op}: f must return a tensor or a tuple of tensors, got {type(result).__name__}")

    def pull(self, cotangents: Sequence[Tensor], create: bool | None = None) -> list[Tensor]:
        """The cotangent of each input, given one per output (zeros where an input is not reached)."""
        create = self.create if create is None else create
        if len(cotangents) != len(self.outputs):
            raise EmberError(f"{self.op}: {len(cotangents)} cotangents for {len(self.outputs)} outputs")
        roots, seeds = [], []
        for out, ct in zip(self.outputs, cotangents):
            if ct.shape != out.shape:
                raise ShapeError(self.op, f"a cotangent of shape {ct.shape} for an output of shape {out.shape}")
            if out.requires_grad:
                roots.append(out._handle.node)
                seeds.append(ct.to(out._device if create else out._device.inner))
        found = backward(roots, seeds, create, [x._handle.node for x in self.inputs], True) if roots else {}
        grads = [found.get(x._handle.node) for x in self.inputs]
        return [self._zeros(x, create) if g is None else g for x, g in zip(self.inputs, grads)]

    def _zeros(self, x: Tensor, create: bool) -> Tensor:
        zero = zeros_like(x.detach())
        return zero if create else zero.inner()

    def result(self, value):
        """A result as the caller gets it: detached on the inner device unless the inputs were tracked."""
        if self.keep or not isinstance(value, Tensor):
            return value
        return value.detach().inner()

    def outputs_out(self):
        outs = tuple(self.result(o) for o in self.outputs)
        return outs[0] if self.single else outs


def _argnums(argnums) -> tuple[tuple[int, ...], bool]:
    """(the argument indices, whether one index was given)."""
    return ((argnums,), True) if isinstance(argnums, int) else (tuple(argnums), False)


def _pack(values: list, one: bool):
    return values[0] if one else tuple(values)


# ---- the transforms ------------------------------------------------------------------------------

def grad_and_value(f: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """`f` -> a function returning `(gradient, value)` (`(gradient, (value, aux))` with `has_aux`); `f`
    returns a tensor of one element; the gradient is one tensor for an int `argnums`, else a tuple.
    Keyword arguments pass through to `f` undifferentiated (as in torch.func).

    Example:
        >>> g, v = ember.func.grad_and_value(lambda x: (x * x).sum())(ember.tensor([3.0]))
        >>> g.tolist(), v.item()
        ([6.0], 9.0)
    """
    nums, one = _argnums(argnums)

    def transformed(*args, **kwargs):
        call = _Call("grad", f, args, nums, has_aux, kwargs=kwargs)
        out = call.outputs[0]
        if not call.single or out.numel != 1:
            shapes = [o.shape for o in call.outputs]
            raise ShapeError("grad", f"f must return a tensor of one element, it returned shapes {shapes}; "
                                     f"use ember.func.vjp or jacrev for other outputs")
        grads = call.pull([ones_like(out.detach())])
        value = call.result(out)
        return _pack(grads, one), ((value, call.result(call.aux)) if has_aux else value)

    return transformed


def grad(f: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """`f` -> its gradient function (torch.func.grad); with `has_aux`, `(gradient, aux)`.

    Example:
        >>> ember.func.grad(lambda x: (x ** 3).sum())(ember.tensor([2.0])).tolist()
        [12.0]
    """
    both = grad_and_value(f, argnums, has_aux)

    def transformed(*args, **kwargs):
        g, value = both(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return transformed


def vjp(f: Callable, *primals, has_aux: bool = False):
    """`(f(*primals), vjp_fn)` (and `aux` with `has_aux`); `vjp_fn(cotangent(s))` returns a tuple with
    the cotangent of each primal (torch.func.vjp). It can be called several times.

    Example:
        >>> out, back = ember.func.vjp(lambda x: x * 2, ember.tensor([1.0, 2.0]))
        >>> back(ember.tensor([1.0, 10.0]))[0].tolist()
        [2.0, 20.0]
    """
    call = _Call("vjp", f, primals, range(len(primals)), has_aux)

    def vjp_fn(*cotangents):
        if len(cotangents) == 1 and not call.single and isinstance(cotangents[0], (tuple, list)):
            cotangents = tuple(cotangents[0])
        return tuple(call.pull(cotangents))

    out = call.outputs_out()
    return (out, vjp_fn, call.result(call.aux)) if has_aux else (out, vjp_fn)


def _linearize(op: str, f: Callable, primals: tuple, argnums: Sequence[int], kwargs: dict | None = None):
    """`(call, push)`: `push(tangents)` is the jvp at `primals` by the double vjp, one output tangent per
    output: `vjp(u)` is recorded as a function of cotangents `u`, then differentiated by `u` along the
    tangents. The forward and the first vjp run once for every `push`."""
    call = _Call(op, f, primals, argnums, False, create_graph=True, kwargs=kwargs)
    us = [zeros_like(o.detach()).to(o._device).require_grad() if o.requires_grad else None
          for o in call.outputs]
    pulled = call.pull([u if u is not None else zeros_like(o) for u, o in zip(us, call.outputs)], create=True)

    def push(tangents: Sequence[Tensor]) -> list[Tensor]:
        if len(tangents) != len(call.inputs):
            raise EmberError(f"{op}: {len(tangents)} tangents for {len(call.inputs)} primals")
        roots, seeds = [], []
        for x, g, t in zip(call.inputs, pulled, tangents):
            if t.shape != x.shape:
                raise ShapeError(op, f"a tangent of shape {t.shape} for a primal of shape {x.shape}")
            if g.requires_grad:
                roots.append(g._handle.node)
                seeds.append(t.to(g._device if call.keep else g._device.inner))
        tracked = [u._handle.node for u in us if u is not None]
        found = backward(roots, seeds, call.keep, tracked, True) if roots and tracked else {}
        outs = []
        for u, o in zip(us, call.outputs):
            g = found.get(u._handle.node) if u is not None else None
            outs.append(call._zeros(o, call.keep) if g is None else g)
        return outs

    return call, push


def jvp(f: Callable, primals: tuple, tangents: tuple):
    """`(f(*primals), J·tangents)` (torch.func.jvp), by the double-vjp trick (see the module docs).

    Example:
        >>> out, t = ember.func.jvp(lambda x: x.exp(), (ember.tensor([0.0]),), (ember.tensor([3.0]),))
        >>> t.tolist()
        [3.0]
    """
    primals, tangents = tuple(primals), tuple(tangents)
    call, push = _linearize("jvp", f, primals, range(len(primals)))
    pushed = push(tangents)
    return call.outputs_out(), pushed[0] if call.single else tuple(pushed)


def _one_hot_rows(n: int, like: Tensor, shape: tuple) -> list[Tensor]:
    """The `n` basis tensors of `shape` in `like`'s dtype, on `like`'s inner device."""
    basis = eye(n, dtype=like.dtype, device=like._device.inner)
    return [basis[i].reshape(shape) for i in range(n)]


def _single_output(op: str, call: _Call) -> Tensor:
    if not call.single:
        raise EmberError(f"{op}: f must return one tensor, it returned {len(call.outputs)}")
    return call.outputs[0]


def jacrev(f: Callable, argnums=0) -> Callable:
    """`f` -> its Jacobian function by reverse mode: a vjp per output element; the Jacobian has shape
    `out.shape + input.shape` (a tuple of them for a tuple `argnums`), as torch.func.jacrev.

    Example:
        >>> ember.func.jacrev(lambda x: x * x)(ember.tensor([1.0, 2.0])).tolist()
        [[2.0, 0.0], [0.0, 4.0]]
    """
    nums, one = _argnums(argnums)

    def transformed(*args, **kwargs):
        call = _Call("jacrev", f, args, nums, False, kwargs=kwargs)
        out = _single_output("jacrev", call)
        rows = [call.pull([ct]) for ct in _one_hot_rows(out.numel, out, out.shape)]
        jacs = [_assemble(rows, k, out.shape + x.shape, x, call) for k, x in enumerate(call.inputs)]
        return _pack(jacs, one)

    return transformed


jacobian = jacrev


def jacfwd(f: Callable, argnums=0) -> Callable:
    """`f` -> its Jacobian function by forward mode: a jvp per input element (the double vjp: see the
    module docs); shape `out.shape + input.shape`, as torch.func.jacfwd.

    Example:
        >>> ember.func.jacfwd(lambda x: x.sum(0))(ember.ones(2, 1)).tolist()
        [[[1.0], [1.0]]]
    """
    nums, one = _argnums(argnums)

    def transformed(*args, **kwargs):
        call, push = _linearize("jacfwd", f, args, nums, kwargs)
        out = _single_output("jacfwd", call)
        jacs = []
        for k, x in enumerate(call.inputs):
            zeros = [zeros_like(y.detach()).inner() for y in call.inputs]
            cols = [push(zeros[:k] + [t] + zeros[k + 1:])[0]
                    for t in _one_hot_rows(x.numel, x, x.shape)]
            if not cols:
                jacs.append(call._zeros(_empty_like(x, out.shape + x.shape), call.keep))
                continue
            jacs.append(stack(cols, dim=-1).reshape(out.shape + x.shape))
        return _pack(jacs, one)

    return transformed


def _assemble(rows: list[list[Tensor]], k: int, shape: tuple, x: Tensor, call: _Call) -> Tensor:
    """The Jacobian of input `k` from the vjp rows (one per output element)."""
    if not rows:
        return call._zeros(_empty_like(x, shape), call.keep)
    return stack([r[k] for r in rows]).reshape(shape)


def _empty_like(x: Tensor, shape: tuple) -> Tensor:
    from .api.creation import zeros
    return zeros(*shape, dtype=x.dtype, device=x._device)


def hessian(f: Callable, argnums=0) -> Callable:
    """`f` -> its Hessian function, `jacfwd(jacrev(f))` (torch.func.hessian); shape `in.shape * 2`.

    Example:
        >>> ember.func.hessian(lambda x: (x ** 3).sum())(ember.tensor([1.0, 2.0])).tolist()
        [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacfwd(jacrev(f, argnums), argnums)


# ---- vmap ----------------------------------------------------------------------------------------

def vmap(f: Callable, in_dims=0, out_dims=0) -> Callable:
    """`f` mapped over a batch dimension (torch.func.vmap): `in_dims` (an int, None for an argument
    that is not batched, or a tuple of those per argument) says where each argument's batch dimension
    is; `out_dims` (an int or a tuple per output) where to put it in the results. `f` runs once per
    slice and the results are stacked (see the module docs), so any `f` works, transforms included.

    Example:
        >>> ember.func.vmap(lambda row: row.sum())(ember.ones(3, 2)).tolist()
        [2.0, 2.0, 2.0]
    """

    def transformed(*args):
        dims = in_dims if isinstance(in_dims, (tuple, list)) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise EmberError(f"vmap: in_dims has {len(dims)} entries for {len(args)} arguments")
        size = _batch_size(args, dims)
        results = [f(*[_slice(a, d, b) for a, d in zip(args, dims)]) for b in range(size)]
        single = isinstance(results[0], Tensor)
        outs = [[r] if single else list(r) for r in results]
        where = out_dims if isinstance(out_dims, (tuple, list)) else (out_dims,) * len(outs[0])
        if len(where) != len(outs[0]):
            raise EmberError(f"vmap: out_dims has {len(where)} entries for {len(outs[0])} outputs")
        stacked = [_stack_at([o[k] for o in outs], d) for k, d in enumerate(where)]
        return stacked[0] if single else tuple(stacked)

    return transformed


def _batch_size(args: tuple, dims: Sequence) -> int:
    sizes = {}
    for i, (a, d) in enumerate(zip(args, dims)):
        if d is None:
            continue
        if not isinstance(a, Tensor):
            raise EmberError(f"vmap: argument {i} is a {type(a).__name__} with in_dim {d}; give None for "
                             f"arguments that are not tensors")
        if not -a.ndim <= d < a.ndim:
            raise ShapeError("vmap", f"in_dim {d} is out of range for argument {i} of shape {a.shape}")
        sizes[i] = a.shape[d]
    if not sizes:
        raise EmberError("vmap: no argument is batched (every in_dim is None)")
    if len(set(sizes.values())) != 1:
        listed = ", ".join(f"argument {i}: {n}" for i, n in sizes.items())
        raise ShapeError("vmap", f"the batched arguments have different batch sizes ({listed})")
    size = next(iter(sizes.values()))
    if size == 0:
        raise ShapeError("vmap", "the batch has size 0: f must run at least once to give the output shape")
    return size


def _slice(a, d, b: int):
    if d is None:
        return a
    d = d % a.ndim
    return a[(slice(None),) * d + (b,)]


def _stack_at(values: list, d) -> Any:
    if not all(isinstance(v, Tensor) for v in values):
        raise EmberError(f"vmap: f must return tensors, got {type(values[0]).__name__}")
    if d is None:
        raise EmberError("vmap: out_dims None is only for outputs that do not depend on the batch; "
                         "give an int")
    ndim = values[0].ndim + 1
    if not -ndim <= d < ndim:
        raise ShapeError("vmap", f"out_dim {d} is out of range for outputs of shape {values[0].shape}")
    return stack(values, dim=d % ndim)
