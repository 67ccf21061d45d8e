"""The op table: one small function per ONNX op type, and `Call`, what a function is given.

An op function is `fn(call, *inputs)`: `inputs` are the node's inputs (ember Tensors, lists of them
for sequences, None for an omitted optional input); it returns one value, or a tuple for several
outputs. `call` gives the node's attributes, the opset, the device and host reads of shape inputs.

Example:
    >>> @op("Relu")
    ... def relu(call, x):
    ...     return F.relu(x)
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn

import numpy as np

from ...tensor import Tensor
from ..errors import UnsupportedOnnxError

OPS: dict[tuple[str, str], Callable] = {}
FAMILY: dict[str, str] = {}


def op(*op_types: str, domain: str = "") -> Callable:
    """Register `fn` as the function of `op_types` (in `domain`, "" being ai.onnx)."""
    def register(fn: Callable) -> Callable:
        family = fn.__module__.rsplit(".", 1)[-1]
        for op_type in op_types:
            OPS[(domain, op_type)] = fn
            FAMILY[op_type] = family
        return fn
    return register


class Call:
    """One execution of a node: its attributes, opset, device, and the scope its subgraphs see."""

    __slots__ = ("node", "device", "env")

    def __init__(self, node, device, env) -> None:
        self.node, self.device, self.env = node, device, env

    @property
    def opset(self) -> int:
        return self.node.opset

    @property
    def noutputs(self) -> int:
        """The number of outputs the node names (trailing omitted ones not counted)."""
        return len(self.node.outputs)

    def wants(self, i: int) -> bool:
        """Whether output `i` is named (so computed)."""
        return i < len(self.node.outputs) and self.node.outputs[i] != ""

    def out_type(self, i: int = 0) -> int | None:
        """The ONNX element type of output `i` where shape inference knows it (else None)."""
        types = self.node.out_types
        return types[i] if i < len(types) else None

    def attr(self, name: str, default: Any = None) -> Any:
        return self.node.attrs.get(name, default)

    def has(self, name: str) -> bool:
        return name in self.node.attrs

    def const(self, value, dtype=None) -> Tensor:
        """`value` (array or number) as a tensor on the device."""
        from ...api.creation import tensor
        return tensor(np.asarray(value), dtype=dtype, device=self.device)

    @staticmethod
    def host(t) -> np.ndarray:
        """A (small) tensor's values on the host: shape inputs, indices of data-dependent ops."""
        return t.numpy() if isinstance(t, Tensor) else np.asarray(t)

    def ints(self, t) -> list[int]:
        return [int(v) for v in self.host(t).reshape(-1)]

    def unsupported(self, needed: str) -> NoReturn:
        n = self.node
        raise UnsupportedOnnxError(n.op_type if not n.domain else f"{n.domain}.{n.op_type}", n.opset, n.name, needed)

    def graph(self, name: str) -> Callable[..., list]:
        """The subgraph attribute `name` as a function of its inputs, seeing this node's scope."""
        g = self.node.attrs[name]
        return lambda *inputs: g.run(inputs, self.device, self.env)
