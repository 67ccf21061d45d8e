"""Line-by-line generated elementwise kernels (`run_elementwise` with `rows`) against NumPy.

The shapes are those of a convolution's bias + relu: a (N, C, H*W) map with a (C, 1) bias, whose
bias is read once per line (LINE mode), lines shorter than, equal to and longer than a cube, a
strided (transposed) operand, and an output of another dtype (the relu mask).
"""

from __future__ import annotations

import numpy as np
import pytest

from ember.kernels import elementwise as codegen
from ember.kernels.elementwise import LINE, MIN_ROW, STRIDED, UNIT, Program
from ember.kernels.layout import merged_operands
from ember.dtype import bool_, f32, f64

# %3 = a + bias; %4 = %3 <= zero; %5 = where(%4, zero, %3): the fused forward of conv bias + relu
BIAS_RELU = Program((f32, f32, f32), (("add", (), (0, 1), f32), ("le", (), (3, 2), bool_),
                                      ("where", (), (4, 2, 3), f32)), (3, 4, 5))


def _bias_relu(a, bias):
    pre = a + bias
    return [pre, pre <= 0, np.where(pre <= 0, np.float32(0), pre)]


@pytest.fixture(params=["walk", "cubes along lines"])
def grid(request, monkeypatch):
    """Both line-by-line grids of the C target: a cube walking each line, cubes of UNITS along it."""
    monkeypatch.setattr(codegen, "WALK_MIN_LINES", 1 if request.param == "walk" else 1 << 30)
    return request.param


@pytest.mark.parametrize("shape", [(3, 5, MIN_ROW), (2, 3, 14, 14), (2, 4, 130), (1, 2, 1000), (0, 3, 70)])
def test_bias_relu_per_line_equals_numpy(rng, shape, grid):
    a = rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal((shape[1],) + (1,) * (len(shape) - 2)).astype(np.float32)
    zero = np.zeros((), np.float32)
    got = codegen.run_elementwise(BIAS_RELU, shape, [a, bias, zero])
    for g, want in zip(got, _bias_relu(a, bias)):
        assert g.shape == shape and g.dtype == want.dtype
        np.testing.assert_array_equal(g, want)


def test_a_bias_is_read_once_per_line_not_per_element(rng, grid):
    shape = (4, 3, 196)
    a = rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal((3, 1)).astype(np.float32)
    merged, views = merged_operands(shape, a, bias, np.zeros((), np.float32))
    assert codegen.line_modes(codegen.read_modes(views, merged), views)[1] == LINE
    codegen.run_elementwise(BIAS_RELU, shape, [a, bias, np.zeros((), np.float32)])
    for source in codegen.sources("ew", BIAS_RELU):  # each grid's kernel: the bias load stays outside the unit loops
        units = source[source.index("#pragma omp simd"):]
        assert "a_in1[" in source and "a_in1[" not in units


@pytest.mark.parametrize("dtype", [f32, f64])
def test_strided_and_broadcast_operands_per_line_equal_numpy(rng, dtype, grid):
    # a transposed operand (STRIDED along the line), a per-line one and a per-column one (UNIT: in a row)
    x = rng.standard_normal((100, 3, 5)).astype(dtype.np).transpose(1, 2, 0)  # (3, 5, 100), line step 15
    row = rng.standard_normal((3, 5, 1)).astype(dtype.np)
    col = rng.standard_normal((100,)).astype(dtype.np)
    p = Program((dtype, dtype, dtype), (("mul", (), (0, 1), dtype), ("add", (), (3, 2), dtype)), (4,))
    merged, views = merged_operands((3, 5, 100), x, row, col)
    assert codegen.line_modes(codegen.read_modes(views, merged), views) == (STRIDED, LINE, UNIT)
    (got,) = codegen.run_elementwise(p, (3, 5, 100), [x, row, col])
    tol = 1e-6 if dtype is f32 else 1e-13  # a multiply-add may be one rounding (FMA) or two
    np.testing.assert_allclose(got, x * row + col, rtol=tol, atol=tol)


@pytest.mark.parametrize("width", [codegen.WALK_MIN_ROW, 13, MIN_ROW - 1, 7])
def test_short_lines_of_a_transposed_operand_equal_numpy(rng, width, grid):
    """Lines shorter than MIN_ROW (an attention head's width): walked in cubes of WALK_MIN_ROW units from
    WALK_MIN_ROW on, the last step shifted back; narrower ones (7) and the other grid read flat positions."""
    x = rng.standard_normal((6, 5, 9, width)).astype(np.float32).transpose(0, 2, 1, 3)  # (6, 9, 5, width)
    row = rng.standard_normal((6, 9, 5, 1)).astype(np.float32)
    p = Program((f32, f32), (("mul", (), (0, 1), f32),), (2,))
    (got,) = codegen.run_elementwise(p, x.shape, [x, row])
    np.testing.assert_array_equal(got, x * row)


@pytest.mark.parametrize("shape", [(2, 4, 130), (3, 5, MIN_ROW), (1, 3, 1000)])
def test_lines_beyond_a_grid_dimension_fold_into_a_third(rng, shape, monkeypatch):
    """More lines than a grid dimension holds (CUDA, WGSL: `MAX_GRID`, 65535) run as cubes (x, y, z) on
    line y + z * CUBE_COUNT_Y, the cubes past the last line doing nothing: exercised on the C target's
    cubes-along-lines grid with a grid dimension of 2 (lines 8, 15, 3: z 4, 8, 2, a cube row to spare in
    two of them)."""
    monkeypatch.setattr(codegen, "WALK_MIN_LINES", 1 << 30)
    monkeypatch.setattr(codegen, "MAX_GRID", 2)
    a = rng.standard_normal(shape).astype(np.float32)
    bias = rng.standard_normal((shape[1],) + (1,) * (len(shape) - 2)).astype(np.float32)
    got = codegen.run_elementwise(BIAS_RELU, shape, [a, bias, np.zeros((), np.float32)])
    for g, want in zip(got, _bias_relu(a, bias)):
        np.testing.assert_array_equal(g, want)


def test_many_lines_with_broadcast_operands_equal_numpy(fused, rng):
    """70,000 lines of 64 (more than a CUDA or WGSL grid dimension of cube rows) with a per-line and a
    per-column operand: the shape of attention's (batch * heads, L, S) scores with its logsumexp and mask."""
    import ember
    a = rng.standard_normal((70000, 64)).astype(np.float32)
    per_line = rng.standard_normal((70000, 1)).astype(np.float32)
    per_column = rng.standard_normal(64).astype(np.float32)
    x, r, c = (ember.tensor(v, device=fused) for v in (a, per_line, per_column))
    got = ((x - r) * 0.5 + c).exp()
    np.testing.assert_allclose(got.numpy(), np.exp((a - per_line) * np.float32(0.5) + per_column), rtol=1e-5)
