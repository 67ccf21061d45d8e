"""Matrix fragments and the tensor-core matmul: IR checks and target refusals here, products on a GPU
(scripts/gpu_check.sh runs those) against a float64 NumPy product of the same rounded inputs."""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest

from ember import cube
from ember.cube import ir
from ember.cube.frontend import matrix as mx
from ember.cube.kernels.matmul_tc import TILES, Tile, gpu_timer, matmul_tc, supports
from ember.cube.runtime.cuda import cuda_available
from ember.cube.targets import c as c_target, wgsl
from ember.errors import DTypeError, ShapeError

BF16 = ml_dtypes.bfloat16


@cube.kernel
def one_tile(a: cube.Array, b: cube.Array, c: cube.Array, T: cube.Comptime, fk: cube.Comptime[int]):
    """c (16 x 16, f32) = a (16 x fk, row-major) @ b (fk x 16, column-major) + c."""
    fa = mx.fragment("a", T, 16, 16, fk)
    fb = mx.fragment("b", T, 16, 16, fk, "col")
    acc = mx.fragment("accumulator", cube.f32, 16, 16, fk)
    mx.load(acc, c, 0, 16)
    mx.load(fa, a, 0, fk)
    mx.load(fb, b, 0, fk)
    mx.mma(acc, fa, fb, acc)
    mx.store(c, 0, 16, acc)


def test_fragment_ops_are_type_checked():
    b = ir.Builder("k")
    x = b.array_param("x", cube.bf16)
    with pytest.raises(ir.IRError, match="no f16 fragment of shape m=16 n=16 k=8"):
        b.fragment("a", cube.f16, 16, 16, 8)
    with pytest.raises(ir.IRError, match="accumulator fragment holds f32"):
        b.fragment("accumulator", cube.bf16, 16, 16, 16)
    fa = b.fragment("a", cube.bf16, 16, 16, 16)
    acc = b.fragment("accumulator", cube.f32, 16, 16, 16)
    with pytest.raises(ir.IRError, match="takes \\(accumulator, a, b, accumulator\\)"):
        b.matrix_mma(acc, fa, fa, acc)
    with pytest.raises(ir.IRError, match="cannot load a f32 fragment from x of bf16"):
        b.matrix_load(acc, x, b.const(0, ir.i32), b.const(16, ir.i32))
    s = b.shared(cube.bf16, 64)
    with pytest.raises(ir.IRError, match="moves 4, 8 or 16 bytes, got 3 x bf16"):
        b.copy_async(s, b.const(0, ir.i32), x, b.const(0, ir.i32), 3, b.const(True, cube.bool_))
    b.copy_async(s, b.const(0, ir.i32), x, b.const(0, ir.i32), 8, b.const(True, cube.bool_))
    assert "copy_async" in str(b.kernel) and "<a bf16 m16n16k16 row>" in str(b.kernel)


def test_c_and_wgsl_targets_refuse_fragments_by_name():
    kernel = one_tile.specialize((cube.bf16, cube.bf16, cube.f32), one_tile.comptime_values(dict(T=cube.bf16, fk=16)))
    with pytest.raises(c_target.CTargetError, match="fragment .* no C rendering; it runs on the CUDA target"):
        c_target.render(kernel, cube.CubeDim(32))
    kernel = one_tile.specialize((cube.f32, cube.f32, cube.f32), one_tile.comptime_values(dict(T=cube.f32, fk=8)))
    with pytest.raises(wgsl.WgslTargetError, match="fragment .* no WGSL rendering"):
        wgsl.render(kernel, cube.CubeDim(32))


def test_supports_names_what_does_not_fit():
    assert supports((64, 32), (32, 16), BF16, tf32=False) == ""
    assert "f32 with tf32 allowed" in supports((64, 32), (32, 16), np.float32, tf32=False)
    assert supports((64, 32), (32, 16), np.float32, tf32=True) == ""
    assert "multiples of 8 for bf16" in supports((64, 30), (30, 16), BF16, tf32=False)
    assert "multiples of 4 for f32" in supports((64, 32), (32, 6), np.float32, tf32=True)
    assert "inner dims differ" in supports((64, 32), (16, 16), BF16, tf32=False)


# ----------------------------------------------------------------------------------------------
# On a GPU

gpu = pytest.mark.skipif(not cuda_available()[0], reason=f"no CUDA GPU here: {cuda_available()[1]}")
TOLERANCE = {np.float16: 2e-3, BF16: 1e-2, np.float32: 3e-3}  # output rounding; tf32 inputs for f32


@pytest.fixture(scope="module")
def rt():
    from ember.cube.runtime.cuda import cuda_runtime
    return cuda_runtime()


def reference(a: np.ndarray, b: np.ndarray, tf32: bool) -> np.ndarray:
    if tf32:  # the tensor cores see 10-bit mantissas (rounded to nearest, ties away)
        a, b = (_tf32(x) for x in (a, b))
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _tf32(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@gpu
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
def test_one_fragment_product(rt, dtype):
    rng = np.random.default_rng(0)
    fk = 8 if dtype is np.float32 else 16
    a = rng.standard_normal((16, fk)).astype(dtype)
    b = rng.standard_normal((fk, 16)).astype(dtype)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    out = c.copy()
    rt.launch(one_tile, cube.CubeCount(1), cube.CubeDim(32), (a, np.ascontiguousarray(b.T), out),
              dict(T=ir.DTYPES[{np.float16: "f16", BF16: "bf16", np.float32: "f32"}[dtype]], fk=fk))
    want = reference(a, b, dtype is np.float32) + c
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)


@gpu
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float32])
@pytest.mark.parametrize("shape", [((1, 8), (8, 8)), ((130, 40), (40, 136)), ((128, 64), (64, 128)),
                                   ((300, 8), (8, 264)), ((3, 77, 24), (24, 40)), ((64, 16), (2, 16, 8)),
                                   ((5, 0), (0, 16))])
def test_matmul_tc_matches_numpy(rt, dtype, shape):
    rng = np.random.default_rng(len(str(shape)))
    a = rng.standard_normal(shape[0]).astype(dtype)
    b = rng.standard_normal(shape[1]).astype(dtype)
    for tile in (TILES[0], Tile(64, 128, 32, 32, 64, 4)):
        out = matmul_tc(rt, rt.to_device(a), rt.to_device(b), tile).numpy()
        want = reference(a, b, dtype is np.float32)
        assert out.shape == want.shape and out.dtype == np.dtype(dtype)
        scale = max(1.0, float(np.abs(want).max(initial=0)))
        assert np.abs(out.astype(np.float64) - want).max(initial=0) <= TOLERANCE[dtype] * scale


@gpu
def test_matmul_tc_refuses_what_it_cannot_run(rt):
    a = rt.to_device(np.ones((4, 6), BF16))
    with pytest.raises(ShapeError, match="multiples of 8"):
        matmul_tc(rt, a, rt.to_device(np.ones((6, 8), BF16)))
    with pytest.raises(DTypeError, match="share a dtype"):
        matmul_tc(rt, a, rt.to_device(np.ones((6, 8), np.float16)))
    with pytest.raises(DTypeError, match="tf32 allowed"):
        matmul_tc(rt, rt.to_device(np.ones((4, 8), np.float32)), rt.to_device(np.ones((8, 8), np.float32)), tf32=False)


@gpu
def test_autotune_timer_counts_the_device_time_not_the_host_time(rt):
    """A candidate with 5 ms of host time before a small product times as the product's device time (what a
    replayed plan pays): timed as calls queued back to back, the GPU would idle through the host's time."""
    a = rt.to_device(np.ones((256, 256), BF16))

    def slow_host():
        time.sleep(0.005)
        return matmul_tc(rt, a, a)
    seconds = gpu_timer(rt)("slow_host", slow_host)
    assert 0 < seconds < 0.001


@pytest.mark.parametrize("tile", [TILES[0], TILES[3]], ids=str)
@pytest.mark.parametrize("t", [cube.bf16, cube.f32], ids=str)
def test_tile_shared_bytes_is_what_the_rendered_kernel_declares(tile, t):
    """The autotuner leaves out tiles whose f32 (tf32) variant exceeds the device's shared memory (the
    256x128x64 tile needs 311 KiB as f32, an H200 allows 227): its estimate against the renderer's."""
    from ember.cube.kernels.matmul_tc import matmul_tc_kernel as kfn
    from ember.cube.passes import optimize
    from ember.cube.targets import cuda as cuda_target
    comptime = kfn.comptime_values(dict(T=t, bm=tile.bm, bn=tile.bn, bk=tile.bk, wm=tile.wm, wn=tile.wn,
                                        stages=tile.stages, group=tile.group))
    kernel = kfn.specialize(kfn.resolve_dtypes((t, t, t) + (None,) * 5, comptime), comptime)
    assert tile.shared_bytes(t.itemsize) == cuda_target.shared_bytes(optimize(kernel))
