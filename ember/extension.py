"""`@ember.backend_extension`: a custom op from a cube kernel, with its shape rule and gradient.

The decorated function is the op's forward on the cube target: input arrays in (keyword-only
parameters are hashable params), the output array out, launching `@cube.kernel`s. It registers a
primitive with:

- `shape(*input_shapes, **params) -> output shape`, checked on every device; `dtype` (optional).
- `backward(grad, out, *inputs, **params) -> a gradient (tensor or None) per input`, with ember ops
  (without it a backward pass reaching the op raises); `saves` ("all", "inputs", "output", "none")
  says which values it reads (the others arrive as None).
- `reference(*arrays, **params)` (optional): the op in NumPy, for devices without a cube target (else
  `DeviceError`) and as the tests' oracle.

The op is a fusion sync point unless `pure=True`; `out=` donation and the rest: docs/extension.md.

Example:
    >>> @ember.backend_extension(shape=lambda x: x, reference=lambda x: np.maximum(x, 0),
    ...                          backward=lambda g, out, x: (g.masked_fill(out <= 0, 0),))
    ... def my_relu(x):
    ...     x = contiguous(x)
    ...     out = empty(x.shape, x.dtype, x)       # the kernel library's allocation: on x's runtime
    ...     relu_kernel.launch(*grid(x.size), x.reshape(-1), out.reshape(-1))
    ...     return out
    >>> my_relu(ember.tensor([-1.0, 2.0])).tolist()
    [0.0, 2.0]
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple

import numpy as np

from .dtype import DType, dtype_of
from .errors import DeviceError, EmberError
from .ops.primitive import Aval, Primitive, VjpContext, registry, saves_all, saves_inputs, saves_none, saves_output
from .tensor import Tensor, bind



class Saves(NamedTuple):
    """One value of `backend_extension(saves=)`: the primitive's `saves` rule and what `backward` is given."""

    rule: Callable
    inputs: bool
    output: bool


# `saves=` of `backend_extension`: what the op's `backward` reads (the others reach it as None).
SAVES = {"all": Saves(saves_all, True, True), "inputs": Saves(saves_inputs, True, False),
         "output": Saves(saves_output, False, True), "none": Saves(saves_none, False, False)}


def cube_target(device) -> str | None:
    """The cube target that runs `device`'s kernels ("cpu" for the C target), or None (NumPy).

    Found by walking the backend stack through its decorators (autodiff, fusion) to the backend that
    declares a `cube_target`.

    Example:
        >>> cube_target(ember.Device.numpy()) is None
        True
    """
    backend = device.inner.backend
    while backend is not None:
        target = getattr(backend, "cube_target", None)
        if target is not None:
            return target
        backend = getattr(backend, "inner", None)
    return None


class Extension:
    """A custom op made by `backend_extension`: call it on tensors (see the module docstring)."""

    def __init__(self, forward: Callable, *, name: str, shape: Callable, dtype: Callable | None,
                 backward: Callable | None, reference: Callable | None, saves: str = "all",
                 pure: bool = False) -> None:
        if saves not in SAVES:
            raise ValueError(f"backend_extension: saves must be one of {sorted(SAVES)}, got {saves!r}")
        self.name = name
        self.forward = forward
        self.shape = shape
        self.dtype = dtype
        self.backward = backward
        self.reference = reference
        self.arity, self.param_names, writes_over = _signature(name, forward)
        self.__name__ = forward.__name__
        self.__doc__ = forward.__doc__
        if name in registry:
            raise ValueError(f"backend_extension: an op named {name!r} is already registered; pass name=...")
        self.primitive = registry[name] = Primitive(name, infer=self._infer, reference=self._reference,
                                                    vjp=self._vjp, cost="compute", saves=SAVES[saves].rule)
        self.saves = SAVES[saves]
        self.pure = bool(pure)
        self._inferred: dict[tuple, Aval] = {}  # (input avals, params) -> output aval (see `_infer`)
        _register_lowering(name, self._run, writes_over)
        if self.pure:
            from .backend.fusion.ops import record_inner
            record_inner(self.primitive)

    def __repr__(self) -> str:
        return f"<ember.backend_extension {self.name}>"

    def __call__(self, *inputs: Tensor, **params: Any) -> Tensor:
        if len(inputs) != self.arity:
            raise TypeError(f"{self.name}: takes {self.arity} tensor inputs, got {len(inputs)}")
        for i, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"{self.name}: input {i} must be an ember Tensor, got {type(t).__name__}")
        unknown = set(params) - set(self.param_names)
        if unknown:
            raise TypeError(f"{self.name}: unknown param(s) {sorted(unknown)}; its params are "
                            f"{sorted(self.param_names) or 'none'}")
        try:
            hash(tuple(params.items()))
        except TypeError:
            raise TypeError(f"{self.name}: params must be hashable (ints, floats, strings, tuples), "
                            f"got {params!r}") from None
        device = inputs[0].device
        if self.reference is None and cube_target(device) is None:
            raise DeviceError(f"{self.name}: {device!r} has no cube target and the op has no NumPy "
                              f"reference; run it on a device with a cube target (Device.cpu()) or "
                              f"pass reference= to @ember.backend_extension")
        return bind(self.primitive, inputs, params)

    # ---- the primitive's rules -----------------------------------------------------------------------
    def _infer(self, *avals: Aval, **params) -> Aval:
        """The output's shape and dtype by the op's rules. The rules are functions of the inputs' shapes
        and dtypes and of the params (hashable, checked at the call), so their answers are remembered
        (an optimizer step calls an update op per parameter on the same few shapes every step, and the
        rules and checks cost more than the lookup). Errors are not remembered: they are raised again."""
        key = (avals, tuple(params.items()))
        known = self._inferred.get(key)
        if known is not None:
            return known
        if len(self._inferred) >= 1024:
            self._inferred.clear()
        out = self._inferred[key] = self._rules(avals, params)
        return out

    def _rules(self, avals: tuple, params: dict) -> Aval:
        shape = self.shape(*(a.shape for a in avals), **params)
        try:
            shape = tuple(int(n) for n in shape)
        except TypeError:
            raise EmberError(f"{self.name}: its shape rule must return a tuple of ints, got {shape!r}") from None
        if any(n < 0 for n in shape):
            raise EmberError(f"{self.name}: its shape rule gave a negative size, {shape}")
        dtype = self.dtype(*(a.dtype for a in avals), **params) if self.dtype else avals[0].dtype
        if not isinstance(dtype, DType):
            raise EmberError(f"{self.name}: its dtype rule must return an ember DType, got {dtype!r}")
        return Aval(shape, dtype)

    def _run(self, aval: Aval, *arrays: np.ndarray, over=None, **params) -> np.ndarray:
        """The forward on a cube target, checked against the shape rule; `over` (an input the result may
        be written over) goes to the forward as `out=`."""
        result = self.forward(*arrays, **params) if over is None else self.forward(*arrays, out=over, **params)
        return self._checked(result, aval, "forward")

    def _reference(self, *arrays: np.ndarray, **params) -> np.ndarray:
        if self.reference is None:
            raise DeviceError(f"{self.name}: its cube kernel cannot run here and the op has no NumPy "
                              f"reference (pass reference= to @ember.backend_extension)")
        out = self._infer(*(Aval(a.shape, dtype_of(a.dtype)) for a in arrays), **params)
        return self._checked(np.asarray(self.reference(*arrays, **params)), out, "reference")

    def _checked(self, result, out: Aval, which: str):
        if tuple(result.shape) != out.shape or np.dtype(result.dtype) != out.dtype.np:
            raise EmberError(f"{self.name}: its {which} returned {tuple(result.shape)} {np.dtype(result.dtype)}, "
                             f"but its shape rule says {out.shape} {out.dtype}")
        return result

    def _vjp(self, ctx: VjpContext, g: Tensor) -> tuple:
        if self.backward is None:
            raise EmberError(f"{self.name}: has no gradient; pass backward= to @ember.backend_extension")
        inputs = ctx.inputs if self.saves.inputs else (None,) * len(ctx.input_avals)
        output = ctx.output if self.saves.output else None
        grads = self.backward(g, output, *inputs, **ctx.params)
        grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
        if len(grads) != len(inputs):
            raise EmberError(f"{self.name}: backward returned {len(grads)} gradients for {len(inputs)} inputs")
        for i, (gi, (shape, _)) in enumerate(zip(grads, ctx.input_avals)):
            if gi is not None and tuple(gi.shape) != tuple(shape):
                raise EmberError(f"{self.name}: backward gave input {i} a gradient of shape {tuple(gi.shape)}; "
                                 f"the input has shape {tuple(shape)}")
        return grads


def _signature(name: str, forward: Callable) -> tuple[int, tuple[str, ...], bool]:
    """(number of tensor inputs, names of keyword-only params, whether it takes `out=None`) of a forward."""
    arity, params, writes_over = 0, [], False
    for p in inspect.signature(forward).parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            arity += 1
        elif p.kind == p.KEYWORD_ONLY and p.name == "out" and p.default is None:
            writes_over = True
        elif p.kind == p.KEYWORD_ONLY:
            params.append(p.name)
        else:
            raise TypeError(f"backend_extension {name}: the forward takes tensor inputs as positional "
                            f"parameters and params as keyword-only ones, not *{p.name}/**{p.name}")
    if arity == 0:
        raise TypeError(f"backend_extension {name}: the forward needs at least one tensor input")
    return arity, tuple(params), writes_over


def _register_lowering(name: str, run: Callable, writes_over: bool) -> None:
    """The op's row in the Cube lowering table: its forward is the kernel."""
    from .backend.cube.lowering import TABLE, Lowering
    TABLE[name] = Lowering(run, writes_over=writes_over)


def backend_extension(fn: Callable | None = None, *, shape: Callable, backward: Callable | None = None,
                      reference: Callable | None = None, dtype: Callable | None = None,
                      name: str | None = None, saves: str = "all", pure: bool = False):
    """Decorator: a custom op from a forward that launches cube kernels (see the module docstring).

    Example:
        >>> @ember.backend_extension(shape=lambda x, w, b: x[:-1] + w[1:],
        ...                          reference=lambda x, w, b: np.maximum(x @ w + b, 0))
        ... def matmul_bias_relu(x, w, b):
        ...     return launch_fused_kernel(x, w, b)
        >>> matmul_bias_relu(x, w, b).shape
        (8, 16)
    """
    def make(forward: Callable) -> Extension:
        return Extension(forward, name=name or forward.__name__, shape=shape, dtype=dtype, backward=backward,
                         reference=reference, saves=saves, pure=pure)
    return make if fn is None else make(fn)
