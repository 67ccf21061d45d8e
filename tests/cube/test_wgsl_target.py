"""The WGSL renderer, checked on its output (no adapter needed): bindings, builtins, shared memory,
atomics, planes with and without subgroups, literals, and the dtypes WGSL lacks being refused."""

import numpy as np
import pytest

from ember import cube
from ember.cube.passes import optimize
from ember.cube.targets import wgsl
from ember.cube.targets.wgsl import Capabilities, WgslTargetError, literal, render

from .device_cases import axpy

LAVAPIPE = Capabilities(subgroups=True, f16=True, adapter="llvmpipe (Vulkan)")
PLAIN = Capabilities(adapter="plain adapter")


def wgsl_of(kfn, dtypes, dim=cube.CubeDim(64), caps=LAVAPIPE, **comptime) -> str:
    return render(optimize(kfn.specialize(dtypes, comptime)), dim, caps)


def test_one_entry_point_with_bindings_in_argument_order():
    src = wgsl_of(axpy, (cube.f32, cube.f32, cube.f32), cube.CubeDim(128, 2))
    assert "@compute @workgroup_size(128, 2, 1)" in src
    # Everything read_write: one pool page may hold several arguments (see targets/wgsl.py).
    assert "@group(0) @binding(0) var<storage, read_write> a0_x: array<f32>;" in src
    assert "@group(0) @binding(1) var<storage, read_write> a1_y: array<f32>;" in src
    assert "@group(0) @binding(2) var<uniform> ember_info: array<vec4<u32>, 2>;" in src
    # info words: len/base of x, len/base of y, then the bits of the scalar a.
    assert "let len_a0_x = i32(ember_info[0][0]);" in src
    assert "bitcast<f32>(ember_info[1][0])" in src
    assert "@builtin(workgroup_id) wid_p: vec3<u32>" in src and "@builtin(num_workgroups) nwg_p: vec3<u32>" in src
    # the logical cube position and count, from a dispatch the runtime may have folded
    assert "let nwg = vec3<u32>(ember_info[" in src and "let wid = vec3<u32>(flat_wid % nwg.x" in src
    assert src.count("fn main(") == 1


@cube.kernel
def reverse_in_cube(x: cube.Array[cube.i32], out: cube.Array[cube.i32]):
    sh = cube.shared(cube.i32, 64)
    sh[cube.UNIT_POS] = x[cube.ABSOLUTE_POS]
    cube.sync_units()
    out[cube.ABSOLUTE_POS] = sh[63 - cube.UNIT_POS] + cube.CUBE_COUNT_X + cube.CUBE_POS_Y


def test_shared_memory_barrier_and_builtins():
    src = wgsl_of(reverse_in_cube, (cube.i32, cube.i32))
    assert "var<workgroup> s0: array<i32, 64>;" in src
    assert "workgroupBarrier();" in src
    assert "i32(lidx)" in src and "i32(nwg.x)" in src and "i32(wid.y)" in src


@cube.kernel
def accumulate(x: cube.Array, total: cube.Array, most: cube.Array):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        cube.atomic_add(total, 0, x[i])
        cube.atomic_max(most, 0, x[i])


def test_atomics_on_f32_are_compare_exchange_loops_on_u32_bits():
    src = wgsl_of(accumulate, (cube.f32, cube.f32, cube.f32))
    assert "var<storage, read_write> a1_total: array<atomic<u32>>;" in src
    assert src.count("atomicCompareExchangeWeak(") == 2
    assert "atomicAdd" not in src


def test_atomics_on_i32_use_the_builtins():
    src = wgsl_of(accumulate, (cube.i32, cube.i32, cube.i32))
    assert "array<atomic<i32>>" in src
    assert "atomicAdd(&a1_total[" in src and "atomicMax(&a2_most[" in src


@cube.kernel
def plane_total(x: cube.Array[cube.f32], out: cube.Array[cube.f32]):
    out[cube.ABSOLUTE_POS] = cube.plane_sum(x[cube.ABSOLUTE_POS]) + cube.f32(cube.PLANE_DIM)


def test_planes_are_subgroups_when_the_adapter_has_them():
    src = wgsl_of(plane_total, (cube.f32, cube.f32))
    assert "subgroupAdd(" in src and "@builtin(subgroup_size) sg_size: u32" in src


@pytest.mark.parametrize("caps, dim", [(PLAIN, cube.CubeDim(64)),
                                       (LAVAPIPE, cube.CubeDim(8, 8))])  # naga: no subgroup ids in 2-D cubes
def test_planes_are_one_unit_without_subgroups(caps, dim):
    src = wgsl_of(plane_total, (cube.f32, cube.f32), dim, caps)
    assert "subgroup" not in src
    assert ": i32 = 1i;" in src  # PLANE_DIM == 1


def test_subgroup_builtins_only_in_kernels_with_planes():
    assert "subgroup" not in wgsl_of(axpy, (cube.f32, cube.f32, cube.f32))


@cube.kernel
def special(x: cube.Array[cube.f32], out: cube.Array[cube.f32]):
    i = cube.ABSOLUTE_POS
    out[i] = cube.erf(x[i]) + cube.log1p(x[i])


def test_helpers_are_emitted_only_when_used():
    src = wgsl_of(special, (cube.f32, cube.f32))
    assert "fn ember_erf(" in src and "fn ember_log1p(" in src
    assert "fn ember_expm1(" not in src and "fn ember_mulhi(" not in src
    assert "fn ember_erf(" not in wgsl_of(axpy, (cube.f32, cube.f32, cube.f32))


def test_literals():
    assert literal(-2**31, cube.i32) == "i32(-2147483648)"  # -2147483648i does not parse
    assert literal(7, cube.u32) == "7u"
    assert literal(float("inf"), cube.f32) == "bitcast<f32>(0x7f800000u)"
    assert literal(float("nan"), cube.f32) == "bitcast<f32>(0x7fc00000u)"
    assert literal(0.1, cube.f32) == f"{float(np.float32(0.1)).hex()}f"  # the f32 value, exactly


@cube.kernel
def copy(x: cube.Array, y: cube.Array):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = x[i]


@pytest.mark.parametrize("dtype", [cube.f64, cube.i64, cube.u64, cube.bf16])
def test_dtypes_wgsl_lacks_are_refused_naming_the_dtype_and_the_adapter(dtype):
    with pytest.raises(WgslTargetError, match=rf"of {dtype.name} cannot run on the WGSL target \(adapter 'llvmpipe"):
        wgsl_of(copy, (dtype, dtype))


def test_f16_needs_the_shader_f16_feature():
    src = wgsl_of(copy, (cube.f16, cube.f16))
    assert src.startswith("enable f16;") and "array<f16>" in src
    with pytest.raises(WgslTargetError, match="f16.*plain adapter.*shader-f16"):
        wgsl_of(copy, (cube.f16, cube.f16), caps=PLAIN)


def test_info_layout_and_written_arrays():
    k = axpy.specialize((cube.f32, cube.f32, cube.f32), {})
    layout = wgsl.info_layout(k)
    x, y, a = k.params
    assert layout.arrays == {x: (0, 1), y: (2, 3)} and layout.scalars == {a: 4}
    assert layout.count == 5 and layout.words == 8  # then the logical cube count (x, y, z)
    assert wgsl.written_arrays(k) == {y}


def test_bool_arrays_are_u32_words():
    src = wgsl_of(copy, (cube.bool_, cube.bool_))
    assert "array<u32>" in src and "!= 0u" in src and "select(0u, 1u," in src


def test_64_bit_types_with_the_int64_and_f64_features():
    caps = Capabilities(subgroups=True, f16=True, adapter="llvmpipe (Vulkan)", int64=True, f64=True)
    for dtype, name in ((cube.i64, "i64"), (cube.u64, "u64"), (cube.f64, "f64")):
        src = wgsl_of(copy, (dtype, dtype), caps=caps)
        assert f"array<{name}>" in src
    src = wgsl_of(axpy_any, (cube.f64, cube.f64, cube.f64), caps=caps)
    # a 64-bit scalar travels in two info words, joined low | high << 32
    assert "bitcast<f64>((u64(ember_info[1][0]) | (u64(ember_info[1][1]) << 32u)))" in src
    assert literal(0.5, cube.f64) == "0.5lf" and literal(-2, cube.i64) == "i64(-2)" and literal(3, cube.u64) == "3lu"
    assert literal(float("inf"), cube.f64) == f"bitcast<f64>({0x7FF0000000000000}lu)"


@cube.kernel
def axpy_any(x: cube.Array, y: cube.Array, a: cube.Scalar["T"]):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = a * x[i] + y[i]


def test_narrow_ints_are_words_wrapped_on_store():
    src = wgsl_of(copy, (cube.i8, cube.i8))
    assert "array<i32>" in src and "<< 24u) >> 24u" in src
    assert "& 255u" in wgsl_of(copy, (cube.u8, cube.u8)) and "<< 16u) >> 16u" in wgsl_of(copy, (cube.i16, cube.i16))
