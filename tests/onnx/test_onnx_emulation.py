"""ember.onnx on random inputs against independent oracles, for what the node tests cover with one fixed
case each: element types held in another dtype (uint wrap-around, float8 rounding) against NumPy and
onnx's reference, and the compositions (DFT, Det, GridSample cubic) against NumPy and onnx's
reference evaluator, at odd sizes, on the numpy and cpu devices."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import ember
from ember.onnx import load

DEVICES = ["numpy", "cpu"]


def _model(op_type, inputs, out_type, opset=22, **attrs):
    node = helper.make_node(op_type, [n for n, _ in inputs], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
                          [helper.make_tensor_value_info("y", out_type, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("device", DEVICES)
def test_unsigned_arithmetic_wraps_as_numpy(device):
    rng = np.random.default_rng(1)
    for dt, code in ((np.uint16, TensorProto.UINT16), (np.uint32, TensorProto.UINT32), (np.uint64, TensorProto.UINT64)):
        top = min(np.iinfo(dt).max, 2 ** 62)
        a, b = (rng.integers(0, top, (3, 5), dtype=np.uint64).astype(dt) for _ in range(2))
        for op_type, want in (("Add", a + b), ("Sub", a - b), ("Mul", a * b), ("BitwiseXor", a ^ b)):
            (got,) = load(_model(op_type, [("a", code), ("b", code)], code), device=device)(a, b)
            assert got.dtype == dt and np.array_equal(got, want), (op_type, dt)
        (got,) = load(_model("Less", [("a", code), ("b", code)], TensorProto.BOOL), device=device)(a, b)
        assert np.array_equal(got.numpy(), a < b)


@pytest.mark.parametrize("device", DEVICES)
def test_cast_to_float8_rounds_as_the_reference(device):
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(37) * 300, [np.nan, np.inf, -np.inf, 1e-9, 0.0]]).astype(np.float32)
    for code, dt in ((TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn), (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
                     (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz)):
        for saturate in (0, 1):
            m = _model("Cast", [("x", TensorProto.FLOAT)], code, to=code, saturate=saturate)
            (got,) = load(m, device=device)(x)
            (want,) = ReferenceEvaluator(m).run(None, {"x": x})
            assert got.dtype == dt
            np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_dft_matches_numpy_fft(device):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 7, 3, 2)).astype(np.float32)
    z = x[..., 0] + 1j * x[..., 1]
    for inverse, onesided, want in ((0, 0, np.fft.fft(z, axis=1)), (1, 0, np.fft.ifft(z, axis=1))):
        m = _model("DFT", [("x", TensorProto.FLOAT), ("n", TensorProto.INT64), ("axis", TensorProto.INT64)],
                   TensorProto.FLOAT, inverse=inverse, onesided=onesided)
        (got,) = load(m, device=device)(x, np.array(7, np.int64), np.array(1, np.int64))
        np.testing.assert_allclose(got.numpy()[..., 0] + 1j * got.numpy()[..., 1], want, rtol=1e-4, atol=1e-5)
    real = x[..., :1]
    m = _model("DFT", [("x", TensorProto.FLOAT), ("n", TensorProto.INT64), ("axis", TensorProto.INT64)],
               TensorProto.FLOAT, onesided=1)
    (got,) = load(m, device=device)(real, np.array(7, np.int64), np.array(1, np.int64))
    want = np.fft.rfft(real[..., 0], axis=1)
    np.testing.assert_allclose(got.numpy()[..., 0] + 1j * got.numpy()[..., 1], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_det_matches_numpy(device):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 2, 5, 5)).astype(np.float32)
    x[0, 0, 1] = x[0, 0, 3]  # a singular matrix
    (got,) = load(_model("Det", [("x", TensorProto.FLOAT)], TensorProto.FLOAT), device=device)(x)
    np.testing.assert_allclose(got.numpy(), np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_gridsample_cubic_matches_the_reference(device):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, (2, 3, 7, 2)).astype(np.float32)
    combos = [(p, a) for p in ("zeros", "border", "reflection") for a in (0, 1)]
    for padding, align in combos if device == "numpy" else combos[1::3]:  # the cpu compiles each
        m = _model("GridSample", [("x", TensorProto.FLOAT), ("g", TensorProto.FLOAT)], TensorProto.FLOAT,
                   mode="cubic", padding_mode=padding, align_corners=align)
        (got,) = load(m, device=device)(x, grid)
        (want,) = ReferenceEvaluator(m).run(None, {"x": x, "g": grid})
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5, err_msg=f"{padding} {align}")
