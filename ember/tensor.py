"""`Tensor`: the user-facing array. It holds a device, a backend handle and an abstract value (shape and
dtype), and never names a backend: every op goes through `bind` (below) to the device's stack.

Tensors are immutable values. `x[idx] = v` rebinds `x` to a new tensor (recorded by autodiff); other
tensors that shared data with the old `x` are not changed.

The methods are defined in topical modules under `ember/api/` (creation, math, reduce, shape, index,
linalg, activation), which attach them when `ember.api` is imported, so each op's user-facing docs live
beside its composition. This module is the base of the tensor layer: it imports the layers below
(device, autodiff, ops), never `ember.api`.

`bind(prim, inputs, params)` is the one path every tensor op takes: it checks that the inputs share a
device (lifting a plain tensor onto the autodiff variant of its own device, so `w - lr * grad` works),
runs the primitive's shape rule, and asks the device's backend (`device.backend`) to execute.

Example:
    >>> x = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (x @ x.T + 1).sum(dim=1).tolist()
    [18.0, 38.0]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .autodiff.gradients import Gradients
from .autodiff.graph import backward as _backward
from .device import KINDS, Device
from .dtype import DType, dtype_of
from .errors import DeviceError, DTypeError, ShapeError
from .ops import registry
from .ops.primitive import Aval, Primitive, normalize_dim


class Tensor:
    """An n-dimensional array on a run-time device (see the module docs)."""

    __slots__ = ("_device", "_handle", "_aval", "__weakref__")
    __array_priority__ = 1000  # make `ndarray + Tensor` call Tensor.__radd__

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("create tensors with ember.tensor(...), ember.zeros(...), ember.from_numpy(...)")

    @staticmethod
    def _make(device, handle, aval: Aval) -> "Tensor":
        t = object.__new__(Tensor)
        t._device = device
        t._handle = handle
        t._aval = aval
        return t

    # ---- properties ------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The size of each dimension, as a tuple."""
        return self._aval.shape

    @property
    def dtype(self) -> DType:
        return self._aval.dtype

    @property
    def device(self):
        return self._device

    @property
    def ndim(self) -> int:
        return len(self._aval.shape)

    @property
    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self._aval.shape)

    def size(self, dim: int | None = None):
        """`shape`, or the size of one dim (PyTorch's `size`)."""
        if dim is None:
            return self.shape
        return self.shape[normalize_dim("size", dim, self.ndim)]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ---- host and interop ------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The data as a read-only NumPy array (no copy where the backend allows; `.copy()` to edit).

        Example:
            >>> ember.arange(3).numpy()
            array([0, 1, 2])
        """
        view = np.asarray(self._device.backend.to_host(self._handle)).view()
        view.flags.writeable = False
        return view

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.numpy()
        if dtype is not None:
            out = out.astype(dtype)
        return out.copy() if copy else out

    def item(self) -> Any:
        """The single element as a Python scalar."""
        if self.numel != 1:
            raise ValueError(f"item() needs a tensor of one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        """The data as nested Python lists (a scalar for 0-d tensors)."""
        return self.numpy().tolist()

    def to(self, *args, device=None, dtype=None) -> "Tensor":
        """This tensor on another device, cast to another dtype, or both, taken as PyTorch takes them:
        `to(device)`, `to(dtype)`, `to(device, dtype)`, `to(device=..., dtype=...)`; devices as `Device`s
        or strings ("cpu", "cuda:0"), dtypes as `DType`s, names ("bf16", "float32") or torch dtypes.

        Moving between a device and its autodiff variant shares the data; otherwise it goes through the
        host and does not carry gradient history.

        Example:
            >>> ember.ones(2).to("numpy", "f16").dtype
            f16
        """
        device, dtype = device_and_dtype("Tensor.to", args, device, dtype)
        out = self if device is None else transfer(self, device)
        return out if dtype is None else out.cast(dtype)

    def cast(self, dtype) -> "Tensor":
        """This tensor converted to `dtype` (floats to ints truncate toward zero)."""
        dtype = dtype_of(dtype)
        if dtype is self.dtype:
            return self
        return bind(registry["cast"], (self,), {"dtype": dtype})

    # ---- autodiff --------------------------------------------------------------------------------
    def require_grad(self) -> "Tensor":
        """This value as a leaf whose gradient `backward()` computes.

        On a device without autodiff the result lives on `device.autodiff()` (the data is shared).

        Example:
            >>> w = ember.randn(3).require_grad()
        """
        if not self.dtype.is_inexact:
            raise TypeError(f"only float and complex tensors can require gradients, got {self.dtype}")
        t = self if self._device.is_autodiff else self.to(self._device.autodiff())
        return Tensor._make(t._device, t._device.backend.leaf(t._handle), self._aval)

    @property
    def requires_grad(self) -> bool:
        """Whether this tensor is tracked by autodiff (a leaf or the result of tracked ops)."""
        return getattr(self._handle, "node", None) is not None

    def detach(self) -> "Tensor":
        """The same value with no gradient history (shares the data)."""
        if not self.requires_grad:
            return self
        return Tensor._make(self._device, self._device.backend.lift(self._handle.primal, self._aval), self._aval)

    def inner(self) -> "Tensor":
        """The same value on the device without autodiff (shares the data)."""
        return transfer(self, self._device.inner)

    def backward(self, grad: "Tensor | None" = None, *, create_graph: bool = False, inputs=None):
        """Reverse-mode autodiff from this tensor; returns `Gradients`.

        Without `grad` the tensor must hold one element (a loss) and the seed is 1; any other tensor
        needs its seed, `grad`, of its own shape (or backward from a reduction of it, `y.sum()`), as in
        PyTorch. With `create_graph=True` the gradients are tensors of the autodiff device with their
        own history (differentiable again: gradient penalties, Hessian-vector products); `inputs` (tracked
        tensors, leaves or intermediates) limits the walk to the gradients of those.

        Example:
            >>> grads = loss.backward()
            >>> w.grad(grads)
        """
        node = getattr(self._handle, "node", None)
        if node is None:
            raise RuntimeError(f"backward(): this tensor has no gradient history: {self._no_history_why()}")
        inner = self._device.inner
        seed = (grad.to(self._device if create_graph else inner) if grad is not None else None)
        if seed is None and self.dtype.is_complex:
            raise DTypeError(f"backward: a seed is implied only for a real output, this one is {self.dtype} "
                             f"(as in PyTorch): take a real loss first (z.abs().sum()), or pass one")
        if seed is None and not self.shape:
            # a loss: its seed 1 is the kept read-only 0-d constant of binary ops' scalars (no fill made
            # and run at every step), in a tensor object of its own
            one = scalar_like(1, self.dtype, inner)
            seed = Tensor._make(inner, one._handle, one._aval)
        elif seed is None:
            if self.numel != 1:
                raise ShapeError("backward", f"a seed is implied only for a tensor of one element, this one has "
                                             f"shape {self.shape}: pass one of that shape, y.backward(seed), or "
                                             f"reduce first, y.sum().backward()")
            seed = create(inner, registry["full"], {"shape": self.shape, "value": 1, "dtype": self.dtype})
        elif seed.shape != self.shape:
            raise ShapeError("backward", f"grad of shape {seed.shape} for a tensor of shape {self.shape}")
        if create_graph:
            seed = seed.to(self._device)
        stop = None if inputs is None else [Gradients._node(t) for t in inputs]
        return Gradients(_backward(node, seed, create_graph, stop))

    def _no_history_why(self) -> str:
        """Why this tensor has no gradient history, in the user's terms: the device, or the parameters."""
        device = self._device
        if not device.is_autodiff:
            return (f"it is on {device!r}, a device without autodiff; compute it on {device.autodiff()!r} "
                    f"(model.to({device.autodiff()!r}), x.to({device.autodiff()!r}).require_grad())")
        return (f"nothing it was computed from requires a gradient. If a model made it, its parameters are "
                f"probably on {device.inner!r}, a device without autodiff, while the inputs are on {device!r}: "
                f"move the model with model.to({device!r}) (parameters there are gradient leaves); a tensor "
                f"becomes a leaf with x.require_grad() (and nothing is tracked inside ember.no_grad())")

    def register_hook(self, fn):
        """Call `fn(grad)` with this tracked tensor's gradient during each backward walk; a tensor it
        returns (of the same shape) replaces the gradient. Returns a handle whose `remove()` takes it off.

        Example:
            >>> handle = h.register_hook(lambda g: g * 0.5)   # halve what flows back through h
            >>> handle.remove()
        """
        node = getattr(self._handle, "node", None)
        if node is None:
            raise RuntimeError(f"register_hook(): this tensor has no gradient history: {self._no_history_why()}")
        return node.add_hook(fn)

    def grad(self, grads) -> "Tensor | None":
        """This tensor's gradient in `grads` (a tensor on the inner device), or None if not reached."""
        return grads.get(self)

    # ---- Python protocol -------------------------------------------------------------------------
    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extra = f", dtype={self.dtype}" if self.dtype.name not in ("f32", "i64", "bool") else ""
        grad = ", requires_grad" if self.requires_grad else ""
        return f"tensor({body}{extra}, device={self._device!r}{grad})"

    def __bool__(self) -> bool:
        if self.numel != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not self.dtype.is_int or self.numel != 1:
            raise TypeError(f"only integer tensors of one element can be used as an index, got "
                            f"{self.dtype} of shape {self.shape}")
        return int(self.item())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    __hash__ = object.__hash__

    def __deepcopy__(self, memo) -> "Tensor":
        return self  # tensors are immutable values: a copy may share them

    def __reduce__(self):
        return (from_host, (np.array(self.numpy()), self._device.inner))


def _is_device_string(text: str) -> bool:
    return text.split(":")[0].lower() in KINDS


def device_and_dtype(op: str, args: tuple, device=None, dtype=None) -> "tuple[Any, DType | None]":
    """The `(Device or None, DType or None)` that `to(*args, device=, dtype=)` names, each positional
    argument read as a device or a dtype, whichever it is; anything else is a `DeviceError` naming both
    kinds.

    Example:
        >>> device_and_dtype("to", ("cpu", "bf16"))
        (Device("cpu"), bf16)
    """
    if len(args) > 2:
        raise TypeError(f"{op}() takes a device and a dtype, got {len(args)} positional arguments")
    for arg in args:
        if isinstance(arg, Device) or (isinstance(arg, str) and _is_device_string(arg)):
            device = arg
            continue
        try:
            dtype = dtype_of(arg)
        except DTypeError:
            raise DeviceError(f"{op}: {arg!r} is neither a device (kinds: {', '.join(KINDS)}, e.g. 'cuda:0') "
                              f"nor a dtype (e.g. ember.bf16, 'f32', 'float16')") from None
    return (None if device is None else Device(device)), (None if dtype is None else dtype_of(dtype))


CASTS = {"float": "f32", "double": "f64", "half": "f16", "bfloat16": "bf16", "long": "i64", "int": "i32",
         "short": "i16", "char": "i8", "byte": "u8", "bool": "bool"}
"""PyTorch's conversion methods (`x.float()`, `x.long()`, ...) and the dtype each casts to."""


def _cast_method(name: str, dtype: str):
    def convert(self: Tensor) -> Tensor:
        return self.cast(dtype)

    convert.__name__ = convert.__qualname__ = name
    convert.__doc__ = f"This tensor cast to {dtype} (PyTorch's `Tensor.{name}()`): `x.cast(\"{dtype}\")`."
    return convert


for _name, _dtype in CASTS.items():
    setattr(Tensor, _name, _cast_method(_name, _dtype))


# ---- the bridge from a tensor op to its device's backend stack -----------------------------------

def _unify(prim_name: str, inputs: tuple) -> tuple[Device, tuple]:
    """The one device `inputs` can meet on, and the inputs on it.

    Plain tensors meet the autodiff variant of their own device by being lifted (no copy); anything
    else is an error naming the devices.
    """
    target = next((t._device for t in inputs if t._device.is_autodiff), inputs[0]._device)
    for t in inputs:
        d = t._device
        if d.inner is not target.inner or (d.is_autodiff and d is not target):
            devices = sorted({repr(t._device) for t in inputs})
            why = ("autodiff devices with different checkpointing" if d.inner is target.inner
                   else "different devices")
            raise DeviceError(f"{prim_name}: tensors are on {why}, {' and '.join(devices)}; "
                              f"move them with .to(device)")
    backend = target._backend or target.backend
    return target, tuple(t if t._device is target else
                         Tensor._make(target, backend.lift(t._handle, t._aval), t._aval) for t in inputs)


def bind(prim: Primitive, inputs: tuple, params: dict) -> Tensor:
    """Apply `prim` to tensors `inputs` with `params`; the result is a tensor on their device.

    Example:
        >>> bind(registry["exp"], (x,), {})        # what x.exp() does
    """
    if len(inputs) == 2:  # the common binary op, without the loop and the two comprehensions' frames
        a, b = inputs
        device = a._device
        if b._device is not device:
            device, (a, b) = _unify(prim.name, inputs)
        aval = prim.infer(a._aval, b._aval, **params)
        handles = [a._handle, b._handle]
    elif len(inputs) == 1:  # views, unary ops and reductions: no loop either
        a, = inputs
        device = a._device
        aval = prim.infer(a._aval, **params)
        handles = [a._handle]
    else:
        device = inputs[0]._device
        for t in inputs:
            if t._device is not device:
                device, inputs = _unify(prim.name, inputs)
                break
        aval = prim.infer(*[t._aval for t in inputs], **params)
        handles = [t._handle for t in inputs]
    backend = device._backend or device.backend
    handle = backend.execute(prim, handles, params, aval)
    out = _new(Tensor)  # Tensor._make's work without its frame (the dispatch hot path)
    out._device, out._handle, out._aval = device, handle, aval
    return out


_new = object.__new__
Tensor._bind = staticmethod(bind)  # how the primitives' gradient rules bind (`ember.ops.spatial.call`)


def create(device: Device, prim: Primitive, params: dict) -> Tensor:
    """Run a creation primitive (no tensor inputs) on `device`."""
    aval = prim.infer(**params)
    return Tensor._make(device, device.backend.execute(prim, [], params, aval), aval)


def from_host(array: np.ndarray, device: Device) -> Tensor:
    """A tensor on `device` over the host `array`, of its dtype (the CPU devices may share its memory).

    Example:
        >>> from_host(np.zeros(2, np.float32), Device.numpy()).dtype
        f32
    """
    return Tensor._make(device, device.backend.from_host(array), Aval(array.shape, dtype_of(array.dtype)))


_scalars: dict[tuple, Tensor] = {}  # a small registry of constant 0-d tensors, by value, dtype, device


def scalar_like(value, dtype: DType, device: Device) -> Tensor:
    """A 0-d tensor holding a Python scalar, on `device` with `dtype`.

    Recent constants are reused (tensors are immutable): `x * 2.0` in a loop converts 2.0 once. A zero
    or NaN is keyed by its text: 0.0 == -0.0 would share one key, and NaN, equal to nothing, would
    miss its own (a loss's `masked_fill(empty, nan)` then uploaded a new 0-d tensor at every step, and
    kept up to 1,024 of them).

    Example:
        >>> scalar_like(float("nan"), f32, device) is scalar_like(float("nan"), f32, device)
        True
    """
    if value and value == value:  # the common case: a number other than zero, equal to itself
        key = (type(value), value, dtype, device)
    else:
        key = (type(value), repr(value), dtype, device)
    hit = _scalars.get(key)
    if hit is not None:
        return hit
    array = np.asarray(value).astype(dtype.np)  # astype wraps ints as PyTorch does (u8: -2 -> 254)
    array.flags.writeable = False
    out = Tensor._make(device, device.backend.from_host(array), Aval((), dtype))
    if len(_scalars) >= 1024:
        _scalars.clear()
    _scalars[key] = out
    return out


def transfer(tensor: Tensor, device: Device) -> Tensor:
    """`tensor` on `device`: free between a device and its autodiff variant, direct where the backends
    have a path (`Backend.move_from`: remote server to server), else through the host."""
    source = tensor._device
    if source is device:
        return tensor
    if source.inner is device.inner:
        if device.is_autodiff and not source.is_autodiff:
            return Tensor._make(device, device.backend.lift(tensor._handle, tensor._aval), tensor._aval)
        if source.is_autodiff and not device.is_autodiff:
            return Tensor._make(device, tensor._handle.primal, tensor._aval)
        return Tensor._make(device, device.backend.lift(tensor._handle.primal, tensor._aval), tensor._aval)
    primal = tensor._handle.primal if source.is_autodiff else tensor._handle
    moved = device.inner.backend.move_from(source.inner.backend, primal, tensor._aval)
    if moved is not None:
        return Tensor._make(device, device.backend.lift(moved, tensor._aval) if device.is_autodiff else moved,
                            tensor._aval)
    array = source.backend.to_host(tensor._handle)
    return Tensor._make(device, device.backend.from_host(array), tensor._aval)


def value_bounds(tensor: Tensor) -> tuple[int, int] | None:
    """(min, max) of an integer tensor's values when its backend knows them without waiting for a device
    (data uploaded from the host keeps the bounds of that data), else None: a check of index values
    reads them (and waits for the work queued before) only when this says nothing.

    Example:
        >>> value_bounds(ember.tensor([3, 1, 2], device=Device.cuda(0)))
        (1, 3)
    """
    return tensor._device.backend.value_bounds(tensor._handle)
