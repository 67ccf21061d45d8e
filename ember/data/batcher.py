"""Batchers: turn a list of dataset items into one batch.

A batcher is any picklable callable `items -> batch` producing NumPy data; the `DataLoader` runs it
in worker processes, then moves the batch to a device in the main process with `to_device`.

Example:
    >>> import numpy as np
    >>> b = default_batcher([(np.zeros(2), 1), (np.ones(2), 0)])
    >>> b[0].shape, b[1].tolist()
    ((2, 2), [1, 0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ember.errors import ShapeError


class Batcher(Protocol):
    """Turns a list of items into a batch of NumPy data; must be picklable to run in workers.

    Example:
        >>> class Firsts:
        ...     def __call__(self, items: list) -> list:
        ...         return [item[0] for item in items]
    """

    def __call__(self, items: list[Any]) -> Any: ...


def default_batcher(items: Sequence[Any], device: Any = None) -> Any:
    """Stack items into NumPy arrays, keeping their structure; with `device`, make ember tensors.

    Arrays and NumPy scalars are stacked along a new first dim. Python bools become a `bool`
    array, ints an `int64` array, and numbers with any float a `float32` array (ember's default
    float). Tuples, named tuples, lists and dicts are batched field by field and keep their type;
    strings and other objects are gathered into a list.

    Example:
        >>> import numpy as np
        >>> batch = default_batcher([{"x": np.ones(3), "y": 1.5}, {"x": np.zeros(3), "y": 0.5}])
        >>> batch["x"].shape, batch["y"].dtype
        ((2, 3), dtype('float32'))
    """
    if len(items) == 0:
        raise ValueError("cannot batch an empty list of items")
    batch = _stack(list(items), path="item")
    return batch if device is None else to_device(batch, device)


def to_device(batch: Any, device: Any) -> Any:
    """The batch with every NumPy array replaced by `ember.from_numpy(array, device=device)`.

    Example:
        >>> import numpy as np, ember
        >>> to_device({"x": np.ones(2)}, ember.Device.numpy())  # doctest: +SKIP
        {'x': Tensor(...)}
    """
    if isinstance(batch, np.ndarray):
        import ember  # the tensor layer imports heavier modules; keep `ember.data` light

        return ember.from_numpy(batch, device=device)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(b, device) for b in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch


def _stack(items: list[Any], path: str) -> Any:
    first = items[0]
    for item in items[1:]:
        if _kind(item) != _kind(first):
            raise TypeError(f"cannot batch {path}: items mix {type(first).__name__} and {type(item).__name__}")
    if isinstance(first, (np.ndarray, np.generic)):
        shapes = {np.shape(item) for item in items}
        if len(shapes) > 1:
            raise ShapeError("batch", f"{path} has arrays of different shapes {sorted(shapes)}; "
                                      "pad or crop them to one shape, or pass a custom batcher")
        return np.stack(items)
    if isinstance(first, bool):
        return np.asarray(items, dtype=np.bool_)
    if isinstance(first, (int, float)):
        all_ints = all(isinstance(item, int) for item in items)
        return np.asarray(items, dtype=np.int64 if all_ints else np.float32)
    if isinstance(first, Mapping):
        keys = list(first)
        for item in items[1:]:
            if set(item) != set(keys):
                raise ValueError(f"cannot batch {path}: dicts with keys {sorted(keys)} and {sorted(item)}")
        return {k: _stack([item[k] for item in items], f"{path}[{k!r}]") for k in keys}
    if isinstance(first, (tuple, list)):
        lengths = {len(item) for item in items}
        if len(lengths) > 1:
            raise ValueError(f"cannot batch {path}: sequences of different lengths {sorted(lengths)}")
        fields = [_stack([item[k] for item in items], f"{path}[{k}]") for k in range(len(first))]
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(*fields)
        return type(first)(fields)
    return items


def _kind(item: Any) -> type:
    """The category two items must share to be batched together."""
    if isinstance(item, np.generic):
        return np.ndarray
    if isinstance(item, float):
        return int  # ints and floats batch together, as float32
    for kind in (np.ndarray, bool, int, Mapping, tuple, list):
        if isinstance(item, kind):
            return kind
    return object
