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

`outputs=N` (N > 1): the forward returns N arrays, `shape`/`dtype` a tuple each, the call a tuple of
tensors, and `backward(grads, outs, *inputs)` gets tuples (integer outputs: no gradient).

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
import math
from typing import Any, Callable, NamedTuple

import numpy as np

from .dtype import DType, dtype_of
from .errors import DeviceError, EmberError
from .ops.primitive import Aval, Primitive, VjpContext, registry, saves_all, saves_inputs, saves_none, saves_output
from .tensor import Tensor, bind



class Packing(NamedTuple):
    """Several outputs in one carrier: the primitive's value is a flat array of the first output's dtype
    holding the outputs one after another; an integer output is carried as floats (exact while its
    values stay within the carrier's integers: 2**24 for f32, 2**53 for f64) and converted back."""

    carrier: DType
    size: int
    parts: tuple  # (start, shape, dtype) per output


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
                 pure: bool = False, outputs: int = 1) -> None:
        if saves not in SAVES:
            raise ValueError(f"backend_extension: saves must be one of {sorted(SAVES)}, got {saves!r}")
        self.name = name
        self.forward = forward
        self.shape = shape
        self.dtype = dtype
        self.backward = backward
        self.reference = reference
        if not isinstance(outputs, int) or outputs < 1:
            raise ValueError(f"backend_extension {name}: outputs must be a positive int, got {outputs!r}")
        self.outputs = outputs
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
        self._packings: dict[tuple, Packing] = {}  # the same keys -> where several outputs sit
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
        out = bind(self.primitive, inputs, params)
        if self.outputs == 1:
            return out
        return self._unpack(out, tuple((i.shape, i.dtype) for i in inputs), params)

    # ---- several outputs: one carrier array -------------------------------------------------------
    def _layout(self, avals: tuple, params: dict) -> Packing:
        """Where each output sits in the carrier (see `Packing`)."""
        key = (avals, tuple(params.items()))
        known = self._packings.get(key)
        if known is None:
            self._infer(*avals, **params)
            known = self._packings[key]
        return known

    def _unpack(self, carrier: Tensor, avals: tuple, params: dict) -> tuple:
        """The outputs as tensors: views of the carrier, integer ones converted to their dtype."""
        packing = self._layout(tuple(Aval(s, d) for s, d in avals), params)
        outs = []
        for (start, shape, dtype) in packing.parts:
            part = carrier[start:start + math.prod(shape)].reshape(shape)
            outs.append(part if dtype is packing.carrier else part.to(dtype))
        return tuple(outs)

    def _pack(self, results, packing: Packing, like_empty: Callable):
        """One carrier array holding `results` one after another (`like_empty(n)` allocates it)."""
        from .kernels.common import assign
        if not isinstance(results, (tuple, list)) or len(results) != self.outputs:
            raise EmberError(f"{self.name}: its forward must return {self.outputs} arrays, got {type(results).__name__}")
        carrier = like_empty(packing.size)
        for i, (r, (start, shape, dtype)) in enumerate(zip(results, packing.parts)):
            if tuple(r.shape) != shape or np.dtype(r.dtype) != dtype.np:
                raise EmberError(f"{self.name}: output {i} of its forward is {tuple(r.shape)} {np.dtype(r.dtype)}, "
                                 f"but its shape rule says {shape} {dtype}")
            if r.size:
                assign(carrier[start:start + r.size].reshape(shape), r)
        return carrier

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
            self._packings.clear()
        out = self._inferred[key] = self._rules(avals, params)
        return out

    def _rules(self, avals: tuple, params: dict) -> Aval:
        if self.outputs > 1:
            return self._packed_rules(avals, params)
        shape = self.shape(*(a.shape for a in avals), **params)
        dtype = self.dtype(*(a.dtype for a in avals), **params) if self.dtype else avals[0].dtype
        return Aval(self._checked_shape(shape), self._checked_dtype(dtype))

    def _packed_rules(self, avals: tuple, params: dict) -> Aval:
        shapes = self.shape(*(a.shape for a in avals), **params)
        dtypes = self.dtype(*(a.dtype for a in avals), **params) if self.dtype else (avals[0].dtype,) * self.outputs
        if not isinstance(shapes, (tuple, list)) or len(shapes) != self.outputs:
            raise EmberError(f"{self.name}: its shape rule must return {self.outputs} shapes, got {shapes!r}")
        if not isinstance(dtypes, (tuple, list)) or len(dtypes) != self.outputs:
            raise EmberError(f"{self.name}: its dtype rule must return {self.outputs} dtypes, got {dtypes!r}")
        shapes = [self._checked_shape(s) for s in shapes]
        dtypes = [self._checked_dtype(d) for d in dtypes]
        carrier = dtypes[0]
        parts, start = [], 0
        for shape, dtype in zip(shapes, dtypes):
            if dtype is not carrier and (dtype.is_float or not carrier.is_float):
                raise EmberError(f"{self.name}: several outputs share the first one's dtype ({carrier}), except "
                                 f"integer ones carried in it; output of dtype {dtype} cannot be")
            parts.append((start, shape, dtype))
            start += math.prod(shape)
        self._packings[(avals, tuple(params.items()))] = Packing(carrier, start, tuple(parts))
        return Aval((start,), carrier)

    def _checked_shape(self, shape) -> tuple:
        try:
            shape = tuple(int(n) for n in shape)
        except TypeError:
            raise EmberError(f"{self.name}: its shape rule must return a tuple of ints, got {shape!r}") from None
        if any(n < 0 for n in shape):
            raise EmberError(f"{self.name}: its shape rule gave a negative size, {shape}")
        return shape

    def _checked_dtype(self, dtype) -> DType:
        if not isinstance(dtype, DType):
            raise EmberError(f"{self.name}: its dtype rule must return an ember DType, got {dtype!r}")
        return dtype

    def _run(self, aval: Aval, *arrays: np.ndarray, over=None, **params) -> np.ndarray:
        """The forward on a cube target, checked against the shape rule; `over` (an input the result may
        be written over) goes to the forward as `out=`."""
        result = self.forward(*arrays, **params) if over is None else self.forward(*arrays, out=over, **params)
        if self.outputs > 1:
            from .kernels.common import empty
            packing = self._layout(tuple(Aval(a.shape, dtype_of(a.dtype)) for a in arrays), params)
            result = self._pack(result, packing, lambda n: empty((n,), aval.dtype.np, *arrays))
        return self._checked(result, aval, "forward")

    def _reference(self, *arrays: np.ndarray, **params) -> np.ndarray:
        if self.reference is None:
            raise DeviceError(f"{self.name}: its cube kernel cannot run here and the op has no NumPy "
                              f"reference (pass reference= to @ember.backend_extension)")
        avals = tuple(Aval(a.shape, dtype_of(a.dtype)) for a in arrays)
        out = self._infer(*avals, **params)
        result = self.reference(*arrays, **params)
        if self.outputs > 1:
            result = self._pack([np.asarray(r) for r in result], self._layout(avals, params),
                                lambda n: np.empty((n,), out.dtype.np))
        return self._checked(np.asarray(result), out, "reference")

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
        if self.outputs > 1:
            avals = tuple((tuple(s), d) for s, d in ctx.input_avals)
            packing = self._layout(tuple(Aval(s, d) for s, d in avals), ctx.params)
            g = tuple(gi if d.is_float else None for gi, (_, _, d) in zip(self._unpack(g, avals, ctx.params),
                                                                            packing.parts))
            output = None if output is None else self._unpack(output, avals, ctx.params)
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
                      name: str | None = None, saves: str = "all", pure: bool = False, outputs: int = 1):
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
                         reference=reference, saves=saves, pure=pure, outputs=outputs)
    return make if fn is None else make(fn)
