"""The errors of ONNX import: a model ember cannot run, and the missing `onnx` extra.

`UnsupportedOnnxError` names the op (with its domain), the opset the model imports, the node's name and
what would be needed to run it, so a user can tell a missing op from a missing attribute or dtype.

Example:
    >>> raise UnsupportedOnnxError("Resize", 19, "resize_1", "mode 'cubic' with antialias=1")
"""

from __future__ import annotations

from ..errors import EmberError


class OnnxError(EmberError, ValueError):
    """An ONNX model that is malformed or cannot be loaded (a missing external-data file, bad inputs)."""


class UnsupportedOnnxError(OnnxError, NotImplementedError):
    """An op, attribute or dtype of an ONNX model that ember's importer does not support."""

    def __init__(self, op_type: str, opset: int | None, node: str, needed: str) -> None:
        self.op_type, self.opset, self.node, self.needed = op_type, opset, node, needed
        super().__init__(f"ONNX op {op_type} (opset {opset}) at node {node or '<unnamed>'!r} is not "
                         f"supported: {needed}")


INSTALL = "pip install 'ember[onnx]'"


def require_onnx():
    """The `onnx` package, imported on first use (an optional extra)."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError(f"ember.onnx needs the onnx package: {INSTALL}") from e
    return onnx
