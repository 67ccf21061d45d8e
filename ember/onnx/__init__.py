"""`ember.onnx`: ONNX files to and from ember (`export` here; needs `pip install 'ember[onnx]'`)."""

from __future__ import annotations


def __getattr__(name: str):
    if name == "export":  # lazy: the exporter loads the nn layer, which `import ember` does not need here
        from .export import export
        globals()["export"] = export  # the function, not the submodule the import put under this name
        return export
    raise AttributeError(f"module 'ember.onnx' has no attribute {name!r}")
