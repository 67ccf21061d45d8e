"""The CUDA runtime: argument packing, launch checks, errors and copies against a fake driver (no GPU
needed), then real launches on a GPU when one is here (scripts/gpu_check.sh runs them)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from ember import cube
from ember.cube.passes import optimize
from ember.cube.runtime import cuda as rt_cuda
from ember.cube.runtime.cuda import (CudaError, CudaLaunchError, CudaRuntime, DeviceLimits, check, check_launch,
                                     ParameterBlock, cuda_available, host_span)
from ember.cube.runtime.nvrtc import Binary
from ember.errors import DeviceError

from .device_cases import axpy, check_atomics, check_index_bounds, check_three_dimensional_coordinates, planes, shifted_lines


@cube.kernel
def mixed(x: cube.Array, flag: cube.bool_, h: cube.Scalar["T"], n: cube.i64, T: cube.Comptime):
    if flag:
        x[0] = cube.cast(h, x.dtype) + cube.cast(n, x.dtype)


# ----------------------------------------------------------------------------------------------
# Without a GPU

def test_arguments_are_packed_as_the_kernel_declares_them():
    kernel = mixed.specialize((cube.f16, cube.bool_, cube.f16, cube.i64), {"T": cube.f16})
    block = ParameterBlock(kernel.params)
    params = (ctypes.c_void_p * 5).from_address(block.pack([0xDEAD0000, 12, True, 1.5, -(2**40)]))
    read = lambda i, ctype: ctypes.cast(params[i], ctypes.POINTER(ctype)).contents.value
    assert read(0, ctypes.c_uint64) == 0xDEAD0000 and read(1, ctypes.c_int32) == 12  # pointer, then len
    assert read(2, ctypes.c_uint8) == 1                                                  # bool: one byte
    assert read(3, ctypes.c_float) == 1.5                                                # f16 scalar: as f32
    assert read(4, ctypes.c_int64) == -(2**40)
    # The slots are reused by the next launch: new values, numpy scalars, and values that wrap as in C.
    block.pack([0xBEEF, np.int32(7), np.bool_(False), np.float32(-2.5), np.int64(3)])
    assert (read(0, ctypes.c_uint64), read(1, ctypes.c_int32), read(2, ctypes.c_uint8)) == (0xBEEF, 7, 0)
    assert (read(3, ctypes.c_float), read(4, ctypes.c_int64)) == (-2.5, 3)
    block.pack([1, 2**31, 1, 1e300, 2**63])
    assert (read(1, ctypes.c_int32), read(3, ctypes.c_float), read(4, ctypes.c_int64)) == (-(2**31), np.inf, -(2**63))
    with pytest.raises(TypeError):
        block.pack([1, 2, True, "x", 3])


def test_launch_shapes_beyond_the_device_are_refused_with_the_kernel_named():
    limits = DeviceLimits()
    check_launch("ember_k", cube.CubeCount(2**20, 5), cube.CubeDim(32, 32), 48 << 10, limits)  # fits
    with pytest.raises(CudaLaunchError, match=r"ember_k launched with CubeCount\(1, 1, 1\) x CubeDim\(2048, 1, 1\)"
                                              r".*2048 units, the device allows 1024"):
        check_launch("ember_k", cube.CubeCount(1), cube.CubeDim(2048), 0, limits)
    with pytest.raises(CudaLaunchError, match=r"CubeCount.y = 70000 is outside 0..65535"):
        check_launch("ember_k", cube.CubeCount(1, 70000), cube.CubeDim(1), 0, limits)
    with pytest.raises(CudaLaunchError, match=r"CubeDim.z = 65 is outside 1..64"):
        check_launch("ember_k", cube.CubeCount(1), cube.CubeDim(1, 1, 65), 0, limits)
    with pytest.raises(CudaLaunchError, match=r"needs 60000 bytes of shared memory, the device has 49152"):
        check_launch("ember_k", cube.CubeCount(1), cube.CubeDim(1), 60000, limits)


def test_driver_errors_name_the_call_the_error_and_the_launch():
    driver = FakeDriver()
    assert check(driver, (0, "value"), "cuThing") == (0, "value")
    with pytest.raises(CudaError, match=r"cuLaunchKernel failed: CUDA_ERROR_2 \(error 2 text\) in kernel k") as e:
        check(driver, (2,), "cuLaunchKernel", "in kernel k")
    assert isinstance(e.value, DeviceError)
    with pytest.raises(CudaError, match="newer than the driver"):
        check(driver, (222,), "cuModuleLoadData")


def test_host_span_covers_strided_views():
    a = np.zeros((4, 6), np.float32)
    assert host_span(a) == (0, 96)
    assert host_span(a.T) == (0, 96)
    assert host_span(a[::-1]) == (-72, 96)                    # the first element is the last row
    assert host_span(a[:, ::2]) == (0, 24 * 3 + 8 * 2 + 4)
    assert host_span(np.broadcast_to(a[:1], (3, 6))) == (0, 24)
    assert host_span(a[:0]) == (0, 0)


def test_plane_group_kernels_compile_for_sm_90a_and_only_run_on_sm_90(monkeypatch):
    """wgmma exists on sm_90a alone: the runtime compiles such kernels for it, and another device names
    why it cannot run them instead of failing in NVRTC or the driver."""
    from ember.kernels.matmul_tc import GROUP_TILES, matmul_group_kernel
    calls = []
    monkeypatch.setattr(rt_cuda, "compile_cuda",
                        lambda source, name, arch, **kw: calls.append((name, arch, kw)) or Binary("cubin", b"//", arch))
    tile = GROUP_TILES[0]
    a = np.zeros((64, 64), ml_dtypes.bfloat16)
    args = (a, a, np.zeros((64, 64), ml_dtypes.bfloat16), 64, 64, 64, 0, 0)
    comptime = dict(T=cube.bf16, bm=tile.bm, bn=tile.bn, stages=tile.stages, group=tile.group)
    CudaRuntime(0, driver=FakeDriver()).launch(matmul_group_kernel, cube.CubeCount(1), cube.CubeDim(tile.units), args,
                                              comptime)
    assert [(name, arch, kw["specific"]) for name, arch, kw in calls] == [("ember_matmul_group_kernel", 90, True)]
    older = FakeDriver()
    older.attributes["COMPUTE_CAPABILITY_MAJOR"] = 8
    with pytest.raises(CudaError, match="ember_matmul_group_kernel uses plane-group products .* this device is sm_80"):
        CudaRuntime(0, driver=older).launch(matmul_group_kernel, cube.CubeCount(1), cube.CubeDim(tile.units), args,
                                            comptime)
    CudaRuntime(0, driver=FakeDriver()).launch(axpy, cube.CubeCount(1), cube.CubeDim(4),
                                              (np.ones(4, np.float32), np.ones(4, np.float32), 1.0), {})
    assert calls[-1][2]["specific"] is False


def test_a_launch_through_a_fake_driver(monkeypatch):
    """Copies, the launch call and the copy back of written NumPy arrays, without a GPU."""
    monkeypatch.setattr(rt_cuda, "compile_cuda", lambda source, name, arch, **kw: Binary("ptx", b"//", arch))
    driver = FakeDriver()
    rt = CudaRuntime(0, driver=driver)
    assert rt.arch == 90 and rt.limits.max_shared == 232448
    x = np.arange(12, dtype=np.float32)[::-2]          # a strided view: read in place through its span
    y = np.zeros(6, np.float32)                        # written: copied back
    rt.launch(axpy, cube.CubeCount(2), cube.CubeDim(4), (x, y, 3.0), {})
    (launch,) = driver.launches
    assert launch["grid"] == (2, 1, 1) and launch["block"] == (4, 1, 1) and launch["shared"] == 0
    x_ptr, x_len, y_ptr, y_len, a = launch["args"]
    assert (x_len, y_len, a) == (6, 6, 3.0)
    # The kernel's x pointer is the view's first element: device memory holds 11, 9, ..., 1 from there.
    assert [driver.read_f32(x_ptr - 4 * k * 2) for k in range(6)] == [11, 9, 7, 5, 3, 1]
    np.testing.assert_array_equal(y, np.full(6, 7, np.float32))  # the fake kernel wrote 7s
    with pytest.raises(CudaLaunchError, match="ember_axpy"):
        rt.launch(axpy, cube.CubeCount(1, 70000), cube.CubeDim(4), (x, y, 3.0), {})
    assert rt.pool.stats().in_use == 0  # staging copies went back to the pool


def test_out_of_memory_gives_back_cached_pages_retries_once_then_names_the_sizes():
    driver = FakeDriver(capacity=8 << 20)
    rt = CudaRuntime(0, driver=driver)
    rt.pool = rt_cuda.MemoryPool(rt._allocate, rt._release, page_size=1)  # pages of just the size asked
    kept = rt.empty(3 << 20, np.uint8)
    cached = rt.empty(4 << 20, np.uint8)
    cached.free()                         # its page stays cached in the pool: 7+ MiB of 8 reserved
    assert rt.pool.stats().reserved > 6 << 20
    again = rt.empty(4 << 20, np.uint8)   # reused from the cache, no allocation
    again.free()
    big = rt.empty(5 << 20, np.uint8)     # needs the cached page given back first, then fits
    assert rt.pool.stats().in_use == rt.pool.stats().reserved == 8 << 20
    with pytest.raises(rt_cuda.CudaOutOfMemoryError,
                       match=r"GPU 0 is out of memory: asked for 6291456 bytes; ember's pool has \d+ bytes "
                             r"reserved, \d+ in use") as e:
        rt.empty(6 << 20, np.uint8)
    assert isinstance(e.value, DeviceError)
    kept.free(), big.free()


def test_small_read_only_arrays_are_copied_once_and_kept_by_value(monkeypatch):
    monkeypatch.setattr(rt_cuda, "compile_cuda", lambda source, name, arch, **kw: Binary("ptx", b"//", arch))
    driver = FakeDriver()
    copies = []
    driver.cuMemcpyHtoDAsync = lambda dst, src, n, stream: copies.append(n) or driver._copy(dst, src, n, stream)
    rt = CudaRuntime(0, driver=driver)
    y = rt.empty(6, np.float32)
    for x in (np.arange(6, dtype=np.float32), np.arange(6, dtype=np.float32), np.ones(6, np.float32)):
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, y, 1.0), {})
    assert copies == [24, 24]  # the second arange is the first one's device copy
    first, second, third = (launch["args"][0] for launch in driver.launches)
    assert first == second != third and driver.read_f32(third) == 1.0


def test_a_recorded_launch_binds_and_replays_on_new_arrays(monkeypatch):
    """`record_launches` notes each launch; `bind` marshals it once (a NumPy layout argument as its device
    constant) and a replay launches with the new arrays' addresses in the open slots, the rest unchanged.
    What a fusion plan's steps replay on CUDA (ember/backend/cube/fused/launches.py, StepReplay)."""
    monkeypatch.setattr(rt_cuda, "compile_cuda", lambda source, name, arch, **kw: Binary("ptx", b"//", arch))
    driver = FakeDriver()
    rt = CudaRuntime(0, driver=driver)
    x, y = rt.to_device(np.arange(6, dtype=np.float32)), rt.empty(6, np.float32)
    with rt.record_launches() as launches:
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, y, 2.0), {})
    rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, y, 2.0), {})  # outside the block: not recorded
    (launch,) = launches
    assert launch.args == (x, y, 2.0) and launch.count == cube.CubeCount(1)
    bound = rt.bind(launch, open_slots=(1,))
    z = rt.empty(6, np.float32)
    bound.replay([z[::-1]])  # a view: its first element's address
    assert driver.launches[-1]["args"] == [x.ptr, 6, z.ptr + 20, 6, 2.0]
    assert driver.launches[-1]["grid"] == (1, 1, 1) and driver.launches[-1]["block"] == (8, 1, 1)
    host = np.arange(6, dtype=np.float32)
    with rt.record_launches() as launches:
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (host, y, 2.0), {})
    rt.bind(launches[0], open_slots=(1,)).replay([z])  # the read-only NumPy x: kept as its device constant
    assert driver.launches[-1]["args"][2] == z.ptr and driver.read_f32(driver.launches[-1]["args"][0] + 4) == 1.0
    assert rt.bind(launches[0], open_slots=(0, 1)) is None  # a NumPy array cannot fill an open slot
    with rt.record_launches() as launches:
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, np.zeros(6, np.float32), 2.0), {})
    assert rt.bind(launches[0], open_slots=(0,)) is None  # a NumPy array the kernel writes: not replayable


def test_a_recorded_cublas_gemm_binds_and_replays_with_new_addresses():
    """A cuBLAS GEMM is recorded like a launch (args a, b, out) and binds itself: a replay calls
    cublasGemmStridedBatchedEx with the new arrays' addresses where the recorded ones' were (the
    operands are swapped in the call: b at 7, a at 11, the output at 16), the rest unchanged."""
    from ember.cube.runtime.cublas import Gemm
    calls = []
    lib = SimpleNamespace(cublasSetStream_v2=lambda handle, stream: calls.append(("stream", stream)) or 0,
                          cublasGemmStridedBatchedEx=lambda *args: calls.append(args) or 0)
    rt = CudaRuntime(0, driver=FakeDriver())
    rt.stream = 7  # the fake driver's stream is a name; the call passes the stream's handle as an int
    a, b, out = rt.empty((4, 8), np.float32), rt.empty((8, 2), np.float32), rt.empty((4, 2), np.float32)
    args = tuple(range(23))
    gemm = Gemm(rt, lib, args, "4x8 @ 8x2")
    with rt.record_launches() as launches:
        rt.recorded(gemm, None, (a, b, out))
    a2, out2 = rt.empty((4, 8), np.float32), rt.empty((4, 2), np.float32)
    rt.bind(launches[0], open_slots=(0, 2)).replay((a2[1:], out2))  # b stays: a constant operand
    stream, call = calls
    assert stream == ("stream", 7)
    expected = list(args)
    expected[11], expected[16] = a2.ptr + 32, out2.ptr
    assert list(call) == expected
    lib.cublasGemmStridedBatchedEx = lambda *args: 13
    with pytest.raises(RuntimeError, match=r"cuBLAS GEMM \(4x8 @ 8x2\) failed: status 13"):
        gemm.call(args)


def test_a_view_step_replays_as_the_same_view_of_a_new_input():
    """A movement step that launched nothing and gave a view of its device input (`launches.ViewReplay`):
    replayed as that view (shape, strides, offset from the input's) of a new input; copies, NumPy
    inputs and runs that launched something are not views."""
    from ember.backend.cube.fused.launches import ViewReplay
    rt = CudaRuntime(0, driver=FakeDriver())
    x = rt.empty((4, 6), np.float32)
    view = x[1:, ::2].T
    replay = ViewReplay.of([], [x], [view], rt)
    y = rt.empty((4, 6), np.float32)
    (again,) = replay([y])
    assert (again.shape, again.strides, again.ptr - y.ptr) == (view.shape, view.strides, view.ptr - x.ptr)
    assert again.owner is y and isinstance(again, rt_cuda.CudaArray)
    assert ViewReplay.of([], [x], [rt.empty((6, 4), np.float32)], rt) is None    # a copy: another allocation
    assert ViewReplay.of(["a launch"], [x], [view], rt) is None
    host = np.zeros((4, 6), np.float32)
    assert ViewReplay.of([], [host], [host.T], rt) is None                       # NumPy views cost little


def test_a_captured_graph_keeps_what_it_writes_and_replays(monkeypatch):
    monkeypatch.setattr(rt_cuda, "compile_cuda", lambda source, name, arch, **kw: Binary("ptx", b"//", arch))
    driver = FakeDriver()
    rt = CudaRuntime(0, driver=driver)
    x = rt.to_device(np.arange(6, dtype=np.float32))

    def step():
        y = rt.empty(6, np.float32)
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, y, 2.0), {})
        return y

    graph = rt.capture(step)
    assert driver.captured == 1 and len(driver.launches) == 2  # the warm-up, then the launch captured
    pinned = rt.memory_stats().in_use
    import gc
    gc.collect()
    assert rt.memory_stats().in_use == pinned  # the captured output stays while the graph does
    graph.replay(), graph.replay()
    assert driver.replays == 2 and graph.result.shape == (6,)
    graph.close()
    with pytest.raises(CudaError, match="closed"):
        graph.replay()
    del graph
    gc.collect()
    assert rt.memory_stats().in_use < pinned

    def waits():
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, np.zeros(6, np.float32), 2.0), {})

    driver.fail_sync_while_capturing = True
    with pytest.raises(CudaError, match="a copy from the host cannot be captured"):
        rt.capture(waits)
    assert not driver.capturing  # the stream left capture mode


def test_a_graph_that_keeps_nothing_leaves_its_arrays_to_the_caller_and_over_wraps_a_slice(monkeypatch):
    monkeypatch.setattr(rt_cuda, "compile_cuda", lambda source, name, arch, **kw: Binary("ptx", b"//", arch))
    driver = FakeDriver()
    rt = CudaRuntime(0, driver=driver)
    x = rt.to_device(np.arange(6, dtype=np.float32))
    rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, rt.empty(6, np.float32), 2.0), {})  # layouts on the device
    import gc
    gc.collect()
    before = rt.memory_stats().in_use

    def step():
        y = rt.empty(6, np.float32)
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(8), (x, y, 2.0), {})
        return y

    graph = rt.capture(step, warmup=False, keep=False)
    assert len(driver.launches) == 2 and driver.replays == 0  # the first launch, then the one captured (not run)
    y, graph.result = graph.result, None
    assert rt.memory_stats().in_use > before
    del y
    gc.collect()
    assert rt.memory_stats().in_use == before  # the graph holds its output no more than a plain run does
    graph.replay()
    assert driver.replays == 1
    piece = rt.reserve(24)
    z = rt.over(piece, (2, 3), np.float32)
    assert z.ptr == int(piece.buffer) + piece.offset and rt.memory_of(z) is piece and rt.memory_of(z.T) is piece
    del z
    gc.collect()
    assert rt.memory_stats().in_use == before  # an array over a slice gives it back when it goes


def test_views_share_memory_and_read_through_their_strides():
    rt = CudaRuntime(0, driver=FakeDriver())
    host = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    a = rt.to_device(host)
    for view, want in ((a.T, host.T), (a[1:, ::-2], host[1:, ::-2]), (a[2], host[2]), (a[:, None, 1], host[:, None, 1]),
                       (a[:0], host[:0])):
        np.testing.assert_array_equal(view.numpy(), want)
    assert a[1:].ptr == a.ptr + 24 and a.T.ptr == a.ptr and a[1:, ::-2].ptr == a.ptr + 4 * 11
    view = a[1:]
    del a
    np.testing.assert_array_equal(view.numpy(), host[1:])  # the owner's memory lives while a view does
    assert rt.memory_stats().in_use > 0
    del view
    assert rt.memory_stats().in_use == 0 and rt.memory_cleanup() > 0


def test_cublas_reads_rows_and_transposed_views_in_place():
    from ember.cube.runtime.arguments import DeviceArray
    from ember.cube.runtime.cublas import operand_layout
    w = DeviceArray(None, (3072, 768), np.float32)
    assert operand_layout(w, 3072, 768) == (0, 768, 0)          # rows: no transpose, ld = columns
    assert operand_layout(w.T, 768, 3072) == (1, 768, 0)        # a transposed view: the transpose flag
    assert operand_layout(w[:, 256:512], 3072, 256) == (0, 768, 0)  # a slice of wider rows: ld = the row step
    batch = DeviceArray(None, (4, 64, 32), np.float32)
    assert operand_layout(batch.transpose(0, 2, 1), 32, 64) == (1, 32, 2048)
    assert operand_layout(batch.transpose(1, 0, 2), 4, 32) == (0, 2048, 32)  # matrices 32 elements apart
    assert operand_layout(w[:, ::2], 3072, 384) is None                 # strided columns: a copy
    assert operand_layout(w[::-1], 3072, 768) is None                   # negative strides: a copy
    assert operand_layout(DeviceArray(None, (1, 768), np.float32).broadcast_to((5, 1, 768)), 1, 768) == (0, 768, 0)


def test_a_batched_product_output_follows_the_batch_an_empty_one_included():
    from ember.cube.runtime.arguments import DeviceArray
    from ember.cube.runtime.cublas import product_output
    rt = SimpleNamespace(empty=lambda shape, dtype: DeviceArray(None, shape, dtype))
    a, b = DeviceArray(None, (5, 2, 3), np.float32), DeviceArray(None, (3, 4), np.float32)
    out, (m, n, k, batch, sa, sb) = product_output(rt, a, b)
    assert out.shape == (5, 2, 4) and (m, n, k, batch, sa, sb) == (2, 4, 3, 5, 6, 0)
    out, (*_, batch, sa, sb) = product_output(rt, DeviceArray(None, (1, 2, 3), np.float32),
                                              DeviceArray(None, (4, 3, 4), np.float32))
    assert out.shape == (4, 2, 4) and (batch, sa, sb) == (4, 0, 12)  # a's one matrix broadcast
    out, (*_, batch, _, _) = product_output(rt, DeviceArray(None, (0, 2, 3), np.float32), b)
    assert out.shape == (0, 2, 4) and out.size == 0 and batch == 0  # no matrices: nothing to call cuBLAS on


class FakeDriver:
    """Enough of cuda.bindings.driver for the runtime: host memory stands in for the GPU's."""

    def __init__(self, capacity: int = 1 << 40) -> None:
        self.capacity = capacity  # bytes cuMemAlloc hands out before it answers out-of-memory
        names = ["COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR", "MAX_THREADS_PER_BLOCK",
                 "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z", "MAX_GRID_DIM_X", "MAX_GRID_DIM_Y",
                 "MAX_GRID_DIM_Z", "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"]
        values = [9, 0, 1024, 1024, 1024, 64, 2**31 - 1, 65535, 65535, 232448]
        self.CUdevice_attribute = SimpleNamespace(**{f"CU_DEVICE_ATTRIBUTE_{n}": n for n in names})
        self.attributes = dict(zip(names, values))
        self.CUstream_flags = SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
        self.CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED=2)
        self.CUfunction_attribute = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8)
        self.memory: dict = {}
        self.host: list = []
        self.capturing = self.fail_sync_while_capturing = False
        self.captured = self.replays = 0
        self.launches: list = []

    def cuGetErrorName(self, status):
        return 0, b"CUDA_ERROR_UNSUPPORTED_PTX_VERSION" if status == 222 else f"CUDA_ERROR_{status}".encode()

    def cuGetErrorString(self, status):
        return 0, f"error {status} text".encode()

    def cuInit(self, flags):
        return (0,)

    def cuDeviceGet(self, index):
        return 0, index

    def cuDeviceGetAttribute(self, attribute, device):
        return 0, self.attributes[attribute]

    def cuDeviceGetName(self, length, device):
        return 0, b"Fake GPU\0\0"

    def cuDeviceTotalMem(self, device):
        return 0, self.capacity

    def cuDevicePrimaryCtxRetain(self, device):
        return 0, "context"

    def cuCtxSetCurrent(self, context):
        return (0,)

    def cuStreamCreate(self, flags):
        return 0, "stream"

    def cuStreamSynchronize(self, stream):
        return (900,) if self.capturing and self.fail_sync_while_capturing else (0,)

    def cuStreamBeginCapture(self, stream, mode):
        self.capturing = True
        return (0,)

    def cuStreamEndCapture(self, stream):
        self.capturing = False
        self.captured += 1
        return 0, "graph"

    def cuGraphInstantiate(self, graph, flags):
        return 0, "executable"

    def cuGraphLaunch(self, executable, stream):
        self.replays += 1
        return (0,)

    cuGraphExecDestroy = cuGraphDestroy = lambda self, handle: (0,)

    def _alloc(self, nbytes):
        if sum(len(b) for b in self.memory.values()) + nbytes > self.capacity:
            return (2,)  # CUDA_ERROR_OUT_OF_MEMORY
        buffer = ctypes.create_string_buffer(nbytes)
        self.memory[ctypes.addressof(buffer)] = buffer
        return 0, ctypes.addressof(buffer)

    def _free(self, pointer):
        del self.memory[pointer]
        return (0,)

    cuMemAlloc = lambda self, nbytes: self._alloc(nbytes)
    cuMemHostAlloc = lambda self, nbytes, flags=0: (0, ctypes.addressof(self._host(nbytes)))

    def _host(self, nbytes):
        buffer = ctypes.create_string_buffer(nbytes)
        self.host.append(buffer)
        return buffer
    cuMemFree = _free
    cuMemFreeHost = lambda self, pointer: (0,)

    def _copy(self, dst, src, nbytes, stream):
        ctypes.memmove(dst, src, nbytes)
        return (0,)

    cuMemcpyHtoDAsync = cuMemcpyDtoHAsync = cuMemcpyDtoDAsync = _copy

    def cuModuleLoadData(self, image):
        return 0, "module"

    def cuModuleGetFunction(self, module, name):
        return 0, name.decode()

    def cuFuncSetAttribute(self, function, attribute, value):
        return (0,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        array = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        types = [ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint64, ctypes.c_int32, ctypes.c_float]
        args = [ctypes.cast(array[i], ctypes.POINTER(t)).contents.value for i, t in enumerate(types)]
        self.launches.append(dict(grid=(gx, gy, gz), block=(bx, by, bz), shared=shared, args=args))
        y = (ctypes.c_float * args[3]).from_address(args[2])
        y[:] = [7.0] * args[3]
        return (0,)

    def read_f32(self, pointer):
        return ctypes.c_float.from_address(pointer).value


# ----------------------------------------------------------------------------------------------
# On a GPU

gpu = pytest.mark.skipif(not cuda_available()[0], reason=f"no CUDA GPU here: {cuda_available()[1]}")



class PoolsDriver(FakeDriver):
    """A fake driver with stream-ordered allocation: it logs which calls made and gave back pages."""

    def __init__(self) -> None:
        super().__init__()
        self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = "MEMORY_POOLS_SUPPORTED"
        self.attributes["MEMORY_POOLS_SUPPORTED"] = 1
        self.log: list = []

    def cuMemAllocAsync(self, nbytes, stream):
        self.log.append(("cuMemAllocAsync", stream))
        return self._alloc(nbytes)

    def cuMemFreeAsync(self, pointer, stream):
        self.log.append(("cuMemFreeAsync", stream))
        return self._free(pointer)

    def cuMemAlloc(self, nbytes):
        self.log.append(("cuMemAlloc", None))
        return self._alloc(nbytes)

    def cuMemFree(self, pointer):
        self.log.append(("cuMemFree", None))
        return self._free(pointer)


class EventsDriver(FakeDriver):
    """A fake driver with events: it counts stream waits and event waits."""

    def __init__(self) -> None:
        super().__init__()
        self.stream_waits = self.event_waits = 0

    def cuStreamSynchronize(self, stream):
        self.stream_waits += 1
        return super().cuStreamSynchronize(stream)

    def cuEventCreate(self, flags):
        return 0, object()

    def cuEventRecord(self, event, stream):
        return (0,)

    def cuEventSynchronize(self, event):
        self.event_waits += 1
        return (0,)


def test_small_uploads_go_through_pinned_slots_without_waiting_for_the_stream():
    driver = EventsDriver()
    rt = CudaRuntime(0, driver=driver)
    rng = np.random.default_rng(5)
    small = [rng.standard_normal(100 + i).astype(np.float32) for i in range(rt_cuda.UPLOAD_SLOTS + 3)]
    arrays = [rt.to_device(a) for a in small]
    assert driver.stream_waits == 0 and driver.event_waits == 3  # slots reused after a full turn wait for their copy
    big = rng.standard_normal(rt_cuda.UPLOAD_SLOT // 4 + 1).astype(np.float32)  # staged, then the stream waits
    arrays.append(rt.to_device(big))
    assert driver.stream_waits == 1
    for a, host in zip(arrays, small + [big]):
        np.testing.assert_array_equal(a.numpy(), host)


def test_pages_are_stream_ordered_except_those_made_while_a_graph_is_captured():
    driver = PoolsDriver()
    rt = CudaRuntime(0, driver=driver)
    assert rt.stream_ordered
    rt.pool = rt_cuda.MemoryPool(rt._allocate, rt._release, page_size=1)  # a page per array
    a = rt.empty(3 << 20, np.uint8)
    graph = rt.capture(lambda: rt.empty(5 << 20, np.uint8), warmup=False)  # its page: cuMemAlloc
    a.free()
    graph.close()
    del graph  # its result too
    rt.pool.cleanup()
    assert driver.log == [("cuMemAllocAsync", "stream"), ("cuMemAlloc", None),
                          ("cuMemFreeAsync", "stream"), ("cuMemFree", None)]
    assert driver.memory == {} and rt._ordered == set()
    plain = CudaRuntime(0, driver=FakeDriver())  # no memory pools: cuMemAlloc / cuMemFree as before
    assert not plain.stream_ordered


@pytest.fixture(scope="module")
def rt():
    return rt_cuda.cuda_runtime()


@gpu
def test_device_arrays_and_numpy_arrays(rt):
    x = rt.to_device(np.arange(1000, dtype=np.float32))
    y = rt.to_device(np.ones(1000, np.float32))
    rt.launch(axpy, cube.CubeCount(4), cube.CubeDim(256), (x, y, 2.0), {})
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(1000, dtype=np.float32) + 1)
    host = np.ones(1000, np.float32)
    rt.launch(axpy, cube.CubeCount(4), cube.CubeDim(256), (np.arange(1000, dtype=np.float32), host, 2.0), {})
    np.testing.assert_array_equal(host, y.numpy())
    assert rt.time(lambda: rt.launch(axpy, cube.CubeCount(4), cube.CubeDim(256), (x, y, 2.0), {})) > 0


@gpu
@pytest.mark.parametrize("units", [64, 40])  # 40: the second warp is partly empty
def test_planes_are_warps_of_32(rt, units):
    out = np.zeros(2 * units * 6, np.int32)
    rt.launch(planes, cube.CubeCount(2), cube.CubeDim(units), (out,), {})
    got = out.reshape(2, units, 6)
    for u in range(units):
        warp = np.arange(u - u % 32, min(u - u % 32 + 32, units))
        want = [warp.sum(), warp.max(), warp.min(), 32, u % 32, int(3 in warp) + 2]
        assert got[0, u].tolist() == want and got[1, u].tolist() == want, u


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint32])
def test_atomics(rt, dtype):
    check_atomics(rt, dtype)


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8])
@pytest.mark.parametrize("shift", [0, 1])  # 1: addresses are not aligned for one wide access
def test_vector_loads_and_stores(rt, dtype, shift):
    assert ": f32x4" in str(optimize(shifted_lines.specialize((cube.f32, cube.f32, cube.i32), {})))
    x = np.arange(-20, 21).astype(dtype)
    y = np.zeros_like(x)
    rt.launch(shifted_lines, cube.CubeCount(1), cube.CubeDim(16), (x, y, shift), {})
    want = np.zeros_like(x)
    n = (len(x) - shift) // 4 * 4
    want[shift:shift + n] = (x[shift:shift + n].astype(np.float32) * 3).astype(dtype)
    np.testing.assert_array_equal(y, want)


@cube.kernel
def convert(x: cube.Array[cube.f32], h: cube.Array[cube.f16], b: cube.Array[cube.bf16], back: cube.Array[cube.f32]):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        h[i] = cube.f16(x[i])
        b[i] = cube.bf16(x[i])
        back[i] = cube.f32(cube.f16(x[i])) + cube.f32(cube.bf16(x[i]))


@gpu
def test_half_precision_rounds_like_numpy(rt):
    x = np.concatenate([np.random.default_rng(1).standard_normal(1000).astype(np.float32) * 1000,
                        np.array([np.nan, np.inf, -np.inf, 65519.0, 65520.0, 1e-8, -0.0], np.float32)])
    h, b, back = np.zeros(len(x), np.float16), np.zeros(len(x), ml_dtypes.bfloat16), np.zeros(len(x), np.float32)
    rt.launch(convert, cube.CubeCount(5), cube.CubeDim(256), (x, h, b, back), {})
    with np.errstate(over="ignore"):  # 65520 rounds to infinity in f16
        np.testing.assert_array_equal(h, x.astype(np.float16))
        # Compared as f32: NumPy's equality test does not see bf16 NaNs as equal.
        np.testing.assert_array_equal(b.astype(np.float32), x.astype(ml_dtypes.bfloat16).astype(np.float32))
        np.testing.assert_array_equal(back, x.astype(np.float16).astype(np.float32)
                                      + x.astype(ml_dtypes.bfloat16).astype(np.float32))


@cube.kernel
def early_exit(out: cube.Array[cube.i32]):
    sh = cube.shared(cube.i32, 64)
    sh[cube.UNIT_POS] = cube.UNIT_POS
    cube.sync_units()
    if cube.UNIT_POS >= 60:
        return
    out[cube.UNIT_POS] = sh[63 - cube.UNIT_POS]


@gpu
def test_shared_memory_and_return(rt):
    out = np.full(64, -1, np.int32)
    rt.launch(early_exit, cube.CubeCount(1), cube.CubeDim(64), (out,), {})
    np.testing.assert_array_equal(out, np.r_[np.arange(63, 3, -1), [-1] * 4])


@gpu
def test_more_than_48k_of_shared_memory(rt, monkeypatch):
    from ember.cube.kernel import KernelFunction
    from ember.kernels.sort import sort
    monkeypatch.setattr(KernelFunction, "launch",
                        lambda self, count, dim, /, *args, **comptime: rt.launch(self, count, dim, args, comptime))
    x = np.random.default_rng(2).standard_normal((2, 16384)).astype(np.float32)  # 128 KiB per cube
    values, index = sort(x)
    np.testing.assert_array_equal(index, np.argsort(x, -1, kind="stable"))
    np.testing.assert_array_equal(values, np.sort(x, -1))


@gpu
def test_launch_errors_on_the_device(rt):
    x = rt.empty(10, np.float32)
    with pytest.raises(CudaLaunchError, match="ember_axpy"):
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(2048), (x, x, 1.0), {})


@gpu
def test_uploaded_indices_are_checked_against_their_bounds_without_a_read(rt, monkeypatch):
    check_index_bounds(rt, monkeypatch)


@gpu
def test_three_dimensional_launch_coordinates(rt):
    check_three_dimensional_coordinates(rt)


@gpu
def test_a_graph_replays_a_chain_of_launches_on_new_inputs(rt):
    from ember.kernels.elementwise import binary
    rng = np.random.default_rng(0)
    x = rt.to_device(rng.standard_normal(1000).astype(np.float32))

    def chain():
        y = x
        for _ in range(10):
            y = binary("add", y, x)
        return y

    graph = rt.capture(chain)
    new = rng.standard_normal(1000).astype(np.float32)
    rt.copy(rt.to_device(new), x)  # a new input, in place
    graph.replay()
    np.testing.assert_allclose(graph.result.numpy(), new * 11, rtol=1e-5)
    graph.replay()  # replays read the input again: same result
    np.testing.assert_allclose(graph.result.numpy(), new * 11, rtol=1e-5)


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cublas_matmul_of_transposed_and_strided_views(rt, dtype):
    from ember.cube.runtime.cublas import cublas_available, cublas_matmul
    if not cublas_available()[0]:
        pytest.skip(cublas_available()[1])
    rng = np.random.default_rng(3)
    host = lambda *shape: rng.standard_normal(shape).astype(dtype)
    a, b = host(70, 50), host(40, 50)                 # b.T is (50, 40): a transposed view on the device
    c, d = host(3, 50, 60), host(3, 20, 50)           # batched, both sides transposed
    cases = [(rt.to_device(a), rt.to_device(b).T),
             (rt.to_device(a).T, rt.to_device(host(70, 30))),
             (rt.to_device(c).transpose(0, 2, 1), rt.to_device(d).transpose(0, 2, 1)),
             (rt.to_device(a)[:, ::2], rt.to_device(host(25, 8))),   # strided columns: copied
             (rt.to_device(host(70, 150))[:, 50:100], rt.to_device(host(2, 50, 90))[1, :, 30:60]),  # row slices
             (rt.to_device(host(4, 30, 150))[:, :, 100:], rt.to_device(host(50, 20)).T.T),  # a batch of slices
             (rt.to_device(host(30, 50)).broadcast_to((3, 30, 50)), rt.to_device(host(3, 60, 50)).transpose(0, 2, 1)),
             (rt.to_device(host(5, 4, 30, 50)).transpose(1, 0, 2, 3)[2], rt.to_device(host(50, 7)))]  # batch step
    for x, y in cases:
        want = x.numpy().astype(np.float64) @ y.numpy().astype(np.float64)
        got = cublas_matmul(rt, x, y, tf32=False).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-3)


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_large_cublas_product_of_misaligned_columns_runs_on_b_widened(rt, dtype, monkeypatch):
    """A product of n columns that are not a multiple of 16 bytes runs on b widened with zero columns
    (cuBLAS's aligned kernels: the GPT head's 50257 columns 4.9 -> 1.7 ms), the output a view of the wider
    rows with the same values: a transposed b (a linear layer's weight), batched products and the
    one-taller-product fold too."""
    from ember.cube.runtime import cublas
    if not cublas.cublas_available()[0]:
        pytest.skip(cublas.cublas_available()[1])
    monkeypatch.setattr(cublas, "WIDEN_MIN", 1)  # every product counts as large here
    rng = np.random.default_rng(5)
    host = lambda *shape: rng.standard_normal(shape).astype(dtype)
    width = 16  # 13 columns padded to a multiple of 4 (f32) or 8 (f16) elements
    weight = host(13, 20)
    for x, y in [(host(9, 20), host(20, 13)), (host(3, 9, 20), host(20, 13)), (host(3, 9, 20), host(3, 20, 13)),
                 (host(9, 20), host(20, 16)), (host(3, 9, 20), weight.T)]:
        b = rt.to_device(weight).T if y.base is weight else rt.to_device(y)
        out = cublas.cublas_matmul(rt, rt.to_device(x), b, tf32=False)
        want = x.astype(np.float64) @ y.astype(np.float64)
        assert out.shape == want.shape
        if y.shape[-1] == 13:
            assert out.strides[-2] == width * out.itemsize and not out.flags.c_contiguous
        else:
            assert out.flags.c_contiguous
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-2 if dtype == np.float16 else 1e-4, atol=1e-2)
