"""Quantized ONNX graphs on ember.quant's kernels, against onnxruntime on every suite device.

Models are quantized the way users do it, by onnxruntime's own tools (`quantize_dynamic`,
`quantize_static` in the QDQ and QOperator formats, per channel or not, `MatMulNBitsQuantizer`), from
an MLP and a transformer encoder layer exported by torch at odd sizes; hand-made graphs cover each
quantized matmul op's zero points, scales and layouts. The layers the import made (`QuantLinear`,
`IntegerLinear`) and the primitives a run records (`quant_matmul`, `int_matmul`) show the quantized
kernels are the ones that run. The oracle is onnxruntime running the graph as written (graph
optimizations off); its default session fuses Q/DQ pairs into integer kernels that round once less,
which moves static models' outputs by a few output quanta (checked too).
"""

from __future__ import annotations

import collections
import functools
import io
import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import ember
from ember import nn, quant
from ember.backend.capture import Capture
from ember.backend.numpy import NumpyBackend
from ember.onnx import UnsupportedOnnxError, load
from ember.onnx.exporter.trace import CaptureDevice
from ember.onnx.qweights import IntegerLinear
from ember.quant import QuantLinear

qtools = pytest.importorskip("onnxruntime.quantization")


def _session(data: bytes, optimized: bool = False, **config) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for key, value in config.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


class _MLP(torch.nn.Module):
    def __init__(self, sizes=(13, 11, 5)):
        super().__init__()
        self.a, self.b = torch.nn.Linear(sizes[0], sizes[1]), torch.nn.Linear(sizes[1], sizes[2])

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class _Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(12, 5)

    def forward(self, x):
        return self.head(self.layer(x))


# name -> (module, example input shape, batch sizes run, weight layers)
_FLOAT = {"mlp2": (lambda: _MLP(), (3, 13), (3, 1), 2), "mlp3": (lambda: _MLP(), (2, 3, 13), (2, 1), 2),
          "encoder": (lambda: _Encoder(), (2, 5, 12), (2, 1), 5)}


@functools.cache
def _float_model(name: str) -> bytes:
    torch.manual_seed(0)
    make, shape, _, _ = _FLOAT[name]
    f = io.BytesIO()
    torch.onnx.export(make().eval(), (torch.randn(*shape),), f, dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17)
    return f.getvalue()


class _Batches(qtools.CalibrationDataReader):
    def __init__(self, shape):
        rng = np.random.default_rng(7)
        self.batches = iter([{"x": rng.standard_normal(shape, dtype=np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


def _quantize(name: str, recipe: str, per_channel: bool, tmp) -> bytes:
    src, dst = tmp / f"{name}.onnx", tmp / f"{name}-{recipe}-{per_channel}.onnx"
    src.write_bytes(_float_model(name))
    logging.disable(logging.WARNING)  # onnxruntime's advice to pre-process the model first
    try:
        if recipe == "dynamic":
            qtools.quantize_dynamic(src, dst, per_channel=per_channel)
        elif recipe == "dynamic-uint8":
            qtools.quantize_dynamic(src, dst, per_channel=per_channel, weight_type=qtools.QuantType.QUInt8)
        else:
            fmt = qtools.QuantFormat.QDQ if recipe == "QDQ" else qtools.QuantFormat.QOperator
            ops = ["MatMul", "Gemm", "Add"] if recipe == "QOperator" and name == "encoder" else None
            qtools.quantize_static(src, dst, _Batches(_FLOAT[name][1]), quant_format=fmt, per_channel=per_channel,
                                   op_types_to_quantize=ops)
    finally:
        logging.disable(logging.NOTSET)
    return dst.read_bytes()


def _quantized_models(tmp) -> list[tuple[str, str, bytes]]:
    out = []
    for name in _FLOAT:
        for recipe in ("dynamic", "QDQ", "QOperator") + (("dynamic-uint8",) if name == "mlp3" else ()):
            for per_channel in (False, True):
                out.append((name, f"{recipe} per_channel={per_channel}", _quantize(name, recipe, per_channel, tmp)))
    return out


@pytest.fixture(scope="module")
def quantized_models(tmp_path_factory):
    return _quantized_models(tmp_path_factory.mktemp("quantized"))


def _kernel_prims(model_bytes: bytes, x: np.ndarray) -> collections.Counter:
    """The matmul primitives one run of the imported model records on a capture device."""
    capture = Capture(NumpyBackend())
    load(model_bytes, device=CaptureDevice(capture))(x)
    return collections.Counter(r.prim for r in capture.records if r.prim.endswith("matmul"))


def test_onnxruntime_quantized_models(quantized_models, device):
    rng = np.random.default_rng(3)
    for name, recipe, data in quantized_models:
        _, shape, batches, layers = _FLOAT[name]
        model = load(data, device=device)
        kind = IntegerLinear if recipe.startswith(("dynamic", "QOperator")) else QuantLinear
        assert len(model.quantized) == layers and all(type(m) is kind for m in model.quantized.values()), (name, recipe)
        assert not any(v.ndim == 2 and not v.dtype.is_float for v in model.initializers.values()), (name, recipe)
        for batch in batches:
            x = rng.standard_normal((batch,) + shape[1:], dtype=np.float32)
            got = model(x)[0].numpy()
            want = _session(data).run(None, {"x": x})[0]
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=f"{name} {recipe}")
            fused = _session(data, optimized=True).run(None, {"x": x})[0]
            quantum = float(numpy_helper.to_array(next(t for t in onnx.load_from_string(data).graph.initializer
                                                       if t.name == "y_scale"))) if "dynamic" not in recipe else 1e-5
            assert np.abs(got - fused).max() <= 3 * quantum, (name, recipe, np.abs(got - fused).max(), quantum)


def test_the_quantized_kernels_are_the_ones_that_run(quantized_models):
    for name, recipe, data in quantized_models:
        _, shape, _, layers = _FLOAT[name]
        prims = _kernel_prims(data, np.ones(shape, np.float32))
        kernel = "int_matmul" if recipe.startswith(("dynamic", "QOperator")) else "quant_matmul"
        attention = 2 if name == "encoder" else 0  # q @ k.T and p @ v: products of activations
        assert prims == {kernel: layers, "matmul": attention} if attention else {kernel: layers}, (name, recipe, prims)


def _nbits_models(tmp) -> list[tuple[str, bytes]]:
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits
    torch.manual_seed(1)
    f = io.BytesIO()
    torch.onnx.export(_MLP((37, 19, 5)).eval(), (torch.randn(2, 3, 37),), f, dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}}, opset_version=17)
    out = []
    for bits, symmetric, block, fmt in ((4, False, 16, "QOperator"), (4, True, 32, "QOperator"),
                                        (8, False, 16, "QOperator"), (2, True, 16, "QOperator"),
                                        (4, False, 16, "QDQ"), (4, True, 16, "QDQ")):
        config = nbits.DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric, bits=bits,
                                                    quant_format=getattr(qtools.QuantFormat, fmt))
        logging.disable(logging.INFO)
        try:
            quantizer = nbits.MatMulNBitsQuantizer(onnx.load_from_string(f.getvalue()), algo_config=config)
            quantizer.process()
        finally:
            logging.disable(logging.NOTSET)
        path = tmp / f"nbits-{bits}-{symmetric}-{block}-{fmt}.onnx"
        quantizer.model.save_model_to_file(str(path))
        out.append((f"{fmt} bits={bits} symmetric={symmetric} block={block}", path.read_bytes()))
    return out


def test_matmul_nbits_and_blocked_int4_weights(device, tmp_path):
    pytest.importorskip("onnx_ir", reason="onnxruntime's MatMulNBitsQuantizer needs onnx_ir")
    rng = np.random.default_rng(4)
    for what, data in _nbits_models(tmp_path):
        model = load(data, device=device)
        schemes = {m.weight.scheme for m in model.quantized.values()}
        assert len(model.quantized) == 2 and all(type(m) is QuantLinear for m in model.quantized.values()), what
        bits = int(what.split("bits=")[1].split()[0])
        assert all(s.bits == bits and s.level == "block" for s in schemes), (what, schemes)
        x = rng.standard_normal((4, 3, 37), dtype=np.float32)  # another batch size
        # onnxruntime turns DequantizeLinear + MatMul into MatMulNBits, by default on int8 activations
        want = _session(data, optimized=True, **{"session.qdq_matmulnbits_accuracy_level": "0"}).run(None, {"x": x})[0]
        np.testing.assert_allclose(model(x)[0].numpy(), want, atol=1e-5, rtol=1e-5, err_msg=what)


# ---- hand-made graphs: every quantized matmul op with constant weights --------------------------------

def _graph(nodes, inputs, inits, out=TensorProto.FLOAT, opset=21, ms=False):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
                              [helper.make_tensor_value_info("y", out, None)],
                              [numpy_helper.from_array(a, n) if not isinstance(a, onnx.TensorProto) else a
                               for n, a in inits.items()])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _integer_cases(rng, k=13, n=7):
    """(name, node, initializers, feeds, graph inputs, output type, com.microsoft or not)."""
    cases = []
    for a_t, b_t, b_zero in ((np.uint8, np.int8, None), (np.uint8, np.uint8, "column"), (np.int8, np.int8, "column"),
                             (np.int8, np.uint8, "tensor")):
        a, b = _ints(rng, a_t, (2, 3, k)), _ints(rng, b_t, (k, n))
        inits = {"b": b, "a_zp": _ints(rng, a_t, ())}
        if b_zero:
            inits["b_zp"] = _ints(rng, b_t, (n,) if b_zero == "column" else ())
        names = ["a", "b", "a_zp"] + (["b_zp"] if b_zero else [])
        node = helper.make_node("MatMulInteger", names, ["y"])
        cases.append((f"MatMulInteger {a_t.__name__} x {b_t.__name__} zp={b_zero}", node, inits, {"a": a},
                      [("a", helper.np_dtype_to_tensor_dtype(np.dtype(a_t)))], TensorProto.INT32, False))
    a = _ints(rng, np.uint8, (5, k))
    inits = {"a_s": np.float32(0.02), "a_zp": np.uint8(131), "b": _ints(rng, np.int8, (k, n)),
             "b_s": rng.uniform(0.001, 0.01, n).astype(np.float32), "b_zp": np.zeros(n, np.int8),
             "y_s": np.float32(0.05), "y_zp": np.uint8(120)}
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    cases.append(("QLinearMatMul per-column scale", node, inits, {"a": a}, [("a", TensorProto.UINT8)],
                  TensorProto.UINT8, False))
    for quantized in (False, True):
        inits = {"a_s": np.float32(0.03), "a_zp": np.int8(-3), "b": _ints(rng, np.int8, (n, k)),
                 "b_s": rng.uniform(0.001, 0.01, n).astype(np.float32), "b_zp": np.zeros(n, np.int8),
                 "c": rng.integers(-2000, 2000, n).astype(np.int32)}
        names = ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "c"]
        if quantized:
            inits |= {"y_s": np.float32(0.02), "y_zp": np.int8(5)}
            names += ["y_s", "y_zp"]
        node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", transA=1, transB=1, alpha=0.5)
        cases.append((f"QGemm transA transB quantized={quantized}", node, inits, {"a": _ints(rng, np.int8, (k, 4))},
                      [("a", TensorProto.INT8)], TensorProto.INT8 if quantized else TensorProto.FLOAT, True))
    return cases


def test_integer_matmuls_with_constant_weights_are_exact(device):
    rng = np.random.default_rng(5)
    for name, node, inits, feeds, inputs, out, ms in _integer_cases(rng):
        data = _graph([node], inputs, inits, out, opset=13, ms=ms)
        model = load(data, device=device)
        assert [type(m) for m in model.quantized.values()] == [IntegerLinear] and "b" not in model.initializers, name
        got = model.run(feeds)["y"].numpy()
        want = _session(data).run(None, feeds)[0]
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)  # exact: integers (floats: the same f32 ops)
        b = inits.pop("b")  # the same node with B fed: ember's integer matmul, no layer
        fed = load(_graph([node], inputs + [("b", helper.np_dtype_to_tensor_dtype(b.dtype))], inits, out, opset=13,
                          ms=ms), device=device)
        assert not fed.quantized
        np.testing.assert_array_equal(fed.run({**feeds, "b": b})["y"].numpy(), got, err_msg=name)


def _dq_cases(rng, k=13, n=7):
    """(name, W codes, ONNX type, scale, zero point, DQ attrs, Gemm transB, the scheme's (value, level, mode))."""
    u4, i4, e4m3 = TensorProto.UINT4, TensorProto.INT4, TensorProto.FLOAT8E4M3FN
    s_col, s_tensor = rng.uniform(0.01, 0.05, n).astype(np.float32), np.float32(0.02)
    blocks = rng.uniform(0.01, 0.05, (-(-k // 4), n)).astype(np.float32)
    return [
        ("int8 per tensor", _ints(rng, np.int8, (k, n)), TensorProto.INT8, s_tensor, None, {}, False,
         ("int8", "tensor", "symmetric")),
        ("uint8 zero 128 per column", _ints(rng, np.uint8, (k, n)), TensorProto.UINT8, s_col,
         np.full(n, 128, np.uint8), {"axis": 1}, False, ("int8", "channel", "symmetric")),
        ("uint8 affine per column", _ints(rng, np.uint8, (k, n)), TensorProto.UINT8, s_col, _ints(rng, np.uint8, n),
         {"axis": 1}, False, ("int8", "channel", "affine")),
        ("int8 nonzero zero points, Gemm transB", _ints(rng, np.int8, (n, k)), TensorProto.INT8, s_col,
         _ints(rng, np.int8, n), {"axis": 0}, True, ("int8", "channel", "affine")),
        ("int4 blocks of 4 along k", rng.integers(-8, 8, (k, n)), i4, blocks, rng.integers(-8, 8, blocks.shape),
         {"axis": 0, "block_size": 4}, False, ("int4", "block", "affine")),
        ("uint4 blocks, Gemm transB", rng.integers(0, 16, (n, k)), u4, blocks.T.copy(),
         np.full(blocks.T.shape, 8), {"axis": 1, "block_size": 4}, True, ("int4", "block", "symmetric")),
        ("float8e4m3fn per column", rng.standard_normal((k, n)), e4m3, s_col, None, {"axis": 1}, False,
         ("fp8_e4m3", "channel", "symmetric")),
        ("int8 scales along k (kept as DequantizeLinear)", _ints(rng, np.int8, (k, n)), TensorProto.INT8,
         rng.uniform(0.01, 0.05, k).astype(np.float32), None, {"axis": 0}, False, None),
    ]


def test_dequantize_linear_weights_run_quant_matmul(device):
    rng = np.random.default_rng(6)
    k, n = 13, 7
    for name, w, code, scale, zero, attrs, trans_b, expected in _dq_cases(rng, k, n):
        inits = {"w": helper.make_tensor("w", code, w.shape, w.flatten().tolist()), "s": scale}
        if zero is not None:
            inits["z"] = helper.make_tensor("z", code, np.shape(zero), np.ravel(zero).tolist())
        dq = helper.make_node("DequantizeLinear", ["w", "s"] + (["z"] if zero is not None else []), ["wd"], **attrs)
        mm = (helper.make_node("Gemm", ["x", "wd", "bias"], ["y"], transB=1, alpha=0.75) if trans_b else
              helper.make_node("MatMul", ["x", "wd"], ["y"]))
        if trans_b:
            inits["bias"] = rng.standard_normal(n).astype(np.float32)
        data = _graph([dq, mm], [("x", TensorProto.FLOAT)], inits)
        model = load(data, device=device)
        layers = list(model.quantized.values())
        if expected is None:
            assert not layers and "w" in model.initializers, name
        else:
            scheme = layers[0].weight.scheme
            assert len(layers) == 1 and (scheme.value, scheme.level, scheme.mode) == expected, (name, scheme)
            assert "w" not in model.initializers and "s" not in model.initializers, name
        x = rng.standard_normal((5, k) if trans_b else (2, 5, k), dtype=np.float32)
        want = _session(data).run(None, {"x": x})[0]
        np.testing.assert_allclose(model(x)[0].numpy(), want, atol=1e-5, rtol=1e-5, err_msg=name)


def test_exported_quantized_model_loads_back_onto_the_kernels(tmp_path):
    x = np.random.default_rng(8).standard_normal((4, 19), dtype=np.float32)
    for scheme, opset in ((quant.int8(axis=0), 13), (quant.int4(block=8, affine=True), 21)):
        model = quant.quantize_weights(nn.Sequential(nn.Linear(19, 9), nn.ReLU(), nn.Linear(9, 3)), scheme)
        path = tmp_path / "q.onnx"
        ember.onnx.export(model, ember.randn(2, 19), path, input_names=["x"], dynamic_axes={"x": [0]}, opset=opset)
        back = load(path, device=ember.Device.cpu())
        assert [m.weight.scheme for m in back.quantized.values()] == [scheme, scheme]
        np.testing.assert_allclose(back(x)[0].numpy(), model(ember.tensor(x)).numpy(), atol=1e-6, rtol=1e-6)


def test_matmul_nbits_errors_name_the_op():
    k, n = 16, 3
    inits = {"b": np.zeros((n, 1, 6), np.uint8), "s": np.ones((n, 1), np.float32)}
    node = helper.make_node("MatMulNBits", ["x", "b", "s"], ["y"], domain="com.microsoft", K=k, N=n, bits=3,
                            block_size=16, name="mm3")
    model = load(_graph([node], [("x", TensorProto.FLOAT)], inits, ms=True), device=ember.Device.numpy())
    with pytest.raises(UnsupportedOnnxError, match=r"com.microsoft.MatMulNBits .*'mm3'.*bits=3"):
        model(np.zeros((1, k), np.float32))


def test_empty_batches_and_an_all_zero_dynamic_quantization(device):
    rng = np.random.default_rng(9)
    k, n = 13, 7
    w = _ints(rng, np.int8, (k, n))
    integer = _graph([helper.make_node("MatMulInteger", ["a", "w", "a_zp"], ["y"])], [("a", TensorProto.UINT8)],
                     {"w": w, "a_zp": np.uint8(3)}, TensorProto.INT32, opset=13)
    dq = _graph([helper.make_node("DequantizeLinear", ["w", "s"], ["wd"], axis=1),
                 helper.make_node("MatMul", ["x", "wd"], ["y"])], [("x", TensorProto.FLOAT)],
                {"w": w, "s": rng.uniform(0.01, 0.05, n).astype(np.float32)})
    for data, x in ((integer, np.zeros((0, k), np.uint8)), (dq, np.zeros((2, 0, k), np.float32))):
        model = load(data, device=device)
        assert len(model.quantized) == 1
        got, want = model(x)[0].numpy(), _session(data).run(None, {"x" if x.dtype == np.float32 else "a": x})[0]
        assert got.shape == want.shape and got.dtype == want.dtype
    # an all-zero input: codes and zero point 0 as onnxruntime; the scale ONNX's reference's 1/255 (onnxruntime: 1)
    dql = helper.make_model(helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info(v, t, None) for v, t in (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT),
                                                                 ("z", TensorProto.UINT8))]),
        opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    zeros = np.zeros((2, 3), np.float32)
    y, s, z = (v.numpy() for v in load(dql, device=device)(zeros))
    want_y, _, want_z = _session(dql).run(None, {"x": zeros})
    np.testing.assert_array_equal(y, want_y)
    assert z == want_z and s == np.float32(1) / np.float32(255)


def test_matmul_nbits_layouts_without_a_scheme_keep_exact_results(device):
    """Float zero points that are not codes, and a B fed at run time, are dequantized by the op itself."""
    rng = np.random.default_rng(10)
    k, n, block = 37, 5, 16
    nb = -(-k // block)
    codes = rng.integers(0, 16, (n, nb * block)).astype(np.uint8)
    b = (codes[:, 0::2] | (codes[:, 1::2] << 4)).reshape(n, nb, block // 2)
    inits = {"b": b, "s": rng.uniform(0.01, 0.05, (n, nb)).astype(np.float32),
             "z": rng.uniform(0, 15, (n, nb)).astype(np.float32), "bias": rng.standard_normal(n).astype(np.float32)}
    node = helper.make_node("MatMulNBits", ["x", "b", "s", "z", "", "bias"], ["y"], domain="com.microsoft", K=k, N=n,
                            bits=4, block_size=block)
    x = rng.standard_normal((3, k), dtype=np.float32)
    for fed in (False, True):
        given = {name: a for name, a in inits.items() if not (fed and name == "b")}
        data = _graph([node], [("x", TensorProto.FLOAT)] + ([("b", TensorProto.UINT8)] if fed else []), given, ms=True)
        model = load(data, device=device)
        assert not model.quantized
        feeds = {"x": x, **({"b": b} if fed else {})}
        want = _session(data).run(None, feeds)[0]
        np.testing.assert_allclose(model.run(feeds)["y"].numpy(), want, atol=1e-5, rtol=1e-5)
