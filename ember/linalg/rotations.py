"""Plane rotations logged by a scalar QR iteration (bdsqr in singular.py, steqr in eigen.py) and applied to the
rows of the vectors' matrices, the iteration and its rotations taking turns until every matrix converged.

The iteration kernel runs a cube per matrix, one unit's scalar work, and logs each sweep's rotations
(`log`: rows (j, j + 1), a (c, s) per side: U^T and V^T for the SVD, Z^T for eigh). `rotate_kernel`
applies the log in order to x (sides, count, n, n): x_j, x_j+1 = c x_j + s x_j+1, c x_j+1 - s x_j
(LAPACK's lasr on the transposed vectors), a cube per strip of columns, its rows' strip staying in
cache across the log (x is (sides, count, n, n), so that each side's matrices are one contiguous batch).
`iterate` alternates the two until each matrix's status is 1 (2: no convergence).

Example:
    >>> log = Log(count=1, sides=1, n=4, like=d)      # the iteration kernel fills log.planes, log.rot
    >>> iterate(lambda steps: step_kernel.launch(...), log, st, x, "eigh")
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..errors import EmberError
from ..kernels.common import empty
from .kernels import lanes

STRIP = 512  # columns per cube of the rotation kernel on the C target, at least
LOG = 16  # rotations logged per matrix and round, times n
LOOP_BUDGET = 60000  # loop trips of the one unit per launch of an iteration kernel on GPUs
STATE = 8  # ints of an iteration's state per matrix; the status (1 converged, 2 failed) is the last


@cube.function
def rotation(f, g):
    """(c, s, r) with [c s; -s c] [f; g] = [r; 0] (LAPACK's lartg; c > 0 where |f| > |g|)."""
    T = f.dtype
    af = cube.abs(f)
    ag = cube.abs(g)
    scale = cube.max(af, ag)
    safe = cube.select(scale == T(0), T(1), scale)
    fs = f / safe
    gs = g / safe
    r = safe * cube.sqrt(fs * fs + gs * gs)
    rr = cube.select(r == T(0), T(1), r)
    flip = cube.select((af > ag) and (f < T(0)), T(-1), T(1))
    c = cube.select(g == T(0), T(1), flip * f / rr)
    s = cube.select(g == T(0), T(0), flip * g / rr)
    return c, s, cube.select(g == T(0), f, flip * r)


@cube.function
def log(planes, rot, b, cap, at, plane, cs):
    """Entry `at` of matrix b's log: rows (plane, plane + 1), cs = (c, s) of each side in turn."""
    planes[b * cap + at] = plane
    for k in cube.unroll(range(len(cs))):
        rot[(b * len(cs) + k) * cap + at] = cs[k]


@cube.kernel
def rotate_kernel(x: cube.Array, planes: cube.Array[cube.i32], rot: cube.Array, counts: cube.Array[cube.i32],
                  n: cube.i32, cap: cube.i32, strip: cube.i32, sides: cube.Comptime[int], units: cube.Comptime[int]):
    """The logged rotations, in order, on rows (j, j + 1) of x (sides, count, n, n); cube (matrix, side,
    strip of columns)."""
    b = cube.CUBE_POS_X
    side = cube.CUBE_POS_Y
    c0 = cube.CUBE_POS_Z * strip
    c1 = cube.min(c0 + strip, n)
    base = (side * cube.CUBE_COUNT_X + b) * n * n
    at = (b * sides + side) * 2 * cap
    for r in range(0, counts[b]):
        j = planes[b * cap + r]
        c = rot[at + r]
        s = rot[at + cap + r]
        pj = base + j * n
        for l in range(c0 + cube.UNIT_POS, c1, units):
            xa = x[pj + l]
            xb = x[pj + n + l]
            x[pj + l] = c * xa + s * xb
            x[pj + n + l] = c * xb - s * xa


@cube.kernel
def sort_kernel(d: cube.Array, x: cube.Array, s: cube.Array, out: cube.Array, n: cube.i32,
                sides: cube.Comptime[int], svd: cube.Comptime[bool], units: cube.Comptime[int]):
    """The values into s and each side's row j of x (sides, count, n, n) into the same place of out: |d|
    descending with the last side's row times sign(d_j) (`svd`), else d ascending; ties by position;
    cube (matrix, j)."""
    T = d.dtype
    b = cube.CUBE_POS_X
    j = cube.CUBE_POS_Y
    dj = d[b * n + j]
    kj = cube.abs(dj) if svd else dj
    rank = cube.i32(0)
    for i in range(0, n):
        ki = cube.abs(d[b * n + i]) if svd else d[b * n + i]
        ahead = (ki > kj) if svd else (ki < kj)
        rank = rank + cube.select(ahead or ((ki == kj) and (i < j)), cube.i32(1), cube.i32(0))
    if cube.UNIT_POS == 0:
        s[b * n + rank] = kj
    sign = cube.select(dj < T(0), T(-1), T(1))
    count = cube.CUBE_COUNT_X
    for side in cube.unroll(range(sides)):
        f = sign if svd and side == sides - 1 else T(1)
        for c in range(cube.UNIT_POS, n, units):
            out[((side * count + b) * n + rank) * n + c] = f * x[((side * count + b) * n + j) * n + c]


class Log:
    """The rotation log of `count` matrices of order n, `sides` (c, s) pairs an entry."""

    def __init__(self, count: int, sides: int, n: int, like) -> None:
        self.count, self.sides, self.n, self.cap = count, sides, n, LOG * n
        self.planes = empty((count, self.cap), np.int32, like)
        self.rot = empty((count, 2 * sides, self.cap), like.dtype, like)
        self.counts = empty((count,), np.int32, like)
        self.units = lanes(like, 64)

    def steps(self) -> int:
        """Passes of the iteration's main loop per launch (a pass takes up to ~3n trips of the one unit): on
        the C target enough to fill the log; elsewhere LOOP_BUDGET trips (llvmpipe ends every loop of
        an invocation after 65,535 trips in all, and a GPU launch should stay short anyway)."""
        return self.cap + 2 * self.n if self.units == 1 else max(1, LOOP_BUDGET // (3 * self.n + 3))

    def apply(self, x) -> None:
        """The logged rotations on x (sides, count, n, n)."""
        n = self.n
        # Long strips spread each rotation's fixed cost (its log entry, the loop's set-up) over more
        # columns (strips of 64 -> 512 -> 2048 columns: the 2048 SVD's rotations took 3.5 -> 2.0 -> 1.7 s
        # on one thread); half a row each leaves two cubes a side for the threads.
        strip = max(STRIP, -(-n // 128) * 64) if self.units == 1 else self.units
        rotate_kernel.launch(cube.CubeCount(self.count, self.sides, -(-n // strip)), cube.CubeDim(self.units),
                             x.reshape(-1), self.planes.reshape(-1), self.rot.reshape(-1), self.counts, n, self.cap,
                             strip, sides=self.sides, units=self.units)


def iterate(step, log: Log, st, x, op: str) -> None:
    """step(steps) (one launch of the iteration kernel) and log.apply(x) in turn until every status in
    st (count, STATE) is 1; `EmberError` naming `op` when one is 2 (no convergence, LAPACK's info > 0)."""
    while True:
        status = _host(st)[:, STATE - 1]
        if (status == 2).any():
            raise EmberError(f"linalg.{op}: the QR iteration did not converge (LAPACK's info > 0)")
        if (status == 1).all():
            return
        step(log.steps())
        log.apply(x)


def sort(d, x, svd: bool):
    """(values, out): `sort_kernel` on d (count, n) and x (sides, count, n, n)."""
    sides, count, n, _ = x.shape
    s, out = empty((count, n), d.dtype, d), empty(x.shape, x.dtype, x)
    units = lanes(x, 64)
    if count and n:
        sort_kernel.launch(cube.CubeCount(count, n), cube.CubeDim(units), d.reshape(-1), x.reshape(-1),
                           s.reshape(-1), out.reshape(-1), n, sides=sides, svd=svd, units=units)
    return s, out


def _host(x) -> np.ndarray:
    from ..cube.runtime.arguments import DeviceArray
    return x.numpy() if isinstance(x, DeviceArray) else x
