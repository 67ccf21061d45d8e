"""Kernels and checks the device tests (CUDA, wgpu, WGSL rendering) share: each runtime must give the
same answers, so the cases are written once and each test file runs them on its runtime `rt`."""

from __future__ import annotations

import numpy as np
import pytest

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


def check_index_bounds(rt, monkeypatch) -> None:
    """Integer data uploaded from the host notes its bounds (views keep them, a write forgets them, float
    data has none); an index op checks an index against them instead of reading it back, which waits for
    the queued work; with no bounds, or bounds out of range, it reads the values, which decide."""
    from ember.kernels import indexing
    from ember.cube.runtime.arguments import vouch_bounds
    index = rt.to_device(np.array([[2, 0, 1], [1, 2, 2]]))
    assert index.bounds == (0, 2) and index.T[1:].bounds == (0, 2) and index.reshape(6).bounds == (0, 2)
    assert rt.to_device(np.ones(3, np.float32)).bounds is None and rt.to_device(np.zeros(0, np.int32)).bounds is None
    reads = []
    original = type(index).numpy
    monkeypatch.setattr(type(index), "numpy", lambda self: reads.append(self.dtype.kind) or original(self))
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = rt.to_device(host)
    got = indexing.gather(x, index, 0)
    assert reads == []  # checked against its bounds: nothing read
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(host[:, :3], np.array([[2, 0, 1], [1, 2, 2]]), 0))
    reads.clear()
    computed = indexing.index_select(index, rt.to_device(np.array([1])), 0)  # made on the device: no bounds
    assert computed.bounds is None
    indexing.index_select(x, computed.reshape(3), 0)
    assert reads == ["i"]  # read once to check it
    reads.clear()
    vouch_bounds(computed, 0, 2)
    indexing.index_select(x, computed.reshape(3), 0)
    assert reads == [] and computed.bounds == (0, 2)
    with pytest.raises(IndexError, match="index 2 is out of bounds for dim 1 with size 2"):
        indexing.index_select(x[:, :2], index.reshape(6), 1)  # bounds (0, 2) out of range: the values decide
    assert reads == ["i"]
    index[0, 0] = 5  # a write in place forgets the bounds (the view's and its owner's)
    assert index.bounds is None
