"""ONNX import: `ember.onnx.load(path_or_bytes, device=None)` is an ember Module running the graph.

The model runs with ember's ops on any device, fuses, and differentiates: its float initializers are
Params, so it can be fine-tuned. Dynamic dimensions take any size; opsets 7 to the newest the `onnx`
package knows, If/Loop/Scan, sequences and optionals; ops ONNX defines as functions run their
bodies. An op, attribute or dtype ember cannot run raises `UnsupportedOnnxError` naming the op, the
opset, the node and what is missing. Needs the `onnx` extra (`pip install 'ember[onnx]'`).

Example:
    >>> model = ember.onnx.load("model.onnx", device=ember.Device.cpu())
    >>> (y,) = model(x)
"""

from .errors import OnnxError, UnsupportedOnnxError
from .model import OnnxModel, load

__all__ = ["load", "OnnxModel", "OnnxError", "UnsupportedOnnxError"]
