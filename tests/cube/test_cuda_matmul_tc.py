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
from ember.kernels.matmul_tc import (GROUP_TILES, TILES, GroupTile, Tile, cuda_matmul_autotuner, gpu_timer,
                                          group_tiles_run, matmul_group_kernel, matmul_tc, supports)
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


def test_plane_group_ops_are_type_checked():
    b = ir.Builder("k")
    x = b.array_param("x", cube.bf16)
    i = b.const(0, ir.i32)
    for shape in ((64, 12, 16), (32, 64, 16), (64, 264, 16), (64, 64, 8)):
        with pytest.raises(ir.IRError, match="f32 accumulator of 64 x n x 16, n a multiple of 8 up to 256"):
            b.fragment("accumulator", cube.f32, *shape, scope="group")
    with pytest.raises(ir.IRError, match="scope is 'plane' or 'group'"):
        b.fragment("accumulator", cube.f32, 16, 16, 16, scope="block")
    acc = b.fragment("accumulator", cube.f32, 64, 128, 16, scope="group")
    plane = b.fragment("accumulator", cube.f32, 16, 16, 16)
    sa, sb = b.shared(cube.bf16, 64 * 64), b.shared(cube.bf16, 64 * 128)
    with pytest.raises(ir.IRError, match="matrix_mma takes a plane's fragments"):
        b.matrix_mma(acc, plane, plane, acc)
    with pytest.raises(ir.IRError, match="group_mma accumulates into a plane group's fragment"):
        b.group_mma(plane, sa, (i,), sb, (i,), 4096)
    with pytest.raises(ir.IRError, match="two shared arrays of one dtype"):
        b.group_mma(acc, sa, (i,), x, (i,), 4096)
    with pytest.raises(ir.IRError, match="two shared arrays of one dtype"):
        b.group_mma(acc, sa, (i,), b.shared(cube.f16, 64), (i,), 4096)
    with pytest.raises(ir.IRError, match="one or more pairs of indices, got 2 and 1"):
        b.group_mma(acc, sa, (i, i), sb, (i,), 4096)
    with pytest.raises(ir.IRError, match="b_panel .* whole 1024-byte blocks, got 100"):
        b.group_mma(acc, sa, (i,), sb, (i,), 100)
    with pytest.raises(ir.IRError, match="comptime count >= 0"):
        b.group_wait(acc, -1)
    with pytest.raises(ir.IRError, match="group_wait waits for a plane group's accumulator"):
        b.group_wait(plane, 0)
    with pytest.raises(ir.IRError, match="into a float array, got a group's accumulator and y of i32"):
        b.group_store(b.array_param("y", cube.i32), i, i, acc, i, i)
    b.group_mma(acc, sa, (i,), sb, (i,), 4096)
    b.group_wait(acc, 0)
    b.group_store(x, i, i, acc, i, i)
    assert "<group accumulator f32 m64n128k16 row>" in str(b.kernel) and "group_mma" in str(b.kernel)


def _group_kernel(tile: GroupTile, t=cube.bf16):
    from ember.cube.passes import optimize
    kfn = matmul_group_kernel
    comptime = kfn.comptime_values(dict(T=t, bm=tile.bm, bn=tile.bn, stages=tile.stages, group=tile.group))
    return optimize(kfn.specialize(kfn.resolve_dtypes((t, t, t) + (None,) * 5, comptime), comptime))


@pytest.mark.parametrize("tile", GROUP_TILES, ids=str)
def test_the_group_kernel_renders_wgmma_on_aligned_swizzled_operands(tile):
    """What the CUDA target makes of the plane-group kernel: one asynchronous wgmma batch of four 16-deep
    products a step on 1024-byte-aligned shared tiles, the landed copies fenced for the async proxy, and
    as much shared memory as the autotuner's estimate; C and WGSL refuse it by name."""
    from ember.cube.targets import cuda as cuda_target
    kernel = _group_kernel(tile)
    source = cuda_target.render(kernel, cube.CubeDim(tile.units))
    assert cuda_target.uses_group_mma(kernel)
    assert source.count(f"wgmma.mma_async.sync.aligned.m64n{tile.bn}k16.f32.bf16.bf16") == 4
    assert source.count("wgmma.commit_group") == 1 and "wgmma.wait_group.sync.aligned 1;" in source
    assert "extern __shared__ __align__(1024)" in source
    wait = source.index("cp.async.wait_group")
    assert source.index("fence.proxy.async.shared::cta", wait) < source.index("__syncthreads", wait)
    offsets, total = cuda_target.shared_layout(kernel)
    assert all(off % 1024 == 0 for off in offsets.values()) and total == tile.shared_bytes(2)
    with pytest.raises(c_target.CTargetError, match="fragment .* no C rendering; it runs on the CUDA target"):
        c_target.render(kernel, cube.CubeDim(tile.units))


def test_group_tiles_need_sm_90_and_an_nvrtc_that_compiles_sm_90a(monkeypatch):
    from ember.cube.runtime import nvrtc
    from types import SimpleNamespace
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: "13.5")
    assert group_tiles_run(SimpleNamespace(arch=90)) and not group_tiles_run(SimpleNamespace(arch=80))
    assert not group_tiles_run(SimpleNamespace(arch=100))  # sm_100a has no wgmma
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: "11.8")
    assert not group_tiles_run(SimpleNamespace(arch=90))


def test_wgsl_refuses_plane_group_ops_by_name():
    b = ir.Builder("k")
    acc = b.fragment("accumulator", cube.f32, 64, 64, 16, scope="group")
    i = b.const(0, ir.i32)
    b.group_mma(acc, b.shared(cube.f16, 4096), (i,), b.shared(cube.f16, 4096), (i,), 4096)
    with pytest.raises(wgsl.WgslTargetError, match="fragment .* no WGSL rendering"):
        wgsl.render(b.kernel, cube.CubeDim(128))


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
    group = (GROUP_TILES[0], GroupTile(64, 128, 4)) if dtype is not np.float32 and group_tiles_run(rt) else ()
    for tile in (TILES[0], Tile(64, 128, 32, 32, 64, 4)) + group:
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
    with pytest.raises(DTypeError, match="plane-group tiles take f16 or bf16"):
        matmul_tc(rt, rt.to_device(np.ones((4, 8), np.float32)), rt.to_device(np.ones((8, 8), np.float32)),
                  GROUP_TILES[0])


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



@gpu
def test_a_step_recorded_while_its_matmul_tunes_keeps_only_the_winners_launch_and_output(rt):
    """The tuner times its candidates outside the enclosing `record_launches` block: before, every timing
    run's output stayed alive (noted as the step's allocation) until the block ended: the first GPT step
    held 29 score-sized outputs at once (17.8 GB at its peak, 9.96 GB from the second step on)."""
    tuner = cuda_matmul_autotuner(rt, level="balanced")
    tuner.cache = None  # nothing persisted: this call tunes
    a = rt.to_device(np.ones((512, 512), BF16))
    before = rt.pool.stats().in_use
    with rt.record_launches() as launches:
        out = tuner(a, a)
        assert rt.pool.stats().in_use - before == out.nbytes  # the timing runs' outputs are gone already
    assert len(launches) == 1 and launches.allocations == [out]

@pytest.mark.parametrize("tile", [TILES[0], TILES[3]], ids=str)
@pytest.mark.parametrize("t", [cube.bf16, cube.f32], ids=str)
def test_tile_shared_bytes_is_what_the_rendered_kernel_declares(tile, t):
    """The autotuner leaves out tiles whose f32 (tf32) variant exceeds the device's shared memory (the
    256x128x64 tile needs 311 KiB as f32, an H200 allows 227): its estimate against the renderer's."""
    from ember.kernels.matmul_tc import matmul_tc_kernel as kfn
    from ember.cube.passes import optimize
    from ember.cube.targets import cuda as cuda_target
    comptime = kfn.comptime_values(dict(T=t, bm=tile.bm, bn=tile.bn, bk=tile.bk, wm=tile.wm, wn=tile.wn,
                                        stages=tile.stages, group=tile.group))
    kernel = kfn.specialize(kfn.resolve_dtypes((t, t, t) + (None,) * 5, comptime), comptime)
    assert tile.shared_bytes(t.itemsize) == cuda_target.shared_bytes(optimize(kernel))
