"""Kernels compiled by the C target and run by the CPU runtime, checked against NumPy."""

import math
import re

import ml_dtypes
import numpy as np
import pytest

from ember import cube
from ember.cube.lang import CubeCount, CubeDim
from ember.kernels.common import cube_dtype
from ember.cube.passes import optimize
from ember.cube.targets import cuda as cuda_target
from ember.cube.targets.c import render
from ember.cube.targets.phases import PhaseError

rng = np.random.default_rng(0)


def launch1d(kernel, n, *args, dim=64, **comptime):
    kernel.launch(CubeCount(max(1, -(-n // dim))), CubeDim(dim), *args, **comptime)


@cube.kernel
def affine(x: cube.Array, y: cube.Array):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = x[i] * x.dtype(3) + x.dtype(1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8, np.float16,
                                   ml_dtypes.bfloat16])
@pytest.mark.parametrize("n", [0, 1, 1000])
def test_elementwise_in_every_storage_dtype(dtype, n):
    x = (rng.standard_normal(n) * 10).astype(dtype)
    y = np.zeros_like(x)
    launch1d(affine, n, x, y)
    expected = (x.astype(np.float64) * 3 + 1).astype(dtype)
    tol = {np.float16: 1e-2, ml_dtypes.bfloat16: 2e-2}.get(dtype, 1e-6)
    np.testing.assert_allclose(y.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol)


@cube.kernel
def math_ops(x: cube.Array[cube.f32], out: cube.Array[cube.f32], n: cube.i32):
    i = cube.ABSOLUTE_POS
    if i < n:
        v = x[i]
        p = cube.abs(v) + 0.5
        results = (cube.exp(v), cube.log(p), cube.sqrt(p), cube.rsqrt(p), cube.sin(v), cube.cos(v),
                   cube.tanh(v), cube.erf(v), cube.floor(v), cube.ceil(v), cube.pow(p, v),
                   cube.min(v, 0.25), cube.max(v, 0.25), cube.select(v > 0, v, v * 0.5), v // 0.5,
                   cube.f32(cube.i32(v * 4.0)))
        for k in cube.unroll(range(len(results))):
            out[k * n + i] = results[k]



def test_math_intrinsics():
    import math
    n = 300
    x = rng.uniform(-3, 3, n).astype(np.float32)
    out = np.zeros(16 * n, np.float32)
    launch1d(math_ops, n, x, out, n)
    p = np.abs(x) + np.float32(0.5)
    expected = [np.exp(x), np.log(p), np.sqrt(p), 1 / np.sqrt(p), np.sin(x), np.cos(x), np.tanh(x),
                np.array([math.erf(v) for v in x], np.float32), np.floor(x), np.ceil(x), p ** x,
                np.minimum(x, 0.25), np.maximum(x, 0.25), np.where(x > 0, x, x * 0.5), np.floor(x / 0.5),
                (x * 4).astype(np.int32).astype(np.float32)]
    np.testing.assert_allclose(out.reshape(16, n), np.stack(expected), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_of_special_values_and_masked_scores(dtype):
    """exp on the C target (`ember_expf`, which hands -inf to libmvec as 0 and masks the result): -inf gives
    +0, +inf inf, NaN NaN, the underflow and overflow ranges as NumPy's, finite values within an ulp,
    in vectors of any mix (a causal mask: every other lane -inf), 301 values (a tail)."""
    from ember.kernels.elementwise import unary
    special = np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, -87.5, -103.9, -104.0, -746.0, 88.8, 709.9, 1.5, -3.25],
                       dtype)
    x = rng.standard_normal(301).astype(dtype) * 20
    x[::2] = -np.inf
    x[:special.size] = special
    got, want = unary("exp", x), np.exp(x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[x == -np.inf], 0)
    assert not np.signbit(got[x == -np.inf]).any() and np.isposinf(got[x == np.inf]).all()
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=4 * np.finfo(dtype).smallest_subnormal)


@cube.kernel
def block_sum(x: cube.Array[cube.f32], out: cube.Array[cube.f32], n: cube.i32, units: cube.Comptime[int]):
    """One cube per row: strided partial sums, then a tree in shared memory with barriers."""
    sh = cube.shared(cube.f32, units)
    acc = cube.f32(0)
    for k in range(cube.UNIT_POS, n, units):
        acc += x[cube.CUBE_POS * n + k]
    sh[cube.UNIT_POS] = acc
    cube.sync_units()
    s = units // 2
    while_steps = []
    while s > 0:
        while_steps.append(s)
        s //= 2
    for step in while_steps:
        if cube.UNIT_POS < step:
            sh[cube.UNIT_POS] += sh[cube.UNIT_POS + step]
        cube.sync_units()
    if cube.UNIT_POS == 0:
        out[cube.CUBE_POS] = sh[0]


def test_rejects_while_but_comptime_loops_work():
    with pytest.raises(cube.KernelError, match="While"):
        block_sum.specialize((cube.f32, cube.f32, cube.i32), {"units": 64})


def halvings(n):
    return [n >> (k + 1) for k in range(n.bit_length() - 1)]


@cube.kernel
def tree_sum(x: cube.Array[cube.f32], out: cube.Array[cube.f32], n: cube.i32, units: cube.Comptime[int]):
    sh = cube.shared(cube.f32, units)
    acc = cube.f32(0)
    for k in range(cube.UNIT_POS, n, units):
        acc += x[cube.CUBE_POS * n + k]
    sh[cube.UNIT_POS] = acc
    cube.sync_units()
    for step in halvings(units):  # a plain Python function, run at trace time on a comptime value
        if cube.UNIT_POS < step:
            sh[cube.UNIT_POS] += sh[cube.UNIT_POS + step]
        cube.sync_units()
    if cube.UNIT_POS == 0:
        out[cube.CUBE_POS] = sh[0]


@pytest.mark.parametrize("rows, n", [(1, 1), (7, 1000), (3, 64)])
def test_barriers_split_phases(rows, n):
    x = rng.standard_normal((rows, n)).astype(np.float32)
    out = np.zeros(rows, np.float32)
    tree_sum.launch(CubeCount(rows), CubeDim(32), x, out, n, units=32)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-4, atol=1e-4)


@cube.kernel
def chunked_mean(x: cube.Array[cube.f32], out: cube.Array[cube.f32], n: cube.i32):
    """A barrier inside a uniform loop: every unit reads what all units staged in shared memory."""
    sh = cube.shared(cube.f32, 16)
    total = cube.f32(0)
    for start in range(0, n, 16):
        j = start + cube.UNIT_POS
        sh[cube.UNIT_POS] = x[j] if j < n else cube.f32(0)
        cube.sync_units()
        for k in cube.unroll(range(16)):
            total += sh[k]
        cube.sync_units()
    out[cube.UNIT_POS] = total / cube.f32(n)


def test_barrier_inside_a_uniform_loop():
    x = rng.standard_normal(100).astype(np.float32)
    out = np.zeros(16, np.float32)
    chunked_mean.launch(CubeCount(1), CubeDim(16), x, out, 100)
    np.testing.assert_allclose(out, np.full(16, x.mean()), rtol=1e-5, atol=1e-6)


@cube.kernel
def diverge_then_sync(x: cube.Array[cube.f32]):
    if x[cube.UNIT_POS] > 0:
        cube.sync_units()


def test_barrier_under_divergent_control_is_rejected():
    k = diverge_then_sync.specialize((cube.f32,), {})
    with pytest.raises(PhaseError, match="barrier"):
        render(k, CubeDim(8))


@cube.kernel
def early_exit(x: cube.Array[cube.i32], out: cube.Array[cube.i32]):
    sh = cube.shared(cube.i32, 8)
    sh[cube.UNIT_POS] = x[cube.UNIT_POS]
    cube.sync_units()
    if cube.UNIT_POS % 2 == 1:
        return
    out[cube.UNIT_POS] = sh[7 - cube.UNIT_POS]


def test_return_stops_a_unit_for_later_phases():
    x = np.arange(8, dtype=np.int32)
    out = np.full(8, -1, np.int32)
    early_exit.launch(CubeCount(1), CubeDim(8), x, out)
    np.testing.assert_array_equal(out, [7, -1, 5, -1, 3, -1, 1, -1])


@cube.kernel
def coords(out: cube.Array[cube.i32]):
    i = cube.ABSOLUTE_POS_Y * (cube.CUBE_COUNT_X * cube.CUBE_DIM_X) + cube.ABSOLUTE_POS_X
    out[3 * i] = cube.CUBE_POS_X * 100 + cube.UNIT_POS_X
    out[3 * i + 1] = cube.CUBE_POS_Y * 100 + cube.UNIT_POS_Y
    out[3 * i + 2] = cube.PLANE_DIM + cube.plane_sum(cube.UNIT_POS)


def test_2d_launch_coordinates_and_planes_of_one_unit():
    out = np.zeros(3 * 6 * 4, np.int32)
    coords.launch(CubeCount(3, 2), CubeDim(2, 2), out)
    got = out.reshape(4, 6, 3)
    ys, xs = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    np.testing.assert_array_equal(got[..., 0], (xs // 2) * 100 + xs % 2)
    np.testing.assert_array_equal(got[..., 1], (ys // 2) * 100 + ys % 2)
    np.testing.assert_array_equal(got[..., 2], 1 + (ys % 2) * 2 + xs % 2)


@cube.kernel
def histogram(x: cube.Array[cube.i32], counts: cube.Array[cube.i32], top: cube.Array[cube.f32],
              vals: cube.Array[cube.f32]):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        cube.atomic_add(counts, x[i], 1)
        cube.atomic_max(top, 0, vals[i])


def test_atomics():
    x = rng.integers(0, 5, 1000).astype(np.int32)
    vals = rng.standard_normal(1000).astype(np.float32)
    counts, top = np.zeros(5, np.int32), np.full(1, -np.inf, np.float32)
    launch1d(histogram, 1000, x, counts, top, vals)
    np.testing.assert_array_equal(counts, np.bincount(x, minlength=5))
    assert top[0] == vals.max()


@cube.kernel
def lines(x: cube.Array, y: cube.Array, line: cube.Comptime[int]):
    base = cube.ABSOLUTE_POS * line
    if base < len(x):
        for j in cube.unroll(range(line)):
            y[base + j] = x[base + j] * x.dtype(2) + cube.exp(x[base + j])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vectorized_lines(dtype):
    x = rng.standard_normal(4 * 200).astype(dtype)
    y = np.zeros_like(x)
    launch1d(lines, 200, x, y, line=4)
    np.testing.assert_allclose(y, 2 * x + np.exp(x), rtol=1e-5, atol=1e-6)


@cube.kernel
def hash_mix(a: cube.Array[cube.u32], b: cube.Array[cube.u32], hi: cube.Array[cube.u32]):
    i = cube.ABSOLUTE_POS
    if i < len(a):
        hi[i] = cube.mulhi(a[i], b[i]) ^ (a[i] >> 3)


def test_unsigned_mulhi():
    a = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2**32, 100, dtype=np.uint64).astype(np.uint32)
    hi = np.zeros(100, np.uint32)
    launch1d(hash_mix, 100, a, b, hi)
    expected = ((a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(32)).astype(np.uint32) ^ (a >> 3)
    np.testing.assert_array_equal(hi, expected)


def test_wrong_arguments_are_reported():
    with pytest.raises(cube.KernelError, match="takes 2 runtime arguments"):
        affine.launch(CubeCount(1), CubeDim(1), np.zeros(1))
    with pytest.raises(cube.KernelError, match="NumPy array"):
        affine.launch(CubeCount(1), CubeDim(1), [1.0], np.zeros(1))


def test_read_only_outputs_are_refused():
    x = np.zeros(4, np.float32)
    y = np.zeros(4, np.float32)
    y.flags.writeable = False
    with pytest.raises(cube.KernelError, match="read-only"):
        affine.launch(CubeCount(1), CubeDim(4), x, y)
    x.flags.writeable = False
    affine.launch(CubeCount(1), CubeDim(4), x, np.zeros(4, np.float32))  # read-only inputs are fine


@cube.kernel
def integer_edges(a: cube.Array, b: cube.Array, f: cube.Array[cube.f32], out: cube.Array):
    i = cube.ABSOLUTE_POS
    n = len(a)
    if i < n:
        x, y = a[i], b[i]
        results = (x // y, x % y, x << y, x >> y, x + y, x - y, x * y, -x, cube.abs(x), cube.cast(f[i], x.dtype))
        for k in cube.unroll(range(len(results))):
            out[k * n + i % n] = results[k]  # i % n: a position's remainder, C's operator


def _edge_oracle(x: int, y: int, f: float, bits: int, signed: bool) -> list:
    """The IR's integer semantics (ir.py, "Integer semantics") in plain Python ints."""
    def wrap(v: int) -> int:
        v %= 2 ** bits
        return v - 2 ** bits if signed and v >= 2 ** (bits - 1) else v
    q = 0 if y == 0 else abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
    inside = 0 <= y < bits
    shl = wrap(x << y) if inside else 0
    shr = x >> y if inside else (-1 if x < 0 else 0)
    wide = 64 if bits == 64 else 32
    inside_wide = math.isfinite(f) and -2 ** (wide - 1) <= math.trunc(f) < 2 ** (wide - 1)
    cast = math.trunc(f) if inside_wide else -2 ** (wide - 1)
    rem = 0 if y == 0 else x - y * q
    return [wrap(q), wrap(rem), shl, shr, wrap(x + y), wrap(x - y), wrap(x * y), wrap(-x), wrap(abs(x)),
            wrap(cast)]


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8])
def test_integer_edges_are_defined_and_cuda_renders_the_same_guards(dtype):
    info = np.iinfo(dtype)
    lo, hi, bits = int(info.min), int(info.max), info.bits
    pairs = [(lo, -1), (lo, 0), (hi, 0), (-7, 2), (7, -2), (-7, -2), (hi, 1), (lo, lo), (hi, hi), (1, bits - 1),
             (1, bits), (-5, bits + 3), (-5, -1), (3, -bits), (lo, 2)]
    pairs = [(x, y) for x, y in pairs if lo <= x <= hi and lo <= y <= hi]
    floats = [math.nan, math.inf, -math.inf, 300.0, -1.0, 3e9, -2.0 ** 31, 2.0 ** 31, 1e20, 2.9, -2.9, 127.5,
              -129.0, 40000.0, 0.5]
    a, b = (np.array([p[k] for p in pairs], dtype) for k in (0, 1))
    f = np.array(floats[:len(pairs)] + [0.0] * (len(pairs) - len(floats)), np.float32)
    out = np.zeros(10 * len(a), dtype)
    launch1d(integer_edges, len(a), a, b, f, out)
    want = np.array([_edge_oracle(int(x), int(y), float(v), bits, info.min < 0) for x, y, v in zip(a, b, f)],
                    dtype).T.reshape(-1)
    np.testing.assert_array_equal(out, want)
    # CUDA C shares the C family's rendering: every integer op is the C target's guarded expression
    t = cube_dtype(dtype)
    kernel = optimize(integer_edges.specialize((t, t, cube.f32, t), {}))
    exprs = lambda source: set(re.findall(r"\bv\d+ = (.*);$", source, re.M))
    c_source = render(kernel, CubeDim(64))
    assert "fmod" not in c_source
    c, cuda = exprs(c_source), exprs(cuda_target.render(kernel, CubeDim(64)))
    guarded = {e for e in cuda if re.search(r" / | % |<<|>>|>= ", e)}
    assert len(guarded) >= 5 and guarded <= c
    assert not any(re.fullmatch(r"\(?v\d+ [/%] v\d+\)?", e) for e in cuda)  # no bare division left

