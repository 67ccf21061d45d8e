"""The discrete Fourier transform at any length as cube kernels: Stockham autosort passes of radix 2, 3,
4, 5, 7, 8 and 16, Bluestein's chirp z-transform for lengths with a larger prime factor, and the real
transform of even lengths as a half-length complex one.

`fft(x, dims, inverse)` is the unscaled DFT of complex array `x` (c64 or c128, any layout) along each
dim of `dims` (sign - forward, + inverse); `rfft(x, dim)` the first n // 2 + 1 bins of the DFT of real
array `x` (f32 or f64) along `dim`. Each transformed dim is brought last (copied when it is not the
contiguous one) and its rows transformed together, one launch per pass over every row (`fft_plan.py`
beside this file chooses the passes and holds their twiddles, kept per length, dtype and runtime).

A pass of radix R reads R points n / R apart, multiplies them by twiddles, takes their R-point DFT (an
unrolled codelet, `dft`) and writes them Ns apart (Ns: the product of the radices before it), so the
output is in order after the last pass without a bit reversal. Inverse transforms are conj(DFT(conj x)):
the first pass conjugates what it reads and the last what it writes. Points between passes are held as
two planes (real parts, then imaginary parts); the first pass reads and the last writes interleaved
pairs, the complex arrays' layout. The C target launches a cube of one vector of units per run of
consecutive butterflies (addresses affine in the unit, so gcc emits vector loads and stores), and runs
every pass of a short row in one cube for large batches (`rows_kernel`); GPU targets launch one unit
per butterfly, rows and groups found by multiply-high division. Why, with figures: docs/signal.md.

Example:
    >>> fft(np.array([[1, 2, 0, -1]], np.complex64), dims=(1,), inverse=False)
    array([[2.+0.j, 1.-3.j, 0.+0.j, 1.+3.j]], dtype=complex64)
"""

from __future__ import annotations

import math

import numpy as np

from .. import cube
from ..cube.kernel import launch_runtime
from .common import assign, check_elements, contiguous, empty
from .fft_plan import COMPLEX_OF, PARTS, Plan, magic, plan_for, rfft_twiddles

GPU_UNITS = 256  # units per cube of the one-butterfly-per-unit launches (GPU targets)
VECTOR_BYTES = 64  # the C target's cube: one AVX-512 vector of units
ROW_BYTES = 32768  # rows_kernel: the largest row (in bytes) whose passes run in one cube
ROWS_MIN_POINTS = 1 << 16  # rows_kernel: the fewest points (rows * n) it runs


# ---- complex arithmetic on (re, im) pairs and the codelets -------------------------------------------
@cube.function
def cadd(a, b):
    return (a[0] + b[0], a[1] + b[1])


@cube.function
def csub(a, b):
    return (a[0] - b[0], a[1] - b[1])


@cube.function
def cmul(a, b):
    return (a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0])


def root(k: int, n: int) -> tuple:
    """exp(-2 pi i k / n) as two Python floats, exact at the multiples of pi / 2."""
    k %= n
    exact = {0: (1.0, 0.0), n / 4: (0.0, -1.0), n / 2: (-1.0, 0.0), 3 * n / 4: (0.0, 1.0)}
    if k in exact:
        return exact[k]
    angle = 2 * math.pi * k / n
    return (math.cos(angle), -math.sin(angle))


def _kind(c: tuple) -> str:
    """How a constant multiplies: a sign or swap ("1", "-1", "-i", "i"), |re| == |im| ("diag"), or not."""
    names = {(1.0, 0.0): "1", (-1.0, 0.0): "-1", (0.0, -1.0): "-i", (0.0, 1.0): "i"}
    if c in names:
        return names[c]
    return "diag" if abs(abs(c[0]) - abs(c[1])) < 1e-15 else "general"


@cube.function
def cmul_const(a, c, T):
    """a * c for a comptime constant c, with the multiplications its value saves left out."""
    kind = _kind(c)
    if kind == "1":
        return a
    if kind == "-1":
        return (-a[0], -a[1])
    if kind == "-i":
        return (a[1], -a[0])
    if kind == "i":
        return (-a[1], a[0])
    if kind == "diag":  # c = cr (1 + q i), q = +-1: two multiplications
        if c[1] * c[0] > 0:
            return (T(c[0]) * (a[0] - a[1]), T(c[0]) * (a[1] + a[0]))
        return (T(c[0]) * (a[0] + a[1]), T(c[0]) * (a[1] - a[0]))
    return (a[0] * T(c[0]) - a[1] * T(c[1]), a[0] * T(c[1]) + a[1] * T(c[0]))


def _bit_reversed(i: int, bits: int) -> int:
    return int(format(i, f"0{bits}b")[::-1], 2) if bits else 0


@cube.function
def _radix2_step(a, i, half, T):
    """Point i after the radix-2 step joining DFTs of `half` points (a: the points before it)."""
    pos = i % (2 * half)
    if pos < half:
        return cadd(a[i], cmul_const(a[i + half], root(pos, 2 * half), T))
    return csub(a[i - half], cmul_const(a[i], root(pos - half, 2 * half), T))


@cube.function
def _dft_pow2(v, R, T):
    bits = R.bit_length() - 1
    a = tuple(v[_bit_reversed(i, bits)] for i in range(R))
    for s in cube.unroll(range(bits)):
        a = tuple(_radix2_step(a, i, 1 << s, T) for i in range(R))
    return a


@cube.function
def _odd_terms(v, a, b, k, R, T):
    """For an odd R-point DFT: (v0 + sum a_r cos(2 pi r k / R), sum b_r sin(2 pi r k / R))."""
    t1 = v[0]
    t2 = (T(0), T(0))
    for r in cube.unroll(range(1, (R - 1) // 2 + 1)):
        c = T(math.cos(2 * math.pi * r * k / R))
        s = T(math.sin(2 * math.pi * r * k / R))
        t1 = (t1[0] + a[r - 1][0] * c, t1[1] + a[r - 1][1] * c)
        t2 = (t2[0] + b[r - 1][0] * s, t2[1] + b[r - 1][1] * s)
    return (t1, t2)


@cube.function
def _dft_odd(v, R, T):
    """The R-point DFT for odd R from the sums and differences of the points r and R - r."""
    h = (R - 1) // 2
    a = tuple(cadd(v[r], v[R - r]) for r in range(1, h + 1))
    b = tuple(csub(v[r], v[R - r]) for r in range(1, h + 1))
    first = v[0]
    for r in cube.unroll(range(h)):
        first = cadd(first, a[r])
    terms = tuple(_odd_terms(v, a, b, k, R, T) for k in range(1, h + 1))
    low = tuple((terms[k][0][0] + terms[k][1][1], terms[k][0][1] - terms[k][1][0]) for k in range(h))
    high = tuple((terms[k][0][0] - terms[k][1][1], terms[k][0][1] + terms[k][1][0]) for k in range(h))
    return (first,) + low + tuple(high[h - 1 - k] for k in range(h))


@cube.function
def dft(v, R, T):
    """The forward R-point DFT of the tuple of R (re, im) pairs `v` (R comptime: 2, 3, 4, 5, 7, 8, 16)."""
    if R & (R - 1) == 0:
        return _dft_pow2(v, R, T)
    return _dft_odd(v, R, T)


@cube.function
def udiv(x, mg, s1, s2):
    """floor(x / d) for 0 <= x < 2**31 by d's multiply-high magic (`fft_plan.magic(d)`: mg, s1, s2)."""
    ux = cube.u32(x)
    t = cube.mulhi(ux, mg)
    return cube.i32((t + ((ux - t) >> s1)) >> s2)


# ---- one Stockham pass ----------------------------------------------------------------------------------
@cube.function
def signed(a, sign):
    """(re, sign * im): conj(a) for sign -1."""
    return (a[0], sign * a[1])


@cube.function
def load_pair(x, at, plane, split):
    """Point `at` of `x`: interleaved pairs, or split planes `plane` apart."""
    if split:
        return (x[at], x[plane + at])
    return (x[2 * at], x[2 * at + 1])


@cube.function
def store_pair(y, at, plane, split, v):
    if split:
        y[at] = v[0]
        y[plane + at] = v[1]
    else:
        y[2 * at] = v[0]
        y[2 * at + 1] = v[1]


@cube.function
def butterfly(x, y, tw, mul, at, step, out, out_step, j, k, n, ns, toff, count, plane_in, plane_out, radix, first,
              split_in, split_out, sign, conj_in, conj_out, premul, T):
    """One radix-R butterfly: points at + r step of x, times mul[j + r step] (premul: Bluestein's
    spectrum, n points apart), times the twiddles of k (but in the first pass), transformed, written to
    out + r out_step of y. conj_in / conj_out (comptime): the pass may conjugate what it reads / writes,
    by the runtime `sign` (-1: an inverse transform)."""
    v = tuple(load_pair(x, at + r * step, plane_in, split_in) for r in range(radix))
    if conj_in:
        v = tuple(signed(a, sign) for a in v)
    if premul:
        w = tuple((mul[j + r * step], mul[n + j + r * step]) for r in range(radix))
        v = tuple(cmul(v[r], signed(w[r], sign) if conj_in else w[r]) for r in range(radix))
    if not first:
        v = tuple(v[r] if r == 0 else cmul(v[r], (tw[toff + (r - 1) * ns + k], tw[count + toff + (r - 1) * ns + k]))
                  for r in range(radix))
    o = dft(v, radix, T)
    for r in cube.unroll(range(radix)):
        store_pair(y, out + r * out_step, plane_out, split_out, signed(o[r], sign) if conj_out else o[r])


@cube.kernel
def stockham_kernel(x: cube.Array, y: cube.Array, tw: cube.Array, mul: cube.Array, n: cube.i32, ns: cube.i32,
                    rows: cube.i32, per_row: cube.i32, toff: cube.i32, count: cube.i32, plane: cube.i32,
                    mm: cube.u32, m1: cube.u32, m2: cube.u32, km: cube.u32, k1: cube.u32, k2: cube.u32,
                    sign: cube.i32, radix: cube.Comptime[int], first: cube.Comptime[bool],
                    split_in: cube.Comptime[bool], split_out: cube.Comptime[bool], premul: cube.Comptime[bool],
                    units: cube.Comptime[int]):
    """One pass of radix R over `rows` rows of n points: butterfly (g, k), g < n / (R ns), k < ns,
    reads points j + r m (j = g ns + k, m = n / R), writes g R ns + r ns + k. sign -1 conjugates what
    the first pass reads and the last writes (an inverse transform); the others ignore it.

    units > 0 (the C target): a cube per run of `units` consecutive k (consecutive g in the first pass,
    where ns = 1), the last run of a row shifted back to end at ns (m), so no unit is out of range (a
    few butterflies are computed twice); per_row is the number of cubes per row.
    units == 0: one unit per butterfly, rows * m of them, (row, j) and (g, k) by `udiv` with the magics
    of m and ns."""
    m = n // radix
    row = 0
    g = 0
    k = 0
    live = True
    if units > 0:
        c = cube.CUBE_POS
        row = c // per_row
        run = c - row * per_row
        if first:
            g = cube.min(run * units, m - units) + cube.UNIT_POS
        else:
            kruns = (ns + units - 1) // units
            g = run // kruns
            k = cube.min((run - g * kruns) * units, ns - units) + cube.UNIT_POS
    else:
        i = cube.ABSOLUTE_POS
        live = i < rows * m
        row = udiv(i, mm, m1, m2)
        j0 = i - row * m
        g = udiv(j0, km, k1, k2)
        k = j0 - g * ns
    if live:
        step = 1 if first else ns  # comptime 1 in the first pass: its accesses are then affine in the unit
        base = row * n
        j = g * step + k
        s = x.dtype(sign)
        butterfly(x, y, tw, mul, base + j, m, base + g * radix * step + k, step, j, k, n, ns, toff, count, plane,
                  plane, radix, first, split_in, split_out, s, first, not split_out, premul, x.dtype)


@cube.kernel
def rows_kernel(x: cube.Array, y: cube.Array, tw: cube.Array, mul: cube.Array, sign: cube.i32,
                radices: cube.Comptime[tuple], offsets: cube.Comptime[tuple], count: cube.Comptime[int],
                premul: cube.Comptime[bool], units: cube.Comptime[int]):
    """Every pass of a row in one cube (the C target): the row's points stay in two buffers of the cube
    (split planes) between passes. Needs radices[0] and n / radices[0] to be multiples of `units`, so
    every pass's units cover whole runs: consecutive g in the first pass, consecutive k in the others."""
    n = math.prod(radices)
    s = x.dtype(sign)
    base = cube.CUBE_POS * n
    u = cube.UNIT_POS
    bufs = (cube.shared(x.dtype, 2 * n), cube.shared(x.dtype, 2 * n))
    ns = 1
    for p in cube.unroll(range(len(radices))):
        r0 = radices[p]
        m = n // r0
        last = p == len(radices) - 1
        dst, out, plane_out = (y, base, 0) if last else (bufs[p % 2], 0, n)
        if p == 0:
            for gb in range(0, m, units):
                g = gb + u
                butterfly(x, dst, tw, mul, base + g, m, out + g * r0, 1, g, 0, n, 1, 0, count, 0, plane_out, r0,
                          True, False, not last, s, True, last, premul, x.dtype)
        else:
            for g in range(m // ns):
                for kb in range(0, ns, units):
                    k = kb + u
                    butterfly(bufs[(p + 1) % 2], dst, tw, mul, g * ns + k, m, out + g * r0 * ns + k, ns, 0, k, n, ns,
                              offsets[p], count, n, plane_out, r0, False, True, not last, s, False, last,
                              False, x.dtype)
        cube.sync_units()
        ns = ns * r0


@cube.function
def row_position(units, per_row, rows, length, mg, s1, s2):
    """(row, t, live) of this unit in a launch over `rows` rows of `length` positions: on the C target
    (units > 0) a cube per run of `units` positions, the last run of a row shifted back (length >=
    units); else a unit per position, the row by `udiv` with length's magic."""
    if units > 0:
        row = cube.CUBE_POS // per_row
        t = cube.min((cube.CUBE_POS - row * per_row) * units, length - units) + cube.UNIT_POS
        return (row, t, True)
    i = cube.ABSOLUTE_POS
    row = udiv(i, mg, s1, s2)
    return (row, i - row * length, i < rows * length)


@cube.kernel
def chirp_kernel(x: cube.Array, w: cube.Array, y: cube.Array, xrow: cube.i32, yrow: cube.i32, nv: cube.i32,
                 rows: cube.i32, per_row: cube.i32, mg: cube.u32, s1: cube.u32, s2: cube.u32, sign_in: cube.i32,
                 sign_out: cube.i32, units: cube.Comptime[int]):
    """y[row, t] = x[row, t] w_t for t < nv, 0 for nv <= t < yrow (interleaved pairs; rows of xrow and
    yrow points; w split, nv points): Bluestein's steps before and after the convolution. sign_in and
    sign_out (+-1) conjugate what is read and what is written."""
    T = x.dtype
    row, t, live = row_position(units, per_row, rows, yrow, mg, s1, s2)
    if live:
        tc = cube.min(t, nv - 1)
        at = 2 * (row * xrow + tc)
        v = cmul((x[at], T(sign_in) * x[at + 1]), (w[tc], w[nv + tc]))
        inside = t < nv
        y[2 * (row * yrow + t)] = cube.select(inside, v[0], T(0))
        y[2 * (row * yrow + t) + 1] = cube.select(inside, T(sign_out) * v[1], T(0))


@cube.kernel
def rfft_kernel(z: cube.Array, w: cube.Array, y: cube.Array, h: cube.i32, rows: cube.i32, per_row: cube.i32,
                mg: cube.u32, s1: cube.u32, s2: cube.u32, units: cube.Comptime[int]):
    """Bins 1 .. h - 1 of the real transform of rows of 2h points from Z, the h-point DFT of the rows
    read as complex (x_2t + i x_2t+1): with E = (Z_k + conj Z_(h-k)) / 2 and O = (Z_k - conj Z_(h-k)) /
    2i, X_k = E + w^k O. y has rows of h + 1 bins; `rfft_ends_kernel` writes bins 0 and h."""
    T = z.dtype
    row, t, live = row_position(units, per_row, rows, h - 1, mg, s1, s2)
    if live:
        k = t + 1
        a = (z[2 * (row * h + k)], z[2 * (row * h + k) + 1])
        b = (z[2 * (row * h + h - k)], -z[2 * (row * h + h - k) + 1])
        half = T(0.5)
        e = ((a[0] + b[0]) * half, (a[1] + b[1]) * half)
        o = ((a[1] - b[1]) * half, (b[0] - a[0]) * half)  # (a - b) / 2i
        v = cadd(e, cmul((w[k], w[h + 1 + k]), o))
        y[2 * (row * (h + 1) + k)] = v[0]
        y[2 * (row * (h + 1) + k) + 1] = v[1]


@cube.kernel
def rfft_ends_kernel(z: cube.Array, y: cube.Array, h: cube.i32, rows: cube.i32):
    """Bins 0 and h of the real transform: Z_0.re + Z_0.im and Z_0.re - Z_0.im (imaginary parts 0)."""
    row = cube.ABSOLUTE_POS
    if row < rows:
        re = z[2 * row * h]
        im = z[2 * row * h + 1]
        y[2 * row * (h + 1)] = re + im
        y[2 * row * (h + 1) + 1] = re - re
        y[2 * (row * (h + 1) + h)] = re - im
        y[2 * (row * (h + 1) + h) + 1] = re - re


@cube.kernel
def widen_kernel(x: cube.Array, y: cube.Array):
    """y = x + 0i as interleaved pairs."""
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[2 * i] = x[i]
        y[2 * i + 1] = x.dtype(0)


# ---- host side ------------------------------------------------------------------------------------------
def _floats(z):
    """The interleaved (re, im) floats of C-contiguous complex array `z`, flat (a view)."""
    part = PARTS[z.dtype]
    if isinstance(z, np.ndarray):
        return z.reshape(-1).view(part)
    return z.strided((2 * z.size,), (part.itemsize,), dtype=part)


def _contiguous(a):
    """`a` when C-contiguous, else a C-contiguous copy; a complex device array is copied as its float
    pairs (the library's copy kernel is real)."""
    part = PARTS.get(np.dtype(a.dtype))
    if part is None or isinstance(a, np.ndarray) or a.flags.c_contiguous:
        return contiguous(a)
    pairs = contiguous(a.strided(a.shape + (2,), a.strides + (part.itemsize,), dtype=part))
    return pairs.strided(a.shape, pairs.strides[:-1], dtype=a.dtype)


def _vector(part: np.dtype) -> int:
    return VECTOR_BYTES // part.itemsize


def _units(run: int, part: np.dtype) -> int:
    """The units of a C-target cube over runs of at least `run` positions: a vector, half a vector or
    one (three classes, not every power of two: each is a specialization, a gcc run on a cold cache)."""
    vec = _vector(part)
    return vec if run >= vec else vec // 2 if run >= vec // 2 else 1


def _row_launch(target: str, part: np.dtype, rows: int, length: int) -> tuple:
    """(CubeCount, CubeDim, units, per_row, magic) of a `row_position` launch."""
    if target == "cpu":
        units = _units(length, part)
        per_row = -(-length // units)
        return cube.CubeCount(rows * per_row), cube.CubeDim(units), units, per_row, (0, 0, 0)
    return cube.CubeCount(-(-rows * length // GPU_UNITS)), cube.CubeDim(GPU_UNITS), 0, 0, magic(length)


def _fits_a_cube(plan, rows: int, part: np.dtype) -> bool:
    """Whether `rows_kernel` takes these rows: on the C target, rows of at most ROW_BYTES whose runs are
    whole vectors, and enough of them (ROWS_MIN_POINTS) that the passes' data would leave the L2 cache."""
    n, units = plan.n, _vector(part)
    return (rows * n >= ROWS_MIN_POINTS and 2 * n * part.itemsize <= ROW_BYTES and len(plan.radices) > 1
            and plan.radices[0] % units == 0 and (n // plan.radices[0]) % units == 0)


def _transform(src, dst, plan: Plan, rows: int, inverse: bool, target: str, mul=None) -> None:
    """`plan`'s DFT of `rows` rows from `src` to `dst` (interleaved floats; dst is not src), the input
    first multiplied by `mul` (split, n points) when given."""
    part = np.dtype(src.dtype)
    if target == "cpu" and _fits_a_cube(plan, rows, part):
        units = _vector(part)
        rows_kernel.launch(cube.CubeCount(rows), cube.CubeDim(units), src, dst, plan.twiddles,
                           plan.twiddles if mul is None else mul, -1 if inverse else 1, radices=plan.radices,
                           offsets=plan.offsets, count=plan.count, premul=mul is not None, units=units)
        return
    n, passes = plan.n, len(plan.radices)
    scratch = empty(src.shape, part, src) if passes > 1 else None
    ns, read = 1, src
    for p, r in enumerate(plan.radices):
        m = n // r
        write = dst if (passes - 1 - p) % 2 == 0 else scratch
        if target == "cpu":
            units = _units(m if p == 0 else ns, part)
            per_row = -(-m // units) if p == 0 else (m // ns) * -(-ns // units)
            count, dim = cube.CubeCount(rows * per_row), cube.CubeDim(units)
        else:
            units, per_row = 0, 0
            count, dim = cube.CubeCount(-(-rows * m // GPU_UNITS)), cube.CubeDim(GPU_UNITS)
        stockham_kernel.launch(count, dim, read, write, plan.twiddles, plan.twiddles if mul is None else mul, n, ns,
                               rows, per_row, plan.offsets[p], plan.count, rows * n, *magic(m), *magic(ns),
                               -1 if inverse else 1, radix=r, first=p == 0, split_in=p > 0,
                               split_out=p < passes - 1, premul=mul is not None and p == 0, units=units)
        read = write
        ns *= r


def _chirp(x, w, y, xrow: int, yrow: int, nv: int, rows: int, sign_in: int, sign_out: int, target: str) -> None:
    count, dim, units, per_row, mg = _row_launch(target, np.dtype(x.dtype), rows, yrow)
    chirp_kernel.launch(count, dim, x, w, y, xrow, yrow, nv, rows, per_row, *mg, sign_in, sign_out, units=units)


def fft_rows(z, inverse: bool):
    """The unscaled DFT of each row of C-contiguous complex array `z` (rows, n), as a new array."""
    rows, n = z.shape
    check_elements("fft", (2 * rows * n,))
    out = empty(z.shape, z.dtype, z)
    if rows == 0:
        return out
    if n == 1:
        assign(_floats(out), _floats(z))
        return out
    rt = launch_runtime(z)
    part = PARTS[z.dtype]
    plan = plan_for(n, part, None if isinstance(z, np.ndarray) else rt)
    if isinstance(plan, Plan):
        _transform(_floats(z), _floats(out), plan, rows, inverse, rt.target)
        return out
    m, sign = plan.m, -1 if inverse else 1  # Bluestein; the inverse is conj(forward(conj(z)))
    check_elements("fft", (2 * rows * m,))
    a = empty((2 * rows * m,), part, z)
    b = empty((2 * rows * m,), part, z)
    _chirp(_floats(z), plan.chirp, a, n, m, n, rows, sign, 1, rt.target)
    _transform(a, b, plan.inner, rows, False, rt.target)
    _transform(b, a, plan.inner, rows, True, rt.target, mul=plan.spectrum)
    _chirp(a, plan.chirp, _floats(out), m, n, n, rows, 1, sign, rt.target)
    return out


def rfft_rows(x):
    """The first n // 2 + 1 bins of the DFT of each row of C-contiguous real array `x` (rows, n)."""
    rows, n = x.shape
    part = np.dtype(x.dtype)
    whole = COMPLEX_OF[part]
    if n % 2:
        z = empty(x.shape, whole, x)
        if x.size:
            count, dim = cube.CubeCount(-(-x.size // GPU_UNITS)), cube.CubeDim(GPU_UNITS)
            widen_kernel.launch(count, dim, x.reshape(-1), _floats(z))
        return _contiguous(fft_rows(z, False)[:, :n // 2 + 1])
    h = n // 2
    out = empty((rows, h + 1), whole, x)
    if rows == 0:
        return out
    z = _as_complex(x, whole)
    spectrum = fft_rows(z, False)
    rt = launch_runtime(x)
    zf, of = _floats(spectrum), _floats(out)
    if h > 1:
        count, dim, units, per_row, mg = _row_launch(rt.target, part, rows, h - 1)
        rfft_kernel.launch(count, dim, zf, rfft_twiddles(n, part, None if isinstance(x, np.ndarray) else rt), of, h, rows, per_row, *mg, units=units)
    rfft_ends_kernel.launch(cube.CubeCount(-(-rows // GPU_UNITS)), cube.CubeDim(GPU_UNITS), zf, of, h, rows)
    return out


def _as_complex(x, whole: np.dtype):
    """C-contiguous real rows of even length read as complex rows of half the length (a view)."""
    rows, n = x.shape
    if isinstance(x, np.ndarray):
        return x.view(whole)
    return x.strided((rows, n // 2), (x.itemsize * n, 2 * x.itemsize), dtype=whole)


def _along(x, dim: int, transform):
    """`transform` (of C-contiguous rows) applied along `dim` of `x`: the dim is moved last, copied
    when it is not contiguous there, and moved back (a view)."""
    moved = np.moveaxis(x, dim, -1)
    rows = _contiguous(moved).reshape(-1, moved.shape[-1])
    out = transform(rows)
    return np.moveaxis(out.reshape(moved.shape[:-1] + out.shape[-1:]), -1, dim)


def fft(x, dims: tuple, inverse: bool):
    """The unscaled DFT of complex array `x` along each dim of `dims` (inverse: the + sign)."""
    if not dims:
        return fft_rows(_contiguous(x).reshape(-1, 1), inverse).reshape(x.shape)  # a copy
    for d in dims:
        x = _along(x, d, lambda rows: fft_rows(rows, inverse))
    return x


def rfft(x, dim: int):
    """The first n // 2 + 1 bins of the DFT of real array `x` along `dim`."""
    return _along(x, dim, rfft_rows)
