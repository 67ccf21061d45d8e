"""`Gradients`: what `backward()` returns, Burn-style.

Gradients are tensors on the inner (non-autodiff) device, looked up by the tensor they belong to. After
`backward(create_graph=True)` they are tensors of the autodiff device with their own history, so they
can be differentiated again (docs/autodiff.md).

Example:
    >>> x = ember.tensor([1.0, 2.0], device=Device.cpu().autodiff()).require_grad()
    >>> grads = (x * x).sum().backward()
    >>> x.grad(grads).tolist()
    [2.0, 4.0]
"""

from __future__ import annotations

from typing import Iterator


class Gradients:
    """A map from tracked leaf tensors to their gradients."""

    __slots__ = ("_by_node",)

    def __init__(self, by_node: dict) -> None:
        self._by_node = by_node

    @staticmethod
    def _node(tensor):
        node = getattr(tensor._handle, "node", None)
        if node is None:
            raise ValueError("this tensor is not tracked by autodiff: call require_grad() on an "
                             "autodiff device before the forward pass")
        return node

    @classmethod
    def from_pairs(cls, pairs) -> "Gradients":
        """Gradients holding `grad` for each `(tracked tensor, grad)` pair (e.g. accumulated ones)."""
        return cls({cls._node(t): g for t, g in pairs})

    def get(self, tensor):
        """The gradient of `tensor`, or None when the backward pass did not reach it."""
        return self._by_node.get(self._node(tensor))

    def set(self, tensor, grad) -> None:
        """Replace the gradient of `tensor` (clipping, accumulation, custom rules)."""
        self._by_node[self._node(tensor)] = grad

    def remove(self, tensor):
        """Take the gradient of `tensor` out of this map and return it (None if absent)."""
        return self._by_node.pop(self._node(tensor), None)

    def __contains__(self, tensor) -> bool:
        return self._node(tensor) in self._by_node

    def __len__(self) -> int:
        return len(self._by_node)

    def __iter__(self) -> Iterator:
        return iter(self._by_node.values())

    def __repr__(self) -> str:
        return f"Gradients({len(self)} tensors)"
