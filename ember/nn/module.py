"""`Module`: a plain Python class whose attributes are its parts.

Attributes that are `Param`s are trainable parameters; other tensors are buffers (saved and moved, not
trained); `Module`s, and lists, tuples and dicts of them, are children. Nothing needs registering and
`super().__init__()` is optional: the structure is found by walking attributes in definition order.
The containers of `ember.nn.containers` (`Sequential`, `ModuleList`, ...) are modules whose attributes
are named "0", "1", ... (or by their keys), so state-dict names match PyTorch's.

Forward hooks (`register_forward_pre_hook`, `register_forward_hook`) run around `forward` when the
module is called, as in PyTorch; each registration returns a handle whose `remove()` undoes it.

Example:
    >>> class MLP(Module):
    ...     def __init__(self):
    ...         self.layers = [Linear(4, 8), Linear(8, 2)]
    ...     def forward(self, x):
    ...         return self.layers[1](relu(self.layers[0](x)))
    >>> MLP().num_params()
    58
"""

from __future__ import annotations

import copy
import itertools
from collections import OrderedDict
from typing import Any, Callable, Iterator, NamedTuple

from ..api.quantize import QTensor, quantize
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor, device_and_dtype
from .param import Param, ParamGroup


class LoadReport(NamedTuple):
    """What `load_state_dict` found: keys the module has but the state lacks, keys the state has but the
    module lacks, and keys whose shapes differ (`(key, expected, found)`)."""

    missing: list[str]
    unexpected: list[str]
    mismatched: list[tuple[str, tuple, tuple]]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)


class Module:
    """Base class of layers and models (see the module docs)."""

    training: bool = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *args, **kwargs):
        hooks = self.__dict__.get("_hooks")
        if not hooks:
            return self.forward(*args, **kwargs)
        for hook in list(hooks["pre"].values()):
            replaced = hook(self, args)
            if replaced is not None:
                args = replaced if isinstance(replaced, tuple) else (replaced,)
        output = self.forward(*args, **kwargs)
        for hook in list(hooks["post"].values()):
            replaced = hook(self, args, output)
            if replaced is not None:
                output = replaced
        return output

    # ---- hooks -----------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable[["Module", tuple], Any]) -> "HookHandle":
        """Call `hook(module, args)` before each `forward`; a result that is not None replaces the
        positional arguments (a non-tuple becomes the one argument), as in PyTorch.

        Example:
            >>> handle = layer.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
            >>> handle.remove()
        """
        return self._add_hook("pre", hook)

    def register_forward_hook(self, hook: Callable[["Module", tuple, Any], Any]) -> "HookHandle":
        """Call `hook(module, args, output)` after each `forward`; a result that is not None replaces
        the output, as in PyTorch.

        Example:
            >>> seen = []
            >>> handle = layer.register_forward_hook(lambda m, args, out: seen.append(out.shape))
        """
        return self._add_hook("post", hook)

    def _add_hook(self, kind: str, hook: Callable) -> "HookHandle":
        if not callable(hook):
            raise TypeError(f"a forward hook must be callable, got {type(hook).__name__}")
        hooks = self.__dict__.setdefault("_hooks", {"pre": {}, "post": {}})
        handle = HookHandle(hooks[kind])
        hooks[kind][handle.id] = hook
        return handle

    # ---- walking the structure -------------------------------------------------------------------
    def _attributes(self) -> Iterator[tuple[str, Any]]:
        """(name, value) of the attributes that can be part of the structure (not `_private`, not
        `training`)."""
        for name, value in vars(self).items():
            if not (name.startswith("_") or name == "training"):
                yield name, value

    def _entries(self) -> Iterator[tuple[str, Any]]:
        """(name, value) of every attribute that is part of the structure, flattening containers."""
        for name, value in self._attributes():
            yield from _flatten(name, value)

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        """This module (named `prefix`) and every descendant with dotted names, depth first."""
        return _prefixed(self, prefix)

    def children(self) -> Iterator["Module"]:
        """The direct sub-modules."""
        for _, value in self._entries():
            if isinstance(value, Module):
                yield value

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Param]]:
        """(dotted name, Param) of every parameter, frozen ones included; a shared one appears once.

        Example:
            >>> [n for n, _ in Linear(2, 3).named_parameters()]
            ['weight', 'bias']
        """
        seen: set[int] = set()
        for name, p in self._all_parameters(prefix):
            # A parameter shared by two layers (tied weights) is one parameter: listed, counted and
            # updated once, under its first name (as in PyTorch).
            if id(p) not in seen:
                seen.add(id(p))
                yield name, p

    def _all_parameters(self, prefix: str) -> Iterator[tuple[str, Param]]:
        """Every (name, Param) reachable, a shared one under each of its names (for state dicts)."""
        for name, value in self._entries():
            if isinstance(value, Param):
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value._all_parameters(prefix + name + ".")

    def parameters(self) -> list[Param]:
        """Every parameter, in definition order."""
        return [p for _, p in self.named_parameters()]

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """(dotted name, tensor) of every buffer: tensors that are not parameters, and quantized
        tensors (`QTensor`, frozen quantized weights)."""
        for name, value in self._entries():
            if isinstance(value, Param):
                continue
            if isinstance(value, (Tensor, QTensor)):
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value.named_buffers(prefix + name + ".")

    def num_params(self, trainable_only: bool = False) -> int:
        """The number of parameter elements (only unfrozen ones with `trainable_only`)."""
        return sum(p.numel for p in self.parameters() if not (trainable_only and p.frozen))

    # ---- transforming ----------------------------------------------------------------------------
    def to(self, *args, device=None, dtype=None) -> "Module":
        """Move every parameter and buffer to a device and/or cast the float ones to a float dtype (in
        place); returns self. Takes what PyTorch's `Module.to` takes: `to(device)`, `to(dtype)`,
        `to(device, dtype)`, `to(device=..., dtype=...)`, devices and dtypes as objects or strings
        ("cuda:0", "bf16", "float16"). Integer and bool buffers keep their dtype.

        Example:
            >>> model.to(Device.cpu().autodiff())
            >>> model.to("cpu", ember.bfloat16)
        """
        device, dtype = device_and_dtype("Module.to", args, device, dtype)
        if dtype is not None and not dtype.is_float:
            raise DTypeError(f"Module.to: modules cast only to float dtypes (their integer buffers keep "
                             f"theirs), got {dtype}; cast a tensor with tensor.to({dtype.name!r})")

        def convert(t: Tensor) -> Tensor:
            t = t if device is None else t.to(device)
            return t.cast(dtype) if dtype is not None and t.dtype.is_float else t

        for _, p in self.named_parameters():
            p._bind(convert(p.value))
        self._replace_buffers(convert)
        return self

    def float(self) -> "Module":
        """Float parameters and buffers cast to f32 (PyTorch's `Module.float()`); returns self."""
        return self.to("f32")

    def double(self) -> "Module":
        """Float parameters and buffers cast to f64 (PyTorch's `Module.double()`); returns self."""
        return self.to("f64")

    def half(self) -> "Module":
        """Float parameters and buffers cast to f16 (PyTorch's `Module.half()`); returns self."""
        return self.to("f16")

    def bfloat16(self) -> "Module":
        """Float parameters and buffers cast to bf16 (PyTorch's `Module.bfloat16()`); returns self."""
        return self.to("bf16")

    def apply(self, fn: Callable[["Module"], Any]) -> "Module":
        """Call `fn` on every sub-module, depth first (children before their parent), then on this one;
        returns self (PyTorch's `Module.apply`, e.g. for initialisation).

        Example:
            >>> model.apply(lambda m: m.bias.set(ember.zeros_like(m.bias)) if isinstance(m, Linear) else None)
        """
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def _replace_buffers(self, fn: Callable[[Tensor], Tensor]) -> None:
        for module_name, module in self.named_modules():
            for name, value in list(vars(module).items()):
                if isinstance(value, (Tensor, QTensor)) and not isinstance(value, Param):
                    setattr(module, name, fn(value))
                elif isinstance(value, (list, tuple, dict)):
                    setattr(module, name, _map_container(value, fn))

    def train(self, mode: bool = True) -> "Module":
        """Set training mode (dropout active, batch norm updating statistics) here and below."""
        for _, module in self.named_modules():
            module.training = mode
        return self

    def eval(self) -> "Module":
        """Set evaluation mode here and below."""
        return self.train(False)

    def freeze(self, group: ParamGroup | None = None) -> "Module":
        """Stop training every parameter (or those `group` selects): they get no gradients."""
        return self._set_frozen(True, group)

    def unfreeze(self, group: ParamGroup | None = None) -> "Module":
        """Train every parameter again (or those `group` selects)."""
        return self._set_frozen(False, group)

    def _set_frozen(self, frozen: bool, group: ParamGroup | None) -> "Module":
        for name, p in self.named_parameters():
            if group is None or group.matches(name, p):
                p.frozen = frozen
                p._bind(p.value)
        return self

    def map(self, fn: Callable[[str, Param], Tensor]) -> "Module":
        """Replace each parameter's value by `fn(name, param)` (in place); returns self.

        Example:
            >>> model.map(lambda name, p: p * 0.5)
        """
        for name, p in self.named_parameters():
            p.set(fn(name, p))
        return self

    def visit(self, fn: Callable[[str, Param], None]) -> None:
        """Call `fn(name, param)` for every parameter."""
        for name, p in self.named_parameters():
            fn(name, p)

    def copy(self) -> "Module":
        """An independent module with the same structure and values (values are shared until changed)."""
        return copy.deepcopy(self)

    # ---- state -----------------------------------------------------------------------------------
    def state_dict(self) -> "OrderedDict[str, Tensor]":
        """Every parameter and buffer by dotted name, as plain tensors (a shared parameter under each
        of its names, as in PyTorch).

        Example:
            >>> sorted(Linear(2, 3).state_dict())
            ['bias', 'weight']
        """
        state: OrderedDict[str, Tensor] = OrderedDict()
        for name, p in self._all_parameters(""):
            state[name] = p.value.detach()
        for name, b in self.named_buffers():
            state[name] = b.detach()
        return state

    def load_state_dict(self, state: dict, strict: bool = True) -> LoadReport:
        """Load values by name (each moved to the parameter's device and cast to its dtype).

        Returns a `LoadReport`. With `strict=True` any missing, unexpected or mismatched key raises a
        `ShapeError`/`KeyError` listing all of them and nothing is loaded; with `strict=False` the
        matching keys are loaded and the report says what was not.
        """
        params = dict(self._all_parameters(""))
        buffers = dict(self.named_buffers())
        known = {**params, **buffers}
        missing = [k for k in known if k not in state]
        unexpected = [k for k in state if k not in known]
        mismatched = [(k, known[k].shape, tuple(state[k].shape)) for k in known
                      if k in state and tuple(state[k].shape) != known[k].shape]
        report = LoadReport(missing, unexpected, mismatched)
        if strict and not report.ok:
            problems = []
            if missing:
                problems.append(f"missing keys {missing}")
            if unexpected:
                problems.append(f"unexpected keys {unexpected}")
            if mismatched:
                problems.append("shape mismatches " + ", ".join(
                    f"{k}: expected {e}, found {f}" for k, e, f in mismatched))
            if mismatched:
                raise ShapeError("load_state_dict", "; ".join(problems))
            raise KeyError("load_state_dict: " + "; ".join(problems))
        bad = {k for k, _, _ in mismatched}
        for name, p in params.items():
            if name in state and name not in bad:
                p.set(_as_tensor(state[name], p))
        for name, b in buffers.items():
            if name in state and name not in bad:
                _set_attribute(self, name, _as_tensor(state[name], b))
        return report

    # ---- display ---------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """Settings shown in this module's line of `repr` (override in layers)."""
        return ""

    def __repr__(self) -> str:
        return "\n".join(_repr_lines(self, None, 0))


class HookHandle:
    """What registering a hook returns: `remove()` unregisters it (again is a no-op); as a context
    manager it removes the hook on exit.

    Example:
        >>> with model.register_forward_hook(print_shapes):
        ...     model(x)
    """

    _ids = itertools.count()

    def __init__(self, hooks: dict) -> None:
        self._hooks = hooks
        self.id = next(HookHandle._ids)

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> "HookHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _prefixed(module: Module, name: str) -> Iterator[tuple[str, Module]]:
    yield name, module
    for child_name, value in module._entries():
        if isinstance(value, Module):
            yield from _prefixed(value, f"{name}.{child_name}" if name else child_name)


def _flatten(name: str, value) -> Iterator[tuple[str, Any]]:
    if isinstance(value, (Module, Tensor, QTensor)):
        yield name, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _flatten(f"{name}.{i}", item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(f"{name}.{key}", item)


def _map_container(value, fn):
    """`value` with `fn` applied to its buffers; lists and dicts are updated in place (so references to
    them stay valid), tuples are rebuilt (named tuples keep their type)."""
    if isinstance(value, Tensor) and not isinstance(value, Param):
        return fn(value)
    if isinstance(value, list):
        value[:] = [_map_container(v, fn) for v in value]
    elif isinstance(value, dict):
        for key in value:
            value[key] = _map_container(value[key], fn)
    elif isinstance(value, tuple):
        return _rebuilt(value, [_map_container(v, fn) for v in value])
    return value


def _rebuilt(value: tuple, items: list) -> tuple:
    return type(value)(*items) if hasattr(value, "_fields") else tuple(items)


def _as_tensor(value, like: Tensor | QTensor) -> Tensor | QTensor:
    from ..api.creation import from_numpy
    import numpy as np
    if isinstance(like, QTensor):  # a quantized buffer takes a quantized value, or quantizes a float one
        if not isinstance(value, QTensor):
            value = value if isinstance(value, Tensor) else from_numpy(np.asarray(value), like.device.inner)
            value = quantize(value, like.scheme)
        return value.to(like.device)
    if isinstance(value, QTensor):  # a quantized file loads into a float model dequantized
        value = value.dequantize()
    if not isinstance(value, Tensor):
        value = from_numpy(np.asarray(value), like.device.inner)
    # A loaded value is data: a tensor with gradient history must not carry it into a buffer.
    return value.to(like.device).cast(like.dtype).detach()


def _set_attribute(root: Module, dotted: str, value: Tensor) -> None:
    """Rebind the buffer at a dotted path (through modules, lists, tuples and dicts)."""
    _replace_at(root, dotted.split("."), value)


def _replace_at(container, parts: list[str], value):
    """`container` with the item at the path `parts` replaced by `value`; modules, lists and dicts are
    changed in place, a tuple on the path is rebuilt and stored back in its parent."""
    head, rest = parts[0], parts[1:]
    if isinstance(container, (list, tuple)):
        key: Any = int(head)
        child = container[key]
    elif isinstance(container, dict):
        key = next(k for k in container if str(k) == head)  # names hold str(key), keys may be ints
        child = container[key]
    else:
        key = head
        child = getattr(container, head)
    new_child = _replace_at(child, rest, value) if rest else value
    if isinstance(container, tuple):
        return _rebuilt(container, [new_child if i == key else v for i, v in enumerate(container)])
    if isinstance(container, (list, dict)):
        container[key] = new_child
    else:
        setattr(container, key, new_child)
    return container


def _repr_lines(module: Module, name: str | None, depth: int) -> list[str]:
    pad = "  " * depth
    label = f"({name}): " if name is not None else ""
    extra = module.extra_repr()
    count = f"params={module.num_params():,}"
    lines = [f"{pad}{label}{type(module).__name__}({extra + ', ' if extra else ''}{count})"]
    for child_name, value in module._entries():
        if isinstance(value, Module):
            lines.extend(_repr_lines(value, child_name, depth + 1))
    return lines
