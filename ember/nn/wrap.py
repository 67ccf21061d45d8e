"""`FunctionModule`: the module form of a function, holding the function's keyword options.

Activation and loss modules are one function each plus its settings; this base gives them those settings
as attributes (so tensor options such as a class weight are buffers, moved and saved with the module), a
`repr` that lists them, and a clear error for an unknown option.

Example:
    >>> class LeakyReLU(FunctionModule):
    ...     function = staticmethod(leaky_relu)
    >>> LeakyReLU(negative_slope=0.2)
    LeakyReLU(negative_slope=0.2, params=0)
"""

from __future__ import annotations

import inspect
from typing import Callable

from ..tensor import Tensor
from .module import Module


class FunctionModule(Module):
    """Calls `function(*inputs, **options)`; the options are `function`'s parameters that have defaults.

    Args:
        **options: keyword options of `function` (anything else raises `TypeError` naming it).
    """

    function: Callable[..., Tensor]

    def __init__(self, **options) -> None:
        params = inspect.signature(type(self).function).parameters
        defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
        unknown = sorted(set(options) - set(defaults))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown option(s) {unknown}; known: {sorted(defaults)}")
        self._option_names = list(defaults)
        for name, default in defaults.items():
            setattr(self, name, options.get(name, default))

    def forward(self, *inputs: Tensor) -> Tensor:
        options = {n: getattr(self, n) for n in self._option_names}
        return type(self).function(*inputs, **options)

    def extra_repr(self) -> str:
        return ", ".join(f"{n}={getattr(self, n)!r}" for n in self._option_names
                         if not isinstance(getattr(self, n), Tensor))
