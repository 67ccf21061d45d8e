"""Containers with PyTorch's names and behaviour: `Sequential`, `ModuleList`, `ModuleDict`,
`ParameterList`, `ParameterDict`.

Each is a plain `Module` whose items are its attributes, named "0", "1", ... (lists) or by their keys
(dicts and a `Sequential` built from an `OrderedDict`), so the structure walk, `state_dict` and
`load_state_dict` see them with no special case and name them as PyTorch does: `"0.weight"`,
`"layers.1.bias"`. A plain Python list or dict of modules in an attribute is named the same way; these
classes add the container API (indexing, slicing, `append`, `items()`, ...) and `Sequential.forward`.

Keys are strings that are not empty, hold no ".", do not start with "_" and are not the name of an
attribute of the class (`"forward"`, `"items"`, `"training"`): PyTorch refuses those too.

Example:
    >>> model = Sequential(Linear(4, 8), ReLU(), Linear(8, 2))
    >>> list(model.state_dict())
    ['0.weight', '0.bias', '2.weight', '2.bias']
    >>> model[0].out_features, len(model[1:])
    (8, 2)
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from ..tensor import Tensor
from .module import Module
from .param import Param


class _Items(Module):
    """What the containers share: items kept as attributes, in order, checked by `_item`."""

    def _item(self, value: Any) -> Any:
        """`value` as an item of this container, or a TypeError naming what it holds."""
        if isinstance(value, Module):
            return value
        raise TypeError(f"{type(self).__name__} holds Modules, got {type(value).__name__}")

    def _keys(self) -> list[str]:
        return [name for name, _ in self._attributes()]

    def _put(self, key: str, value: Any) -> None:
        if not isinstance(key, str) or not key or "." in key or key.startswith("_") or hasattr(type(self), key):
            raise KeyError(f"{type(self).__name__}: {key!r} cannot name an item (a key is a non-empty string "
                           f"without '.', not starting with '_' and not an attribute of the class)")
        setattr(self, key, self._item(value))

    def _reset(self, pairs: Iterable[tuple[str, Any]]) -> None:
        """Replace every item by `pairs`, in their order."""
        pairs = list(pairs)
        for key in self._keys():
            delattr(self, key)
        for key, value in pairs:
            self._put(key, value)

    def __len__(self) -> int:
        return len(self._keys())

    def extra_repr(self) -> str:
        return f"len={len(self)}"


class _Indexed(_Items):
    """A container indexed by position (`Sequential`, `ModuleList`, `ParameterList`)."""

    def __init__(self, items: Iterable = ()) -> None:
        self.extend(items)

    def _key(self, index: int) -> str:
        keys = self._keys()
        if not isinstance(index, int):
            raise TypeError(f"{type(self).__name__} indices are ints or slices, got {type(index).__name__}")
        if not -len(keys) <= index < len(keys):
            raise IndexError(f"index {index} is out of range for a {type(self).__name__} of {len(keys)}")
        return keys[index]

    def _slice(self, index: slice) -> "_Indexed":
        return type(self)(list(self)[index])

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._slice(index)
        return getattr(self, self._key(index))

    def __setitem__(self, index: int, value: Any) -> None:
        setattr(self, self._key(index), self._item(value))

    def __delitem__(self, index) -> None:
        """Remove an item (or a slice of them); the rest are renumbered "0", "1", ... as in PyTorch."""
        items = list(self)
        if isinstance(index, slice):
            del items[index]
        else:
            del items[self._keys().index(self._key(index))]
        self._reset((str(i), v) for i, v in enumerate(items))

    def __iter__(self) -> Iterator:
        return iter([value for _, value in self._attributes()])

    def append(self, value: Any) -> "_Indexed":
        """Add `value` at the end, named by its position; returns self."""
        self._put(str(len(self)), value)
        return self

    def extend(self, values: Iterable) -> "_Indexed":
        """Append each of `values`; returns self."""
        for value in values:
            self.append(value)
        return self

    def insert(self, index: int, value: Any) -> None:
        """Put `value` before position `index`; the items are renumbered."""
        items = list(self)
        items.insert(index, value)
        self._reset((str(i), v) for i, v in enumerate(items))

    def __iadd__(self, values: Iterable) -> "_Indexed":
        return self.extend(values)


class Sequential(_Indexed):
    """Modules called in order, each on the previous one's output (PyTorch's `nn.Sequential`).

    Built from modules (named "0", "1", ...) or from one `OrderedDict`/dict of them (named by its keys,
    reachable as attributes, `seq.conv`). Indexing is by position in both cases; a slice is a
    `Sequential` of the same items under the same names.

    Example:
        >>> from collections import OrderedDict
        >>> net = Sequential(OrderedDict(fc=Linear(3, 4), act=Tanh()))
        >>> net.fc is net[0], list(net.state_dict())
        (True, ['fc.weight', 'fc.bias'])
    """

    def __init__(self, *modules: Module) -> None:
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            for key, module in modules[0].items():
                self._put(key, module)
        else:
            self.extend(modules)

    def _slice(self, index: slice) -> "Sequential":
        keys, values = self._keys(), list(self)
        return Sequential(dict(zip(keys[index], values[index])))

    def forward(self, x):
        for module in self:
            x = module(x)
        return x


class ModuleList(_Indexed):
    """A list of modules, named "0", "1", ... (PyTorch's `nn.ModuleList`); it has no forward.

    Example:
        >>> blocks = ModuleList([Linear(4, 4) for _ in range(3)])
        >>> blocks.append(Linear(4, 2))[3].out_features
        2
    """


class ParameterList(_Indexed):
    """A list of parameters, named "0", "1", ... (PyTorch's `nn.ParameterList`); a tensor given is
    wrapped in a `Param`.

    Example:
        >>> scales = ParameterList([ember.ones(3), ember.zeros(2)])
        >>> [name for name, _ in scales.named_parameters()]
        ['0', '1']
    """

    def _item(self, value: Any) -> Param:
        return _param(self, value)


class _Keyed(_Items):
    """A container indexed by string keys (`ModuleDict`, `ParameterDict`), in insertion order."""

    def __init__(self, items: Mapping | Iterable[tuple[str, Any]] = ()) -> None:
        self.update(items)

    def __getitem__(self, key: str):
        if key not in self:
            raise KeyError(f"{type(self).__name__} has no key {key!r}; keys: {self._keys()}")
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._put(key, value)

    def __delitem__(self, key: str) -> None:
        self[key]  # a clear KeyError for a missing key
        delattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def keys(self) -> list[str]:
        return self._keys()

    def values(self) -> list:
        return [value for _, value in self._attributes()]

    def items(self) -> list[tuple[str, Any]]:
        return list(self._attributes())

    def update(self, items: Mapping | Iterable[tuple[str, Any]]) -> None:
        """Add or replace items from a mapping or (key, value) pairs."""
        for key, value in (items.items() if isinstance(items, Mapping) else items):
            self._put(key, value)

    def pop(self, key: str):
        """Remove the item at `key` and return it."""
        value = self[key]
        delattr(self, key)
        return value

    def clear(self) -> None:
        self._reset(())


class ModuleDict(_Keyed):
    """Modules by string key (PyTorch's `nn.ModuleDict`); state-dict names are `"<key>.<param>"`.

    Example:
        >>> heads = ModuleDict({"cls": Linear(8, 10), "box": Linear(8, 4)})
        >>> list(heads.state_dict())[:2]
        ['cls.weight', 'cls.bias']
    """


class ParameterDict(_Keyed):
    """Parameters by string key (PyTorch's `nn.ParameterDict`); a tensor given is wrapped in a `Param`.

    Example:
        >>> gains = ParameterDict({"a": ember.ones(2)})
        >>> list(gains.state_dict())
        ['a']
    """

    def _item(self, value: Any) -> Param:
        return _param(self, value)


def _param(container: Module, value: Any) -> Param:
    if isinstance(value, Param):
        return value
    if isinstance(value, Tensor):
        return Param(value)
    raise TypeError(f"{type(container).__name__} holds Params (or tensors to wrap), got {type(value).__name__}")
