"""Integer `//` and `%` by constant divisors, lowered to multiply-shift (`ember/cube/passes/divmod.py`),
checked exhaustively against NumPy's truncating division on the C target (and wgpu where it runs).

The IR's semantics: truncation toward zero, `x // 0 == x % 0 == 0`, `MIN // -1 == MIN`, `MIN % -1 == 0`.
"""

import numpy as np
import pytest

from ember import cube
from ember.cube import ir
from ember.cube.lang import CubeCount, CubeDim
from ember.cube.passes import optimize

CHUNK = 48  # divisors per compiled kernel (each is one comptime tuple, unrolled)


@cube.kernel
def divmod_by(x: cube.Array, q: cube.Array, r: cube.Array, ds: cube.Comptime):
    i = cube.ABSOLUTE_POS
    n = len(x)
    if i < n:
        v = x[i]
        for k in cube.unroll(range(len(ds))):
            q[k * n + i] = v // x.dtype(ds[k])
            r[k * n + i] = v % x.dtype(ds[k])


def truncating(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """NumPy's quotient and remainder rounded toward zero, with the IR's d == 0 and MIN // -1."""
    if d == 0:
        return np.zeros_like(x), np.zeros_like(x)
    with np.errstate(all="ignore"):
        dv = np.array(d, x.dtype)
        r = np.fmod(x, dv)  # C's remainder: the sign of x
        q = np.where((x == np.iinfo(x.dtype).min) & (d == -1), x, (x - r) // dv) if x.dtype.kind == "i" \
            else (x - r) // dv
    return q.astype(x.dtype), r.astype(x.dtype)


def _values(dtype, rng) -> np.ndarray:
    info = np.iinfo(dtype)
    bits = info.bits
    edges = [0, 1, 2, 3, 7, 1000, info.max, info.max - 1, info.max // 2, info.max // 3]
    edges += [(1 << k) + o for k in range(bits - 1 if info.min else bits) for o in (-1, 0, 1)]
    if info.min:
        edges += [-1, -2, -3, -7, -1000, info.min, info.min + 1, info.min // 2, info.min // 3]
        edges += [-(1 << k) + o for k in range(bits - 1) for o in (-1, 0, 1)]
    edges = [e for e in edges if info.min <= e <= info.max]
    randoms = rng.integers(info.min, info.max, size=300, dtype=dtype, endpoint=True)
    return np.concatenate([np.array(edges, dtype), randoms, (randoms >> rng.integers(1, bits, 300).astype(dtype))])


def _divisors(dtype, rng) -> list:
    info = np.iinfo(dtype)
    ds = list(range(0, 1001)) + [(1 << k) + o for k in range(2, info.bits - (1 if info.min else 0)) for o in (-1, 0, 1)]
    ds += [info.max, info.max - 1] + rng.integers(1, info.max, size=150, dtype=dtype, endpoint=True).tolist()
    if info.min:  # a negative divisor is |d|'s unsigned magic, so 1..1000 is not repeated in full
        ds += [-d for d in ds if d > 100 and d % 7 == 0 or 0 < d <= 100 or d > 1000] + [info.min, info.min + 1]
    return sorted({d for d in ds if info.min <= d <= info.max})


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_division_by_every_constant_matches_numpy(dtype, parallel):
    _check(dtype, parallel)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])  # WGSL has 32-bit integers only
def test_division_on_wgpu(dtype):
    from ember.cube.kernel import host_runtime
    from ember.cube.runtime.wgpu import wgpu_available, wgpu_runtime
    ok, why = wgpu_available()
    if not ok:
        pytest.skip(f"wgpu: {why}")
    with host_runtime(wgpu_runtime()):
        _check(dtype, lambda fn, cases: [fn(c) for c in cases])


def _check(dtype, parallel) -> None:
    rng = np.random.default_rng(np.dtype(dtype).num)
    x = _values(dtype, rng)
    divisors = _divisors(dtype, rng)
    chunks = [tuple(divisors[k:k + CHUNK]) for k in range(0, len(divisors), CHUNK)]

    def run(ds):
        q, r = np.zeros(len(x) * len(ds), dtype), np.zeros(len(x) * len(ds), dtype)
        divmod_by.launch(CubeCount(-(-len(x) // 64)), CubeDim(64), x, q, r, ds=ds)
        return ds, q.reshape(len(ds), -1), r.reshape(len(ds), -1)
    for ds, q, r in parallel(run, chunks):
        for k, d in enumerate(ds):
            eq, er = truncating(x, d)
            bad = np.flatnonzero((q[k] != eq) | (r[k] != er))
            assert not bad.size, (f"{np.dtype(dtype).name} by {d}: x={x[bad[:3]]} gave q={q[k][bad[:3]]}, "
                                  f"r={r[k][bad[:3]]}; expected {eq[bad[:3]]}, {er[bad[:3]]}")
    assert len(divisors) > 1000


@pytest.mark.parametrize("dtype", [ir.i32, ir.u32, ir.i64, ir.u64])
def test_the_pass_leaves_no_division_by_a_constant(dtype):
    b = ir.Builder("k")
    x, y = b.array_param("x", dtype), b.array_param("y", dtype)
    i = b.builtin("absolute_pos")
    v = b.load(x, i)
    for d in (7, 10, 1 << 5, 641):
        b.store(y, i, b.binary("rem", b.binary("div", v, b.const(d, dtype)), b.const(d, dtype)))
    runtime = b.binary("div", v, b.load(x, b.const(0, ir.INDEX)))  # a runtime divisor stays a div
    b.store(y, i, runtime)
    ops = [s.op for s in ir.walk(optimize(b.kernel).body) if isinstance(s, ir.Instr)]
    assert ops.count("div") == 1 and "rem" not in ops
    assert ("mulhi" in ops) == (dtype.itemsize == 4)
