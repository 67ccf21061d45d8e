"""`quant_matmul` (F.quant_linear) and `int_matmul` (F.int_linear) against torch on every device.

The oracle dequantizes the packed weight with torch alone (its own unpacking, fp8 through torch's
float8 dtypes, fp4 e2m1 from its sign, exponent and mantissa bits, NF4 from bitsandbytes' table as
listed here, UE8M0 as 2^(e - 127) in f64) and multiplies in f64; the gradient with respect to x is
torch autograd's of x @ W.T. The cases reach each kernel of ember/kernels/quant_matmul.py: the GEMV
one (M <= 16), the tiled one (M = 18), the transposed one (the gradient).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember
from ember.api._common import apply
from ember.errors import DTypeError, ShapeError
from ember.nn import functional as F
from tolerances import forward

NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023,
       1.0]
BITS = {"int8": 8, "uint8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8, "int4": 4, "uint4": 4, "nf4": 4, "fp4_e2m1": 4,
        "int2": 2, "uint2": 2}
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def torch_values(fields: torch.Tensor, code: str) -> torch.Tensor:
    """The f64 value of each bit pattern (int64 tensor) of `code`, by torch alone."""
    bits = BITS[code]
    if code.startswith("uint"):
        return fields.double()
    if code.startswith("int"):
        return torch.where(fields >= 2 ** (bits - 1), fields - 2 ** bits, fields).double()
    if code == "nf4":
        return torch.tensor(NF4, dtype=torch.float64)[fields]
    if code == "fp4_e2m1":
        sign, exp, man = fields >> 3, (fields >> 1) & 3, fields & 1
        mag = torch.where(exp == 0, man * 0.5, 2.0 ** (exp - 1) * (1 + man * 0.5))
        return torch.where(sign == 1, -mag, mag).double()
    kind = torch.float8_e4m3fn if code == "fp8_e4m3" else torch.float8_e5m2
    return fields.to(torch.uint8).view(kind).double()


def torch_weight(values, scales, zeros, code, block, k) -> torch.Tensor:
    """The (n, k) f64 weight of the parts (NumPy arrays), unpacked by torch."""
    bits = BITS[code]
    v = torch.from_numpy(values.astype(np.int64))
    fields = torch.stack([(v >> (i * bits)) & (2 ** bits - 1) for i in range(8 // bits)], dim=-1)
    w = torch_values(fields.reshape(v.shape[0], -1)[:, :k], code)
    s = torch.from_numpy(scales.astype(np.float64))
    if scales.dtype == np.uint8:
        s = torch.where(s == 255, torch.nan, 2.0 ** (s - 127))
    column = torch.arange(k) // block
    per = (lambda t: t.reshape(1, 1)) if scales.ndim == 1 else (lambda t: t[:, column])
    if zeros is not None:
        w = w - per(torch.from_numpy(zeros.astype(np.float64)))
    return per(s) * w


def parts(rng, code: str, n: int, k: int, block: int, scale: str):
    """Random packed values, scales (per "tensor", per "channel" or per "block"; "ue8m0" bytes per block)
    and zeros for the affine codes. fp8 patterns of NaN and inf are avoided (they make every sum NaN)."""
    per = 8 // BITS[code]
    values = rng.integers(0, 256, (n, -(-k // per)), dtype=np.uint8)
    if k % per:  # the contract's padding: codes past k are 0
        values[:, -1] &= np.uint8((1 << (BITS[code] * (k % per))) - 1)
    if code == "fp8_e4m3":
        values = np.where(values & 0x7F == 0x7F, 0x3C, values).astype(np.uint8)
    if code == "fp8_e5m2":
        values = np.where(values & 0x7C == 0x7C, 0x3C, values).astype(np.uint8)
    nb = -(-k // block)
    if scale == "tensor":
        scales = np.array([0.37], np.float32)
    elif scale == "ue8m0":
        scales = rng.integers(120, 131, (n, nb)).astype(np.uint8)
    else:
        scales = rng.uniform(0.01, 0.1, (n, nb)).astype(np.float32)
    zeros = rng.integers(0, 2 ** BITS[code], scales.shape).astype(np.uint8) if code.startswith("uint") else None
    return values, scales, zeros


# (code, k, n, block, scales): odd k and n, blocks of 32 / 16 / 64 / one per row, UE8M0 and f16 scales.
CASES = [("int8", 45, 7, 45, "channel"), ("uint8", 64, 5, 32, "block"), ("int4", 37, 9, 37, "tensor"),
         ("uint4", 64, 3, 16, "block"), ("int2", 70, 5, 70, "channel"), ("uint2", 64, 6, 32, "block"),
         ("nf4", 64, 7, 64, "block"), ("fp4_e2m1", 96, 5, 32, "ue8m0"), ("fp8_e4m3", 33, 4, 33, "channel"),
         ("fp8_e5m2", 64, 3, 32, "block")]


def _check(device, rng, code, k, n, block, scale, lead, dtype, grad=True):
    values, scales, zeros = parts(rng, code, n, k, block, scale)
    x = rng.standard_normal(lead + (k,)).astype(np.float32)
    w = torch_weight(values, scales, zeros, code, block, k)
    tx = torch.from_numpy(x).to(TORCH[dtype]).double().requires_grad_(grad)
    ty = tx @ w.T
    tracked = device.autodiff()
    ex = ember.tensor(x, device=tracked).cast(dtype)
    if grad:
        ex = ex.require_grad()
    ep = [ember.tensor(a, device=tracked) for a in (values, scales, zeros) if a is not None]
    if scale == "f16":
        ep[1] = ep[1].cast("f16")
    ey = F.quant_linear(ex, *ep, code=code, block=block, in_features=k, out_features=n)
    assert ey.dtype.name == dtype and ey.shape == tuple(ty.shape)
    rtol, atol = forward(dtype)
    scale_of = float(ty.detach().abs().max()) + 1e-3  # sums of many products: relative to the result's size
    what = f"{code} k={k} n={n} block={block} {scale} x{lead} {dtype}"
    np.testing.assert_allclose(ey.cast("f32").numpy(), ty.detach().numpy(), rtol=rtol,
                               atol=max(atol, 1e-5) * scale_of * 4, err_msg=what)
    if grad:
        cot = rng.standard_normal(ty.shape)
        ty.backward(torch.from_numpy(cot))
        gx = ex.grad(ey.backward(ember.tensor(cot.astype(np.float32), device=device).cast(dtype)))
        gscale = float(tx.grad.abs().max()) + 1e-3
        np.testing.assert_allclose(gx.cast("f32").numpy(), tx.grad.numpy(), rtol=rtol,
                                   atol=max(atol, 1e-5) * gscale * 4, err_msg=f"gradient of x: {what}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_quant_linear_matches_torch(device, rng, case):
    # M = 3 (the GEMV kernel), 18 in batch dims (the tiled one), and both gradients (the transposed one).
    for lead in ((3,), (2, 9)):
        _check(device, rng, *case, lead, "f32")


def test_quant_linear_decoding_one_row(device, rng):
    for case in (CASES[2], CASES[6], CASES[9]):  # int4 per tensor, nf4, fp8 e5m2
        _check(device, rng, *case, (1,), "f32", grad=False)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_quant_linear_half_inputs(device, rng, dtype):
    for case, lead in ((("int4", 64, 9, 32, "block"), (2,)), (("nf4", 37, 5, 37, "f16"), (19,))):
        _check(device, rng, *case, lead, dtype)


def test_quant_linear_bias_and_odd_blocks(device, rng):
    # A block that splits a byte's codes between two scales runs the reference on Cube devices (`supports`).
    values, scales, _ = parts(rng, "int4", 5, 30, 3, "block")
    x = rng.standard_normal((4, 30)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    want = x @ torch_weight(values, scales, None, "int4", 3, 30).numpy().T + bias
    got = F.quant_linear(*(ember.tensor(a, device=device) for a in (x, values, scales)), code="int4", block=3,
                         in_features=30, out_features=5, bias=ember.tensor(bias, device=device))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


def test_quant_linear_empty(device):
    v, s = ember.zeros(4, 3, dtype="u8", device=device), ember.ones(4, 1, device=device)
    assert F.quant_linear(ember.ones(0, 5, device=device), v, s, code="int4", block=5, in_features=5,
                          out_features=4).shape == (0, 4)
    e = F.quant_linear(ember.ones(2, 0, device=device), ember.zeros(4, 0, dtype="u8", device=device),
                       ember.ones(1, device=device), code="int8", block=1, in_features=0, out_features=4)
    assert e.shape == (2, 4) and not e.numpy().any()


def test_int_linear_matches_numpy_exactly(device, rng):
    for m, k, n in ((1, 5, 3), (3, 33, 7), (17, 100, 9), (2, 1, 1)):
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (n, k), dtype=np.int8)
        for x, y in ((a, b), (np.full_like(a, -128), np.full_like(b, -128)), (np.full_like(a, 127), np.full_like(b, -128))):
            got = F.int_linear(ember.tensor(x, device=device), ember.tensor(y, device=device))
            assert got.dtype.name == "i32"
            np.testing.assert_array_equal(got.numpy(), x.astype(np.int64) @ y.astype(np.int64).T)
    a3 = rng.integers(-128, 128, (2, 3, 20), dtype=np.int8)
    b = rng.integers(-128, 128, (5, 20), dtype=np.int8)
    got = F.int_linear(ember.tensor(a3, device=device), ember.tensor(b, device=device))
    np.testing.assert_array_equal(got.numpy(), a3.astype(np.int64) @ b.astype(np.int64).T)


def test_bad_inputs_name_the_op_and_shapes():
    x, v, s = ember.ones(2, 8), ember.zeros(3, 4, dtype="u8"), ember.ones(3, 1)
    kw = dict(code="int4", block=8, in_features=8, out_features=3)
    with pytest.raises(ShapeError, match=r"quant_linear: .*\(3, 5\).*\(3, 4\)"):
        F.quant_linear(x, ember.zeros(3, 5, dtype="u8"), s, **kw)
    with pytest.raises(ShapeError, match=r"quant_linear: scales of shape \(3, 2\).*blocks of 8"):
        F.quant_linear(x, v, ember.ones(3, 2), **kw)
    with pytest.raises(DTypeError, match=r"quant_linear: scales of dtype i32"):
        F.quant_linear(x, v, ember.ones(3, 1, dtype="i32"), **kw)
    with pytest.raises(ShapeError, match=r"quant_linear: x @ W.T of x \(2, 7\)"):
        F.quant_linear(ember.ones(2, 7), v, s, **kw)
    with pytest.raises(ShapeError, match=r"quant_linear: the affine code uint4 needs zeros"):
        F.quant_linear(x, v, s, **{**kw, "code": "uint4"})
    with pytest.raises(ShapeError, match=r"quant_linear: unknown code 'int3'"):
        F.quant_linear(x, v, s, **{**kw, "code": "int3"})
    with pytest.raises(DTypeError, match=r"quant_linear: x of dtype i32"):
        F.quant_linear(ember.ones(2, 8, dtype="i32"), v, s, **kw)
    with pytest.raises(DTypeError, match=r"int_linear: operands are int8"):
        F.int_linear(ember.ones(2, 3, dtype="i8"), ember.ones(4, 3))
    with pytest.raises(ShapeError, match=r"int_linear: a \(2, 3\) @ b.T of b \(4, 2\)"):
        F.int_linear(ember.ones(2, 3, dtype="i8"), ember.ones(4, 2, dtype="i8"))


# ---- the kernels' own paths, against the NumPy reference ---------------------------------------------
# ember/kernels/quant_matmul.py: the word GEMV (rows of whole u32 words on the C target: one scale a row,
# blocks of a step's 16 words, or 16 // wpb blocks a step given to lanes by selects; 16-entry tables by
# lut16), the byte GEMV (other rows), and for M > 16 and the input gradient the autotuner's two
# candidates, forced in turn: dense products on dequantized slabs (several slabs, rows split between
# dequantization cubes), and the tiles.

def numpy_product(x: np.ndarray, values, scales, zeros, code, block, k, transpose=False) -> np.ndarray:
    """x (f32) times the weight the NumPy reference dequantizes, in f64."""
    from ember.ops.quant_matmul import dequantize
    w = dequantize(values, scales, zeros, code=code, block=block, k=k).astype(np.float64)
    return x.astype(np.float64) @ (w if transpose else w.T)


def _product(device, rng, code, k, n, block, scale, lead, dtype, transpose=False):
    values, scales, zeros = parts(rng, code, n, k, block, scale)
    x = rng.standard_normal(lead + ((n if transpose else k),)).astype(np.float32)
    x = torch.from_numpy(x).to(TORCH[dtype]).float().numpy()  # the values the activation's dtype holds
    ep = [ember.tensor(a, device=device) for a in (values, scales, zeros) if a is not None]
    if scale == "f16":
        ep[1] = ep[1].cast("f16")
    y = apply("quant_matmul", ember.tensor(x, device=device).cast(dtype), *ep, code=code, block=block, k=k,
                    n=n, transpose=transpose)
    want = numpy_product(x, values, np.asarray(ep[1].cast("f32").numpy()) if scale == "f16" else scales, zeros,
                         code, block, k, transpose)
    rtol, atol = forward(dtype)
    what = f"{code} k={k} n={n} block={block} {scale} x{lead} {dtype} transpose={transpose}"
    assert y.dtype.name == dtype and y.shape == want.shape, what
    np.testing.assert_allclose(y.cast("f32").numpy(), want, rtol=rtol,
                               atol=max(atol, 1e-5) * (np.abs(want).max() + 1e-3) * 4, err_msg=what)


# (code, k, n, block, scales): rows of whole words with a tail step (k = 100 int8: 25 words), one step in
# part (int4 k = 96), selects of 2 and 8 blocks a step (uint4 blocks of 16, nf4 blocks of 64), UE8M0 fp4,
# a block of 4 steps' words (int8 blocks of 256), 2-bit words; and rows of 75 and 35 bytes (the byte GEMV).
GEMV_CASES = [("int8", 100, 7, 100, "channel"), ("int4", 96, 9, 32, "block"), ("uint4", 136, 5, 16, "block"),
              ("nf4", 192, 13, 64, "block"), ("fp4_e2m1", 96, 5, 32, "ue8m0"), ("int8", 768, 3, 256, "block"),
              ("int2", 320, 6, 320, "tensor"), ("uint2", 300, 4, 300, "channel"), ("fp8_e5m2", 35, 9, 35, "f16")]


@pytest.mark.parametrize("case", GEMV_CASES, ids=[f"{c[0]}-{c[1]}" for c in GEMV_CASES])
def test_quant_gemv_paths(device, rng, case):
    for m in (1, 3, 16):  # 16: four groups of four x rows
        _product(device, rng, *case, (m,), "f32")


def test_quant_gemv_half_activations(device, rng):
    _product(device, rng, "nf4", 192, 13, 64, "block", (5,), "bf16")
    _product(device, rng, "int8", 100, 7, 100, "channel", (1,), "f16")


@pytest.fixture
def forced_candidate(monkeypatch):
    """Sets the name of the candidate the quantized matmul's autotuner runs, with slabs of 64 rows or
    columns (the fewest) and rows of 64 bytes a dequantization cube."""
    from ember.kernels import quant_matmul as qm
    monkeypatch.setattr(qm, "SLAB_ELEMENTS", {"cpu": 1, "cuda": 1})
    monkeypatch.setattr(qm, "DEQUANT_CHUNK", 64)
    real = qm.large_tuner
    chosen = {}
    monkeypatch.setattr(qm, "large_tuner", lambda runtime, transpose: (
        lambda x2, w: real(runtime, transpose).candidates[chosen["name"]](x2, w)))
    return chosen


@pytest.mark.parametrize("candidate", ["slab", "tiled"])
def test_quant_large_m_candidates(device, rng, forced_candidate, candidate):
    forced_candidate["name"] = candidate
    # three slabs of rows (n = 130), three of columns for the gradient (k = 150); odd k, n and blocks
    for code, k, n, block, scale in (("int8", 150, 130, 150, "channel"), ("nf4", 64, 70, 32, "block")):
        _product(device, rng, code, k, n, block, scale, (67,), "f32")
        _product(device, rng, code, k, n, block, scale, (3, 7), "f32", transpose=True)
    _product(device, rng, "uint4", 37, 9, 37, "tensor", (2, 20), "bf16")
    _product(device, rng, "fp8_e4m3", 45, 11, 45, "f16", (19,), "f16", transpose=True)
