"""`Param`: a trainable tensor, and `ParamGroup`: a named selection of a module's parameters.

A `Param` *is* a tensor (use it directly in forward code). It is updated in place by optimizers and
`Module.to`, so a module keeps the same `Param` objects for its whole life while their values change.
On an autodiff device a `Param` that is not frozen is a gradient leaf; `set()` keeps it one.

Example:
    >>> w = Param(ember.randn(3, 2, device=Device.cpu().autodiff()))
    >>> w.requires_grad
    True
"""

from __future__ import annotations

import re
from typing import Callable

from ..tensor import Tensor


class Param(Tensor):
    """A trainable parameter: a tensor that optimizers update and autodiff tracks as a leaf."""

    __slots__ = ("frozen",)

    def __new__(cls, value: Tensor, frozen: bool = False) -> "Param":
        if not isinstance(value, Tensor):
            raise TypeError(f"Param wraps a tensor, got {type(value).__name__}")
        p = object.__new__(cls)
        p.frozen = frozen
        p._bind(value)
        return p

    def __init__(self, value: Tensor, frozen: bool = False) -> None:  # state set in __new__
        pass

    def _bind(self, value: Tensor) -> None:
        value = value.detach()
        if value._device.is_autodiff and not self.frozen and value.dtype.is_float:
            value = value.require_grad()
        self._device, self._handle, self._aval = value._device, value._handle, value._aval

    def set(self, value: Tensor) -> None:
        """Replace the value (same object, new data); on an autodiff device it becomes a fresh leaf.

        The value moves to this parameter's device (so an update computed from inner-device gradients
        lands back on the autodiff device).
        """
        if value.shape != self.shape:
            from ..errors import ShapeError
            raise ShapeError("Param.set", f"new value of shape {value.shape} for a parameter of shape {self.shape}")
        self._bind(value.to(self._device))

    @property
    def value(self) -> Tensor:
        """The current value as a plain tensor."""
        return Tensor._make(self._device, self._handle, self._aval)

    def __deepcopy__(self, memo) -> "Param":
        return Param(self.value, self.frozen)

    def __repr__(self) -> str:
        return "Param(" + Tensor.__repr__(self) + (", frozen" if self.frozen else "") + ")"

    def __reduce__(self):
        return (Param, (self.value, self.frozen))


class ParamGroup:
    """A selection of parameters by name `prefix`, `regex` (searched in the name) or `predicate`,
    with options (e.g. `lr`, `weight_decay`) that optimizers read.

    Example:
        >>> head = ParamGroup(prefix="head.", lr=1e-3)
        >>> head.matches("head.weight", param)
        True
    """

    def __init__(self, prefix: str | None = None, regex: str | None = None,
                 predicate: Callable[[str, Param], bool] | None = None, **options) -> None:
        if sum(x is not None for x in (prefix, regex, predicate)) != 1:
            raise ValueError("ParamGroup needs exactly one of prefix=, regex= or predicate=")
        self.prefix = prefix
        self.regex = re.compile(regex) if regex is not None else None
        self.predicate = predicate
        self.options = options

    def matches(self, name: str, param: Param) -> bool:
        if self.prefix is not None:
            return name.startswith(self.prefix)
        if self.regex is not None:
            return self.regex.search(name) is not None
        return bool(self.predicate(name, param))

    def __repr__(self) -> str:
        how = (f"prefix={self.prefix!r}" if self.prefix is not None else
               f"regex={self.regex.pattern!r}" if self.regex is not None else "predicate=...")
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"ParamGroup({how}{opts})"

