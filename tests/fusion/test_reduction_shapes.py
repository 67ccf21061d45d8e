"""Fused reductions in each of their kernel shapes against NumPy (f64) on random inputs.

The codegen picks a shape per layout and target (codegen.run_reduction): rows (a cube or a plane per
output) when the reduced positions are contiguous and at least SHORT_ROW long, else one unit per
output (columns: a strided axis such as a bias gradient's, or short rows). On the C target a line of
columns runs as whole cubes plus a guarded tail; widths here hit both parts.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.backend.cube.fused import codegen
from ember.kernels.elementwise import COMPILED

CASES = [  # (input shape, reduced dims): the shape each takes on the CPU
    ((128, 512), 0),      # columns, whole cubes (a bias gradient)
    ((37, 300), 0),       # columns, whole cubes + a guarded tail
    ((6, 5, 40), (0, 2)),  # columns over two reduced dims that do not merge
    ((300, 10), 1),       # short rows: columns with a strided kept step
    ((5, 700), 1),        # rows
    ((2, 3, 70), (1, 2)),  # rows over merged dims
]


@pytest.mark.parametrize("shape, dims", CASES, ids=str)
def test_fused_reduction_shapes_match_numpy(fused, shape, dims):
    rng = np.random.default_rng(3)
    xn = rng.standard_normal(shape).astype(np.float32)
    xn.flat[7] = np.nan  # max/min propagate it in every shape
    yn = rng.standard_normal(shape[-1]).astype(np.float32)
    x, y = ember.tensor(xn, device=fused), ember.tensor(yn, device=fused)
    x64, y64 = xn.astype(np.float64), yn.astype(np.float64)
    got = [(x * 2 + y).relu().sum(dims), (x - y).amax(dims), (x * y).amin(dims),
           ember.tensor(np.nan_to_num(xn), device=fused).abs().mean(dims)]
    want = [np.maximum(x64 * 2 + y64, 0).sum(dims), (x64 - y64).max(dims), (x64 * y64).min(dims),
            np.abs(np.nan_to_num(x64)).mean(dims)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transposed", [False, True], ids=["unit step", "strided"])
def test_rows_with_an_operand_broadcast_over_the_leading_dims_match_numpy(fused, transposed):
    """A (5, 70) operand (an attention mask) against (3, 2, 5, 70) rows: in a row it merges with the kept
    dims into a last dim of 350 (rows read along it, the operand at each row's base), transposed it
    keeps the last dim of 70 and a step of 5."""
    rng = np.random.default_rng(5)
    xn = rng.standard_normal((3, 2, 5, 70)).astype(np.float32)
    yn = rng.standard_normal((70, 5) if transposed else (5, 70)).astype(np.float32)
    x, y = ember.tensor(xn, device=fused), ember.tensor(yn, device=fused)
    if transposed:
        yn, y = yn.T, y.transpose(0, 1)
    x64, y64 = xn.astype(np.float64), yn.astype(np.float64)
    np.testing.assert_allclose((x * y).amax(3).numpy(), (x64 * y64).max(3), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((x - y).exp().sum(3).numpy(), np.exp(x64 - y64).sum(3), rtol=1e-4, atol=1e-4)


def test_bias_gradient_is_one_columns_kernel(cpu):
    COMPILED.clear()
    x = ember.tensor(np.ones((128, 512), np.float32), device=cpu)
    np.testing.assert_array_equal((x * 3).sum(0).numpy(), np.full(512, 384, np.float32))
    kinds = {key[0] for key in COMPILED}
    assert kinds == {"cols"}, kinds


def test_one_program_over_widths_of_every_unit_class(fused):
    """The same fused program over lines of 3, 40 and 300 outputs: each width takes another cube size
    (4, 32, 256 units), so each needs its own compiled kernel."""
    rng = np.random.default_rng(4)
    for width in (3, 40, 300, 3):
        xn = rng.standard_normal((10, width)).astype(np.float32)
        got = (ember.tensor(xn, device=fused) * 2).sum(0).numpy()
        np.testing.assert_allclose(got, (xn.astype(np.float64) * 2).sum(0), rtol=1e-5, atol=1e-5)
