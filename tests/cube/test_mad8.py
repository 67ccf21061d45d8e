"""`mad8(acc, a, b)`, the IR's 8-bit multiply-add into i32 (`docs/cube.md`): elementwise with wrapping,
as a one-unit reduction loop (the C target's dot-product form), folded on constants, and its type rule;
against NumPy's int64 arithmetic wrapped to int32, on the C target and wgpu where it runs."""

import numpy as np
import pytest

from ember import cube
from ember.cube import ir
from ember.cube.lang import CubeCount, CubeDim
from ember.cube.passes.fold import evaluate


@cube.kernel
def mad8_each(acc: cube.Array[cube.i32], a: cube.Array, b: cube.Array, out: cube.Array[cube.i32]):
    i = cube.ABSOLUTE_POS
    if i < len(out):
        out[i] = cube.mad8(acc[i], a[i], b[i])


@cube.kernel
def mad8_rows(a: cube.Array, b: cube.Array, out: cube.Array[cube.i32], k: cube.i32):
    """out[r] = a[r, :] . b[r, :] by one unit a row: a reduction loop (gcc's dot-product pattern)."""
    r = cube.CUBE_POS_X
    s = cube.i32(0)
    for kk in range(k):
        s = cube.mad8(s, a[r * k + kk], b[r * k + kk])
    out[r] = s


@cube.kernel
def mad8_constants(out: cube.Array[cube.i32]):
    out[0] = cube.mad8(2147483000, cube.u8(255), cube.i8(-128))  # folded: wraps like the run-time op
    out[1] = cube.mad8(-2147483000, cube.u8(250), cube.u8(250))


def wrap32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.int64).astype(np.uint32).view(np.int32)


PAIRS = [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8), (np.int8, np.uint8)]


def _draw(rng, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _check() -> None:
    rng = np.random.default_rng(8)
    for ta, tb in PAIRS:
        n = 37
        acc = rng.integers(-2 ** 31, 2 ** 31, n).astype(np.int32)
        acc[:4] = [2 ** 31 - 1, -2 ** 31, 2 ** 31 - 100, -2 ** 31 + 5]  # sums past the range wrap
        a, b = _draw(rng, ta, n), _draw(rng, tb, n)
        out = np.zeros(n, np.int32)
        mad8_each.launch(CubeCount(1), CubeDim(64), acc, a, b, out)
        np.testing.assert_array_equal(out, wrap32(acc.astype(np.int64) + a.astype(np.int64) * b), str((ta, tb)))
        rows, k = 5, 203  # odd k: the vector loop's tail
        a2, b2 = _draw(rng, ta, (rows, k)), _draw(rng, tb, (rows, k))
        out2 = np.zeros(rows, np.int32)
        mad8_rows.launch(CubeCount(rows), CubeDim(1), a2.reshape(-1), b2.reshape(-1), out2, k)
        np.testing.assert_array_equal(out2, (a2.astype(np.int64) * b2).sum(1), str((ta, tb)))
    got = np.zeros(2, np.int32)
    mad8_constants.launch(CubeCount(1), CubeDim(1), got)
    np.testing.assert_array_equal(got, wrap32([2147483000 + 255 * -128, -2147483000 + 250 * 250]))


def test_mad8_matches_numpy_on_the_c_target():
    _check()


def test_mad8_on_wgpu():
    from ember.cube.kernel import host_runtime
    from ember.cube.runtime.wgpu import wgpu_available, wgpu_runtime
    ok, why = wgpu_available()
    if not ok:
        pytest.skip(f"wgpu: {why}")
    with host_runtime(wgpu_runtime()):
        _check()


def test_mad8_folds_and_checks_types():
    b = ir.Builder("k")
    acc, x, y = b.const(7, ir.i32), b.const(-3, ir.i8), b.const(200, ir.u8)
    assert evaluate("mad8", [7, -3, 200], [acc.type, x.type, y.type], acc.type) == 7 - 600
    assert evaluate("mad8", [2 ** 31 - 1, 1, 1], [acc.type, x.type, y.type], acc.type) == -2 ** 31
    with pytest.raises(ir.IRError, match="mad8 needs"):
        b.mad8(acc, acc, y)  # an i32 operand
    with pytest.raises(ir.IRError, match="mad8 needs"):
        b.mad8(b.const(1, ir.i64), x, y)
