"""Quantization schemes (ember/qscheme): bad schemes name themselves and the shape, the layouts of the
parts, and the NumPy reference's tables against independent definitions (bitsandbytes' NF4 map from
scipy's normal quantiles, ml_dtypes' e2m1, the OCP MX shared-exponent rule on hand-made blocks)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import quant
from ember.errors import QuantSchemeError
from ember.qscheme import QuantScheme, reference


@pytest.mark.parametrize("make, shape, words", [
    (lambda: quant.int8(axis=0, block=32), None, ["axis=0", "block=32"]),
    (lambda: QuantScheme("fp8_e4m3", mode="affine"), None, ["fp8_e4m3", "affine"]),
    (lambda: QuantScheme("nf4", level="block", block=64, mode="affine"), None, ["nf4", "affine"]),
    (lambda: quant.int4(block=0), None, ["int4", "block"]),
    (lambda: QuantScheme("int8", param="ue8m0"), None, ["int8", "UE8M0"]),
    (lambda: quant.int8(block=32, scale_dtype="i32"), None, ["i32"]),
    (lambda: QuantScheme("int4", level="tensor", double_quant=True), None, ["int4", "double"]),
    (lambda: quant.mxfp4(), (3, 33), ["fp4_e2m1(block=32", "(3, 33)", "multiple"]),
    (lambda: quant.int8(axis=2), (3, 4), ["axis=2", "(3, 4)"]),
])
def test_bad_schemes_raise_naming_the_scheme_and_shape(make, shape, words):
    with pytest.raises((QuantSchemeError, ember.DTypeError)) as e:
        scheme = make()
        ember.zeros(*shape).quantize(scheme)
    for word in words:
        assert word in str(e.value)


def test_parts_layout_and_qtype():
    assert quant.int4(block=32).parts((5, 70)) == {"values": (5, 35), "scales": (5, 3)}
    assert quant.int2(block=8, affine=True).parts((3, 9)) == {"values": (3, 3), "scales": (3, 2), "zeros": (3, 2)}
    assert quant.int8(axis=1).parts((4, 3, 5)) == {"values": (3, 20), "scales": (3, 1)}
    assert quant.nf4(block=4, double_quant=True).parts((300, 8))["scales2"] == (3,)
    assert quant.int8().parts((7,)) == {"values": (7,), "scales": (1,)}
    s = quant.int4(block=32, affine=True)
    assert QuantScheme.from_dict(s.to_dict()) == s and quant.qtype(s) == quant.qtype(quant.int4(block=32, affine=True))
    assert quant.qtype(s) != quant.qtype(quant.int4(block=32)) and s.code == "uint4" and quant.nf4().code == "nf4"


def test_nf4_codebook_is_bitsandbytes_normal_map():
    norm = pytest.importorskip("scipy.stats").norm
    torch = pytest.importorskip("torch")
    offset = 0.9677083  # bitsandbytes.functional.create_normal_map(offset, use_extra_value=True), step by step
    v1 = norm.ppf(torch.linspace(offset, 0.5, 9)[:-1]).tolist()
    v3 = (-norm.ppf(torch.linspace(offset, 0.5, 8)[:-1])).tolist()
    values = torch.Tensor(v1 + [0] * 241 + v3).sort().values
    values /= values.max()
    np.testing.assert_array_equal(reference.NF4, np.unique(values.numpy()))


def test_e2m1_and_fp8_tables_match_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np.testing.assert_array_equal(reference.E2M1, np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32))
    e4m3 = reference.code_values(quant.fp8_e4m3())
    assert e4m3[0x7E] == 448 and np.isnan(e4m3[0x7F]) and e4m3[0x01] == 2.0 ** -9


def test_mxfp4_shared_exponent_and_rounding_per_ocp_mx():
    block = np.zeros(32, np.float32)
    block[:6] = [7.0, -0.3, 1.25, 0.75, -2.5, 5.0]  # amax 7: shared exponent floor(log2 7) - 2 = 0
    parts = reference.quantize(block[None], quant.mxfp4())
    assert parts["scales"].tolist() == [[127]]
    # 7 saturates to 6; -0.3 -> -0.5; 1.25 ties to 1.0 (even mantissa); 0.75 ties to 1.0; -2.5 ties to -2; 5 ties to 4
    out = reference.dequantize(parts, quant.mxfp4(), (1, 32))[0, :6]
    assert out.tolist() == [6.0, -0.5, 1.0, 1.0, -2.0, 4.0]
    tiny = np.full((1, 32), 2.0 ** -140, np.float32)
    assert reference.quantize(tiny, quant.mxfp4())["scales"].tolist() == [[0]]  # clamped at 2^-127
    big = np.full((1, 32), 3.0e38, np.float32)
    assert reference.quantize(big, quant.mxfp4())["scales"].tolist() == [[127 + 127 - 2]]


def test_int_codes_round_half_even_and_clamp():
    x = np.array([[127.0, 0.5, 1.5, -2.5, -127.0, 63.5]], np.float32)
    parts = reference.quantize(x, quant.int8(axis=0))  # scale exactly 1
    assert parts["values"].view(np.int8).tolist() == [[127, 0, 2, -2, -127, 64]]
    x4 = np.array([[7.0, -7.0, 3.5, -0.5]], np.float32)
    codes = reference.unpack(reference.quantize(x4, quant.int4(block=4))["values"], 4, 4)
    assert codes.tolist() == [[7, 16 - 7, 4, 0]]
