"""`Builder`: the ONNX graph under construction (nodes, initializers, names) and its size computations.

Sizes that follow a dynamic axis are emitted as computations on the input's shape
(`Shape`/`Gather`, then `Add`/`Sub`/`Mul`/`Div`/`Mod` as the formula says, `Concat` for a shape),
each formula computed once; static sizes are int64 initializers.

Example:
    >>> b = Builder(onnx, 17, ["x"])
    >>> b.ints((SymInt(2, ("dim", 0, 0)), 3))   # Concat(Gather(Shape(x), [0]), [3])
    'shape_2'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backend.capture import SymInt, expr_of, is_symbolic
from ...dtype import DType
from ...errors import ExportError

_TYPES = {"f32": "FLOAT", "f64": "DOUBLE", "f16": "FLOAT16", "bf16": "BFLOAT16", "i8": "INT8", "i16": "INT16",
          "i32": "INT32", "i64": "INT64", "u8": "UINT8", "u16": "UINT16", "u32": "UINT32", "u64": "UINT64",
          "bool": "BOOL"}
_SIZE_OPS = {"add": "Add", "sub": "Sub", "mul": "Mul", "floordiv": "Div", "mod": "Mod"}


class Builder:
    """Nodes and initializers of one graph; `opset` is the default domain's version."""

    def __init__(self, onnx: Any, opset: int, inputs: list[str]) -> None:
        self.onnx, self.opset, self.inputs = onnx, opset, inputs
        self.nodes: list = []
        self.initializers: list = []
        self._count = 0
        self._sizes: dict[Any, str] = {}
        self._shapes: dict[int, str] = {}

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def type_of(self, dtype: DType) -> int:
        try:
            return getattr(self.onnx.TensorProto, _TYPES[dtype.name])
        except KeyError:
            raise ExportError(f"export: dtype {dtype} has no ONNX tensor type") from None

    def node(self, op: str, inputs: list[str], out: str | None = None, outputs: int = 1, **attrs) -> Any:
        """Add a node; returns its output name (a list of `outputs` names when more than one)."""
        names = [out or self.fresh(op.lower())] + [self.fresh(op.lower()) for _ in range(outputs - 1)]
        self.nodes.append(self.onnx.helper.make_node(op, inputs, names, name=self.fresh("n_" + op), **attrs))
        return names if outputs > 1 else names[0]

    def const(self, array: np.ndarray, name: str | None = None) -> str:
        """An initializer holding `array`."""
        name = name or self.fresh("const")
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(array), name))
        return name

    def scalar(self, value, dtype: DType) -> str:
        """A 0-d initializer of `dtype`."""
        return self.const(np.asarray(value, dtype=dtype.np))

    def size(self, size) -> str:
        """A 1-element int64 tensor holding `size` (an int, a `SymInt` or a size formula), each formula
        computed once."""
        expr = expr_of(size) if isinstance(size, int) else size
        found = self._sizes.get(expr)
        if found is not None:
            return found
        if isinstance(expr, int):
            found = self.const(np.array([expr], np.int64))
        elif expr[0] == "dim":
            found = self.node("Gather", [self._shape(expr[1]), self.const(np.array([expr[2]], np.int64))], axis=0)
        else:
            found = self.node(_SIZE_OPS[expr[0]], [self.size(expr[1]), self.size(expr[2])])
        self._sizes[expr] = found
        return found

    def ints(self, values) -> str:
        """A 1-D int64 tensor of `values` (sizes, starts, pads): computed where any is symbolic."""
        values = tuple(values)
        if not is_symbolic(values):
            return self.const(np.array([int(v) for v in values], np.int64).reshape(len(values)))
        return self.node("Concat", [self.size(v) for v in values], self.fresh("shape"), axis=0)

    def scalar_size(self, size: int) -> str:
        """`size` as a 0-d int64 tensor."""
        if not isinstance(size, SymInt):
            return self.const(np.array(int(size), np.int64))
        return self.node("Squeeze", [self.size(size), self.const(np.array([0], np.int64))])

    def axes(self, node_inputs: list[str], axes, attrs: dict, since: int) -> None:
        """Give reduction `axes` as an input (opset >= `since`) or an attribute (before)."""
        if self.opset >= since:
            node_inputs.append(self.const(np.array(list(axes), np.int64)))
        else:
            attrs["axes"] = list(axes)

    def _shape(self, input_index: int) -> str:
        found = self._shapes.get(input_index)
        if found is None:
            found = self._shapes[input_index] = self.node("Shape", [self.inputs[input_index]])
        return found
