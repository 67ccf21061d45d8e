"""ONNX files to and from ember: `load` runs a graph as an ember Module, `export` writes a module.

`ember.onnx.load(path_or_bytes, device=None)` is a Module running the graph with ember's ops on any
device; it fuses and differentiates (float initializers are Params, so it can be fine-tuned). Dynamic
dimensions take any size; opsets 7 to the newest the `onnx` package knows, If/Loop/Scan, sequences
and optionals; ops ONNX defines as functions run their bodies. An op, attribute or dtype ember cannot
run raises `UnsupportedOnnxError` naming the op, the opset, the node and what is missing. Matmuls of
constant quantized weights (Q/DQ, MatMulInteger, QLinearMatMul, MatMulNBits) run `ember.quant`'s
kernels, the weights held as layers in `model.quantized` (docs/onnx.md, "Quantized graphs").
`ember.onnx.export(module, example_inputs, path, dynamic_axes=None, opset=None)` traces a forward
pass on a capture device and writes a file onnxruntime runs (docs/onnx.md). Both need the `onnx`
extra (`pip install 'ember[onnx]'`).

Example:
    >>> model = ember.onnx.load("model.onnx", device=ember.Device.cpu())
    >>> (y,) = model(x)
"""

from .errors import OnnxError, UnsupportedOnnxError
from .model import OnnxModel, load

__all__ = ["load", "export", "OnnxModel", "OnnxError", "UnsupportedOnnxError"]


def __getattr__(name: str):
    if name == "export":  # lazy: the exporter loads the capture backend, which import needs not
        from .export import export
        globals()["export"] = export  # the function, not the submodule the import put under this name
        return export
    raise AttributeError(f"module 'ember.onnx' has no attribute {name!r}")
