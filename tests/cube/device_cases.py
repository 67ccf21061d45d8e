"""Kernels and checks the device tests (CUDA, wgpu, WGSL rendering) share: each runtime must give the
same answers, so the cases are written once and each test file runs them on its runtime `rt`."""

from __future__ import annotations

import numpy as np

from ember import cube


@cube.kernel
def axpy(x: cube.Array[cube.f32], y: cube.Array[cube.f32], a: cube.f32):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = a * x[i] + y[i]


@cube.kernel
def atomics(x: cube.Array, total: cube.Array, most: cube.Array, least: cube.Array):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        cube.atomic_add(total, i % 4, x[i])
        cube.atomic_max(most, 0, x[i])
        cube.atomic_min(least, 0, x[i])


def check_atomics(rt, dtype) -> None:
    x = np.random.default_rng(0).integers(0, 1000, 5000).astype(dtype)  # float sums stay exact
    total, most, least = np.zeros(4, dtype), np.zeros(1, dtype), np.full(1, 10**6, dtype)
    rt.launch(atomics, cube.CubeCount(20), cube.CubeDim(256), (x, total, most, least), {})
    np.testing.assert_array_equal(total, [x[k::4].sum() for k in range(4)])
    assert most[0] == x.max() and least[0] == x.min()


@cube.kernel
def planes(out: cube.Array[cube.i32]):
    u = cube.UNIT_POS
    base = (cube.CUBE_POS * cube.CUBE_DIM + u) * 6
    out[base] = cube.plane_sum(u)
    out[base + 1] = cube.plane_max(u)
    out[base + 2] = cube.plane_min(u)
    out[base + 3] = cube.PLANE_DIM
    out[base + 4] = cube.UNIT_POS_PLANE
    out[base + 5] = cube.i32(cube.plane_any(u == 3)) + 2 * cube.i32(cube.plane_all(u < 1000))


@cube.kernel
def shifted_lines(x: cube.Array, y: cube.Array, shift: cube.i32):
    base = cube.ABSOLUTE_POS * 4 + shift
    if base + 4 <= len(x):
        for j in cube.unroll(range(4)):
            y[base + j] = x[base + j] * x.dtype(3)


@cube.kernel
def coordinates(out: cube.Array[cube.i32]):
    base = cube.ABSOLUTE_POS * 8
    out[base] = cube.UNIT_POS
    out[base + 1] = cube.CUBE_POS
    out[base + 2] = cube.ABSOLUTE_POS_X
    out[base + 3] = cube.ABSOLUTE_POS_Y
    out[base + 4] = cube.ABSOLUTE_POS_Z
    out[base + 5] = cube.CUBE_COUNT * 1000 + cube.CUBE_DIM
    out[base + 6] = cube.UNIT_POS_Z * 100 + cube.UNIT_POS_Y * 10 + cube.UNIT_POS_X
    total = 0
    for k in range(cube.CUBE_DIM_X - 1, -1, -1):  # a loop counting down
        total += k
    out[base + 7] = total


def check_three_dimensional_coordinates(rt) -> None:
    """Every unit of a 3x2x2 launch of 4x3x2 cubes sees its own positions, x-fastest."""
    count, dim = cube.CubeCount(3, 2, 2), cube.CubeDim(4, 3, 2)
    out = np.zeros(count.total * dim.total * 8, np.int32)
    rt.launch(coordinates, count, dim, (out,), {})
    got = out.reshape(-1, 8)
    for cz, cy, cx, uz, uy, ux in np.ndindex(2, 2, 3, 2, 3, 4):
        unit, cube_pos = (uz * 3 + uy) * 4 + ux, (cz * 2 + cy) * 3 + cx
        row = got[cube_pos * 24 + unit].tolist()
        assert row == [unit, cube_pos, cx * 4 + ux, cy * 3 + uy, cz * 2 + uz, 12 * 1000 + 24,
                       uz * 100 + uy * 10 + ux, 6], (cz, cy, cx, uz, uy, ux)
