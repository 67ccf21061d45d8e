"""The wgpu runtime on a real adapter (Mesa's lavapipe in CI: apt-get install mesa-vulkan-drivers,
pip install wgpu): adapters, buffers, launches, waiting, limits, atomics, planes, f16, refusals.
Skipped, with the reason printed, where wgpu or an adapter is missing."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ember import cube
from ember.cube.runtime import wgpu as rt_wgpu
from ember.cube.runtime.wgpu import WgpuArray, WgpuLimitError, WgpuRuntime, wgpu_available, wgpu_runtime
from ember.cube.lang import KernelError
from ember.cube.passes import optimize
from ember.cube.targets.wgsl import WgslTargetError, render
from ember.errors import DeviceUnavailableError

from .device_cases import axpy, check_atomics, check_index_bounds, check_three_dimensional_coordinates, planes, shifted_lines

AVAILABLE, WHY = wgpu_available()
if not AVAILABLE:
    print(f"\nwgpu tests skipped: {WHY}")
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"wgpu: {WHY}")


@pytest.fixture(scope="module")
def rt():
    return wgpu_runtime()


@pytest.fixture(scope="module")
def plain():
    """A device on the same adapter without the optional features (no subgroups, no f16)."""
    return WgpuRuntime(features=())


def test_adapters_are_listed_best_first_and_chosen_by_index_or_name():
    listed = rt_wgpu.adapters()
    ranks = [rt_wgpu._TYPE_RANK.get(a.kind, 3) for a in listed]
    assert ranks == sorted(ranks)
    assert rt_wgpu.choose_adapter(0).name == listed[0].name
    part = listed[-1].name.split(" (")[-1][:-1]  # the backend, e.g. "Vulkan"
    assert part.lower() in rt_wgpu.choose_adapter(part.upper()).name.lower()
    with pytest.raises(DeviceUnavailableError, match="no wgpu adapter named like 'no such gpu'"):
        rt_wgpu.choose_adapter("no such gpu")
    with pytest.raises(DeviceUnavailableError, match="no wgpu adapter 99"):
        rt_wgpu.choose_adapter(99)


@pytest.mark.parametrize("adapter", range(len(rt_wgpu.listed_adapters()) if AVAILABLE else 0))
def test_signed_integer_division_and_remainders_on_every_adapter(adapter, rng):
    """Truncated and floored division and remainders of negative ints, on each adapter listed (OpenGL too:
    naga's GLSL keeps `%`, which GLSL leaves undefined for negative operands)."""
    import ember
    from ember import Device
    device = Device.wgpu(adapter)
    a = rng.integers(-50, 50, 257).astype(np.int32)
    b = rng.integers(-7, 8, 257).astype(np.int32)
    b[b == 0] = 3
    ea, eb = ember.tensor(a, device=device), ember.tensor(b, device=device)
    np.testing.assert_array_equal((ea // eb).numpy(), a // b)
    np.testing.assert_array_equal((ea % eb).numpy(), a % b)
    np.testing.assert_array_equal(ember.fmod(ea, eb).numpy(), np.fmod(a, b))


def test_device_arrays_and_numpy_arrays(rt):
    x = rt.to_device(np.arange(1000, dtype=np.float32))
    y = rt.to_device(np.ones(1000, np.float32))
    rt.launch(axpy, cube.CubeCount(4), cube.CubeDim(256), (x, y, 2.0), {})
    assert isinstance(y, WgpuArray) and y.shape == (1000,)
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(1000) + 1)
    host = np.ones(1000, np.float32)
    rt.launch(axpy, cube.CubeCount(4), cube.CubeDim(256), (np.arange(1000, dtype=np.float32), host, 2.0), {})
    np.testing.assert_array_equal(host, y.numpy())
    assert rt.time(lambda: rt.launch(axpy, cube.CubeCount(4), cube.CubeDim(256), (x, y, 2.0), {}), repeat=2) > 0


def test_one_array_read_and_written_by_a_launch(rt):
    x = rt.to_device(np.arange(8, dtype=np.float32))
    rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(64), (x, x, 2.0), {})  # x = 2x + x
    np.testing.assert_array_equal(x.numpy(), 3 * np.arange(8))
    wrong = rt.empty(8, np.int32)
    with pytest.raises(KernelError, match="argument 'y' must hold f32, got i32"):
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(64), (x, wrong, 2.0), {})
    compiled = rt.prepare(axpy, cube.CubeDim(64), (x, x, 2.0), {})
    with pytest.raises(KernelError, match="argument 'y' must be an array of f32, got int32"):
        rt.run(compiled, cube.CubeCount(1), (x, wrong, 2.0))


@cube.kernel
def scale_view(x: cube.Array[cube.f32], y: cube.Array[cube.f32], stride: cube.i32):
    i = cube.ABSOLUTE_POS
    if i < len(y):
        y[i] = x[i * stride] * 10.0


def test_strided_and_reversed_views_are_read_and_written_in_place(rt):
    base = np.arange(40, dtype=np.float32)
    x = base[::-2]  # element stride -2: the buffer holds the span under it, x's first element at its end
    out = np.zeros(40, np.float32)
    y = out[5:25]
    rt.launch(scale_view, cube.CubeCount(1), cube.CubeDim(64), (x, y, -2), {})
    np.testing.assert_array_equal(y, x * 10)
    assert (out[:5] == 0).all() and (out[25:] == 0).all()


def test_synchronize_waits_without_on_submitted_work_done(rt, monkeypatch):
    def broken(*args):
        raise AssertionError("on_submitted_work_done_sync is broken in wgpu 0.32 and must not be used")
    monkeypatch.setattr(type(rt.queue), "on_submitted_work_done_sync", broken, raising=False)
    x = rt.to_device(np.arange(1 << 16, dtype=np.float32))
    y = rt.to_device(np.zeros(1 << 16, np.float32))
    for _ in range(3):
        rt.launch(axpy, cube.CubeCount(256), cube.CubeDim(256), (x, y, 1.0), {})
    rt.synchronize()
    rt.synchronize()  # the fence buffer is unmapped again and can be reused
    np.testing.assert_array_equal(y.numpy(), 3 * np.arange(1 << 16))


def test_buffers_beyond_the_binding_limit_are_refused(rt, monkeypatch):
    monkeypatch.setitem(rt.limits, "max-storage-buffer-binding-size", 1024)
    with pytest.raises(WgpuLimitError, match="2048 bytes exceeds the adapter's max_storage_buffer_binding_size "
                                             "of 1024"):
        rt.empty(512, np.float32)
    with pytest.raises(WgpuLimitError, match="argument 'x' of kernel axpy"):
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(64), (np.ones(512, np.float32), np.ones(4, np.float32), 1.0),
                  {})


def test_launch_shapes_beyond_the_limits_are_refused(rt):
    x = rt.empty(10, np.float32)
    too_many = rt.limits["max-compute-invocations-per-workgroup"] * 2
    with pytest.raises(WgpuLimitError, match=f"kernel axpy .*a cube has {too_many} units"):
        rt.launch(axpy, cube.CubeCount(1), cube.CubeDim(too_many), (x, x, 1.0), {})
    most = rt.limits["max-compute-workgroups-per-dimension"]
    with pytest.raises(WgpuLimitError, match=f"kernel axpy .* exceed {most}\\*\\*3"):
        rt.launch(axpy, cube.CubeCount(most, most, most + 1), cube.CubeDim(64), (x, x, 1.0), {})


@pytest.mark.parametrize("count", [(70_000, 1, 1), (3, 66_000, 1), (1, 2, 65_536)])
def test_cube_counts_beyond_a_dimension_limit_are_folded(rt, count):
    """More cubes along one dim than the adapter dispatches: the runtime folds the count over the three
    dims and each cube still sees its logical CUBE_POS_X/Y/Z and CUBE_COUNT_X/Y/Z."""
    if max(count) <= rt.limits["max-compute-workgroups-per-dimension"]:
        pytest.skip(f"{rt.adapter_name} dispatches {max(count)} workgroups per dimension")
    n = count[0] * count[1] * count[2]
    out = rt.empty(n * 4, np.int32)
    rt.launch(cube_ids, cube.CubeCount(*count), cube.CubeDim(1), (out,), {})
    got = out.numpy().reshape(n, 4)
    x, y, z = np.meshgrid(*(np.arange(c) for c in count), indexing="ij")
    flat = (z * count[1] + y) * count[0] + x  # CUBE_POS: x fastest
    want = np.zeros((n, 4), np.int32)
    want[flat.ravel(), 0], want[flat.ravel(), 1], want[flat.ravel(), 2] = x.ravel(), y.ravel(), z.ravel()
    want[:, 3] = n
    np.testing.assert_array_equal(got, want)


@cube.kernel
def cube_ids(out: cube.Array[cube.i32]):
    base = cube.CUBE_POS * 4
    out[base] = cube.CUBE_POS_X
    out[base + 1] = cube.CUBE_POS_Y
    out[base + 2] = cube.CUBE_POS_Z
    out[base + 3] = cube.CUBE_COUNT


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32])
def test_atomics(rt, dtype):
    check_atomics(rt, dtype)


def check_planes(got: np.ndarray, units: int) -> None:
    for u in range(units):
        width, lane = got[u, 3], got[u, 4]
        plane = np.arange(u - lane, min(u - lane + width, units))
        assert got[u].tolist() == [plane.sum(), plane.max(), plane.min(), width, lane, int(3 in plane) + 2], u


def test_planes_are_subgroups(rt):
    if not rt.caps.subgroups:
        pytest.skip(f"{rt.adapter_name} has no subgroup feature")
    out = np.zeros(64 * 6, np.int32)
    rt.launch(planes, cube.CubeCount(1), cube.CubeDim(64), (out,), {})
    got = out.reshape(64, 6)
    assert got[0, 3] > 1
    check_planes(got, 64)


def test_planes_are_single_units_without_subgroups(plain):
    out = np.zeros(2 * 64 * 6, np.int32)
    plain.launch(planes, cube.CubeCount(2), cube.CubeDim(64), (out,), {})
    got = out.reshape(2 * 64, 6)
    assert (got[:, 3] == 1).all()
    check_planes(got[:64], 64)


@cube.kernel
def convert(x: cube.Array[cube.f32], h: cube.Array[cube.f16], back: cube.Array[cube.f32]):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        h[i] = cube.f16(x[i])
        back[i] = cube.f32(h[i]) + cube.f32(cube.f16(x[i]) * cube.f16(0))


def test_f16_is_stored_as_f16_and_computed_in_f32(rt, plain):
    x = np.random.default_rng(1).standard_normal(300).astype(np.float32) * 100
    h, back = np.zeros(300, np.float16), np.zeros(300, np.float32)
    if not rt.caps.f16:
        pytest.skip(f"{rt.adapter_name} has no shader-f16 feature")
    rt.launch(convert, cube.CubeCount(2), cube.CubeDim(256), (x, h, back), {})
    np.testing.assert_array_equal(h, x.astype(np.float16))
    np.testing.assert_array_equal(back, x.astype(np.float16).astype(np.float32))
    with pytest.raises(WgslTargetError, match=f"f16 cannot run on the WGSL target .*{plain.adapter_name[:8]}"):
        plain.launch(convert, cube.CubeCount(2), cube.CubeDim(256), (x, h, back), {})


@cube.kernel
def copy(x: cube.Array, y: cube.Array):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = x[i]


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16])
def test_dtypes_wgsl_lacks_are_refused_naming_the_adapter(rt, dtype):
    x = np.zeros(4, dtype)
    with pytest.raises(WgslTargetError, match=f"cannot run on the WGSL target \\(adapter '{rt.adapter_name[:8]}"):
        rt.launch(copy, cube.CubeCount(1), cube.CubeDim(4), (x, x.copy()), {})


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_vector_loads_and_stores(rt, dtype):
    if dtype == np.float16 and not rt.caps.f16:
        pytest.skip(f"{rt.adapter_name} has no shader-f16 feature")
    compiled = rt.prepare(shifted_lines, cube.CubeDim(32), (np.zeros(1, dtype), np.zeros(1, dtype), 1), {})
    assert "vec4<" in compiled.source  # the vectorize pass made one 4-lane load and store
    x = (np.arange(130) % 50).astype(dtype)
    y = np.zeros(130, dtype)
    rt.launch(shifted_lines, cube.CubeCount(2), cube.CubeDim(32), (x, y, 1), {})
    want = np.zeros(130, dtype)
    want[1:129] = x[1:129] * 3
    np.testing.assert_array_equal(y, want)


def test_uploaded_indices_are_checked_against_their_bounds_without_a_read(rt, monkeypatch):
    check_index_bounds(rt, monkeypatch)


def test_three_dimensional_launch_coordinates(rt):
    check_three_dimensional_coordinates(rt)


@cube.kernel
def mixed_scalars(out: cube.Array[cube.i32], flag: cube.bool_, n: cube.i32, k: cube.u32, h: cube.f16):
    if cube.ABSOLUTE_POS == 0:
        out[0] = cube.select(flag, n, -n)
        out[1] = cube.i32(k >> cube.u32(28))
        out[2] = cube.i32(cube.f32(h) * 4.0)


def test_scalars_travel_as_32_bit_words(rt):
    if not rt.caps.f16:
        pytest.skip(f"{rt.adapter_name} has no shader-f16 feature")
    out = np.zeros(3, np.int32)
    rt.launch(mixed_scalars, cube.CubeCount(1), cube.CubeDim(1), (out, False, -7, 0xF0000000, 1.25), {})
    assert out.tolist() == [7, 15, 5]


def test_compile_errors_name_the_kernel_and_show_the_source(rt, monkeypatch, tmp_path):
    from ember.cube.compile_cache import SourceCache
    monkeypatch.setattr(rt, "_source_cache", SourceCache("wgsl", tmp_path))  # no cached good source
    monkeypatch.setattr(rt_wgpu.wgsl_target, "render", lambda k, dim, caps: "fn main( {")
    with pytest.raises(rt_wgpu.WgpuError, match="(?s)wgpu refused kernel copy .*---- WGSL ----\nfn main\\( \\{"):
        rt.compile(copy.specialize((cube.f32, cube.f32), {}), cube.CubeDim(8))
    assert not list((tmp_path / "wgsl").glob("*.txt"))  # a source that failed is not cached


def test_64_bit_types_where_the_adapter_has_them(rt):
    """i64/u64 with `shader-int64`, f64 arithmetic with `shader-f64` (lavapipe has both); f64 math
    Vulkan lacks (exp, sin, ...) is refused by name."""
    if not {"shader-int64", "shader-f64"} <= rt.features:
        pytest.skip(f"{rt.adapter_name} lacks shader-int64/shader-f64")
    rng = np.random.default_rng(3)
    for dtype in (np.int64, np.uint64, np.float64):
        x = (rng.standard_normal(300) * 2**40).astype(dtype)
        y = np.zeros_like(x)
        rt.launch(copy, cube.CubeCount(2), cube.CubeDim(256), (x, y), {})
        np.testing.assert_array_equal(y, x)
    x = rng.standard_normal(300)
    with pytest.raises(WgslTargetError, match="exp of f64 cannot run on the WGSL target .*no 64-bit exp"):
        rt.launch(unary_exp, cube.CubeCount(2), cube.CubeDim(256), (x, np.zeros_like(x)), {})


@cube.kernel
def unary_exp(x: cube.Array, y: cube.Array):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = cube.exp(x[i])


def test_wgsl_is_cached_on_disk_and_a_corrupt_entry_is_rebuilt(tmp_path):
    from ember.cube.compile_cache import SourceCache
    cache = SourceCache("wgsl", tmp_path)
    source = render(optimize(axpy.specialize((cube.f32, cube.f32, cube.f32), {})), cube.CubeDim(64))
    assert cache.read("k") is None
    cache.write("k", source)
    assert SourceCache("wgsl", tmp_path).read("k") == source  # a new process finds it
    path = tmp_path / "wgsl" / "k.txt"
    path.write_text(path.read_text()[:-20])  # truncated
    with pytest.warns(RuntimeWarning, match=f"kernel cache entry {path} fails its checksum"):
        assert cache.read("k") is None and not path.exists()


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.bool_])
def test_narrow_types_are_emulated_in_32_bit_words(rt, dtype):
    """One element per u32/i32 word on the device; values wrap to their width on every store."""
    info = np.iinfo(dtype) if dtype != np.bool_ else None
    x = (np.random.default_rng(5).integers(info.min, info.max + 1, 700) if info else
         np.random.default_rng(5).integers(0, 2, 700)).astype(dtype)
    y = np.zeros_like(x)
    rt.launch(copy, cube.CubeCount(3), cube.CubeDim(256), (x, y), {})
    np.testing.assert_array_equal(y, x)
    d = rt.to_device(x[::-3])
    np.testing.assert_array_equal(d.numpy(), x[::-3])
    np.testing.assert_array_equal(d[1:4].numpy(), x[::-3][1:4])
