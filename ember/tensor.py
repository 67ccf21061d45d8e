"""`Tensor`: the user-facing array. It holds a device, a backend handle and an abstract value (shape and
dtype), and never names a backend: every op goes through `dispatch.bind` to the device's stack.

Tensors are immutable values. `x[idx] = v` rebinds `x` to a new tensor (recorded by autodiff); other
tensors that shared data with the old `x` are not changed.

The methods are defined in topical modules under `ember/api/` (creation, math, reduce, shape, index,
linalg, activation) and attached here, so each op's user-facing docs live beside its composition.

Example:
    >>> x = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (x @ x.T + 1).sum(dim=1).tolist()
    [18.0, 38.0]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .dtype import DType, dtype_of
from .ops.primitive import Aval


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
        from .ops.primitive import normalize_dim
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

    def __dlpack__(self, *args, **kwargs):
        from .dlpack import export_tensor
        return export_tensor(self, *args, **kwargs)

    def __dlpack_device__(self):
        from .dlpack import device_of
        return device_of(self)  # kDLCUDA on a CUDA device (memory shared), else kDLCPU (through the host)

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
        from .dispatch import transfer
        device, dtype = device_and_dtype("Tensor.to", args, device, dtype)
        out = self if device is None else transfer(self, device)
        return out if dtype is None else out.cast(dtype)

    def cast(self, dtype) -> "Tensor":
        """This tensor converted to `dtype` (floats to ints truncate toward zero)."""
        dtype = dtype_of(dtype)
        if dtype is self.dtype:
            return self
        from .dispatch import bind
        from .ops import registry
        return bind(registry["cast"], (self,), {"dtype": dtype})

    # ---- autodiff --------------------------------------------------------------------------------
    def require_grad(self) -> "Tensor":
        """This value as a leaf whose gradient `backward()` computes.

        On a device without autodiff the result lives on `device.autodiff()` (the data is shared).

        Example:
            >>> w = ember.randn(3).require_grad()
        """
        if not self.dtype.is_float:
            raise TypeError(f"only float tensors can require gradients, got {self.dtype}")
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
        from .dispatch import transfer
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
        from .autodiff.gradients import Gradients
        from .autodiff.graph import backward
        node = getattr(self._handle, "node", None)
        if node is None:
            raise RuntimeError(f"backward(): this tensor has no gradient history: {self._no_history_why()}")
        inner = self._device.inner
        seed = (grad.to(self._device if create_graph else inner) if grad is not None else None)
        if seed is None and not self.shape:
            # a loss: its seed 1 is the kept read-only 0-d constant of binary ops' scalars (no fill made
            # and run at every step), in a tensor object of its own
            from .api._common import scalar_like
            one = scalar_like(1, self.dtype, inner)
            seed = Tensor._make(inner, one._handle, one._aval)
        elif seed is None:
            from .errors import ShapeError
            if self.numel != 1:
                raise ShapeError("backward", f"a seed is implied only for a tensor of one element, this one has "
                                             f"shape {self.shape}: pass one of that shape, y.backward(seed), or "
                                             f"reduce first, y.sum().backward()")
            from .api.creation import ones
            seed = ones(*self.shape, dtype=self.dtype, device=inner)
        elif seed.shape != self.shape:
            from .errors import ShapeError
            raise ShapeError("backward", f"grad of shape {seed.shape} for a tensor of shape {self.shape}")
        if create_graph:
            seed = seed.to(self._device)
        stop = None if inputs is None else [Gradients._node(t) for t in inputs]
        return Gradients(backward(node, seed, create_graph, stop))

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
        from .api.creation import tensor
        return (tensor, (np.array(self.numpy()), self.dtype.name, self._device.inner))


def _is_device_string(text: str) -> bool:
    from .device import KINDS
    return text.split(":")[0].lower() in KINDS


def device_and_dtype(op: str, args: tuple, device=None, dtype=None) -> "tuple[Any, DType | None]":
    """The `(Device or None, DType or None)` that `to(*args, device=, dtype=)` names, each positional
    argument read as a device or a dtype, whichever it is; anything else is a `DeviceError` naming both
    kinds.

    Example:
        >>> device_and_dtype("to", ("cpu", "bf16"))
        (Device("cpu"), bf16)
    """
    from .device import Device, KINDS
    from .errors import DeviceError, DTypeError
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


def _attach_methods() -> None:
    """Attach the functions of `ember/api/*` as Tensor methods and operators."""
    from .api import METHODS
    for name, fn in METHODS.items():
        setattr(Tensor, name, fn)
    for name, dtype in CASTS.items():
        setattr(Tensor, name, _cast_method(name, dtype))


_attach_methods()
