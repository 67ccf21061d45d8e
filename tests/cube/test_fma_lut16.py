"""`fma(a, b, c)` (a * b + c rounded once) and `lut16(table, i)` (table[i & 15]), IR ops of docs/cube.md:
against an exact rational reference and NumPy indexing, on the C target (where a look-up outside divergent
control flow runs as a vector shuffle between phases, and inside it as a load) and on wgpu; fma's fold
and both type rules."""

from fractions import Fraction

import numpy as np
import pytest

from ember import cube
from ember.cube import ir
from ember.cube.lang import CubeCount, CubeDim
from ember.cube.passes.fold import evaluate
from ember.cube.targets.c import render


@cube.kernel
def fma_each(a: cube.Array, b: cube.Array, c: cube.Array, out: cube.Array):
    i = cube.ABSOLUTE_POS
    if i < len(out):
        out[i] = cube.fma(a[i], b[i], c[i])


@cube.kernel
def fma_constants(out: cube.Array[cube.f32]):
    out[0] = cube.fma(cube.f32(1.0000001), cube.f32(1.0000001), cube.f32(-1.0000002))  # folded: rounded once


@cube.kernel
def lut_steps(table: cube.Array[cube.f32], codes: cube.Array[cube.i32], out: cube.Array[cube.f32], n: cube.i32,
              rounds: cube.Comptime[int]):
    """out[i] = sum over r of table[codes[i] >> 4r]: look-ups in a uniform loop, a uniform branch and a
    divergent one (units with odd i), with the index computed in the phase before."""
    i = cube.ABSOLUTE_POS
    v = cube.f32(0)
    c = codes[cube.min(i, n - 1)]
    for r in range(rounds):
        v = v + cube.lut16(table, c >> (4 * r))
    if n > 3:
        v = v + cube.lut16(table, c + 1)
    if i % 2 == 1:
        v = v + cube.lut16(table, c + 2)
    v = v + cube.lut16(table, n)  # a uniform index
    if i < n:
        out[i] = v


def exact_fma(a, b, c, dtype) -> np.ndarray:
    """a * b + c rounded once to `dtype`, element by element, from the exact rational value."""
    out = []
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist()):
        q = Fraction(x) * Fraction(y) + Fraction(z)
        near = dtype(float(q))
        around = [np.nextafter(near, dtype(-np.inf)), near, np.nextafter(near, dtype(np.inf))]
        out.append(min(around, key=lambda v: (abs(Fraction(float(v)) - q), int(np.asarray(v).view(
            np.uint32 if dtype is np.float32 else np.uint64)) & 1)))
    return np.array(out, dtype)


def lut_reference(table, codes, n, rounds) -> np.ndarray:
    i = np.arange(n)
    c = codes[:n].astype(np.int64)
    v = sum(table[(c >> (4 * r)) & 15] for r in range(rounds)) + (table[(c + 1) & 15] if n > 3 else 0)
    return (v + np.where(i % 2 == 1, table[(c + 2) & 15], 0) + table[n & 15]).astype(np.float32)


def _check(dtypes=(np.float32, np.float64), units=(16, 24), fused=True) -> None:
    rng = np.random.default_rng(3)
    for dtype in dtypes:
        n = 45
        a, b = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
        c = (-a * b + rng.standard_normal(n).astype(dtype) * dtype(1e-6)).astype(dtype)  # cancels: rounding shows
        out = np.zeros(n, dtype)
        fma_each.launch(CubeCount(1), CubeDim(64), a, b, c, out)
        want = exact_fma(a, b, c, dtype)
        if not fused:  # or a * b rounded, then + c rounded
            want = np.where(out == want, want, (a * b).astype(dtype) + c)
        np.testing.assert_array_equal(out, want)
    table = rng.standard_normal(16).astype(np.float32)
    codes = rng.integers(-2 ** 31, 2 ** 31, 70).astype(np.int32)
    for dim, n in zip(units, (37, 70)):
        out = np.zeros(n, np.float32)
        lut_steps.launch(CubeCount(-(-n // dim)), CubeDim(dim), table, codes, out, n, rounds=3)
        np.testing.assert_allclose(out, lut_reference(table, codes, n, 3), rtol=1e-6, err_msg=f"{dim} units")


def test_fma_and_lut16_on_the_c_target():
    _check()
    got = np.zeros(1, np.float32)
    fma_constants.launch(CubeCount(1), CubeDim(1), got)
    x, y = np.float32(1.0000001), np.float32(-1.0000002)
    np.testing.assert_array_equal(got, exact_fma(np.array([x]), np.array([x]), np.array([y]), np.float32))


def test_lut16_cuts_phases_where_it_can():
    comptime = lut_steps.comptime_values({"rounds": 3})
    kernel = lut_steps.specialize(lut_steps.resolve_dtypes((cube.f32, cube.i32, cube.f32, None), comptime), comptime)
    source = render(kernel, CubeDim(16))
    # the loop's and the uniform branch's; the divergent branch's is a load, the uniform index's one value
    assert source.count("__builtin_shuffle") == 2
    assert "__builtin_shuffle" not in render(kernel, CubeDim(24))  # not a whole number of vectors: loads


def test_fma_and_lut16_on_wgpu():
    from ember.cube.kernel import host_runtime
    from ember.cube.runtime.wgpu import wgpu_available, wgpu_runtime
    ok, why = wgpu_available()
    if not ok:
        pytest.skip(f"wgpu: {why}")
    with host_runtime(wgpu_runtime()):
        _check(dtypes=(np.float32,), units=(16, 64), fused=False)  # WGSL's fma may round twice


def test_fma_folds_and_checks_types():
    t = ir.Type(ir.f32)
    assert evaluate("fma", [3.0, 0.5, -1.0], [t, t, t], t) == 0.5
    assert evaluate("fma", [float("inf"), 1.0, 1.0], [t, t, t], t) is None  # left to the target
    b = ir.Builder("k")
    x, i = b.const(1.0, ir.f32), b.const(1, ir.i32)
    with pytest.raises(ir.IRError, match="fma needs three floats"):
        b.ternary("fma", x, x, b.const(1.0, ir.f64))
    with pytest.raises(ir.IRError, match="fma needs three floats"):
        b.ternary("fma", i, i, i)
    table = b.array_param("t", ir.f16)
    with pytest.raises(ir.IRError, match="lut16 needs a table of 32-bit values"):
        b.lut16(table, i)
