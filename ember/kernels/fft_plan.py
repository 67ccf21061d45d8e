"""How the FFT kernels transform a length: its passes and their twiddles, or Bluestein's chirp z-transform,
built once per (kind, length, dtype, runtime) and kept (the most recent `KEPT` of them).

A length n = 2^a 3^b 5^c 7^d runs as Stockham passes (`radices(n)`): the power of two as one pass of 16
first (on the C target a pass vectorizes over consecutive butterflies of one group, which takes Ns of
at least a vector: 16 f32), then passes of 8 (the 16-point codelet spills registers there), a 4 or a 2
for what is left (a second 16 instead of an 8 and a 2); the odd primes in passes of their own.
Pass p of radix R after radices of product Ns multiplies point r of butterfly k by exp(-2 pi i r k /
(R Ns)): the table holds these for r = 1 .. R - 1, k < Ns, every pass one after another, the real
parts of all of them and then the imaginary parts. Twiddles are computed in float64 and rounded once.

Any other length runs as Bluestein's algorithm: with w_t = exp(-i pi t^2 / n), X_k = w_k sum_t (x_t w_t)
conj(w_(k - t)), a circular convolution of length m >= 2n - 1 (`bluestein_length`: the 7-smooth length
of fewest passes per point), computed as a forward FFT, a product with the spectrum of conj(w) wrapped
to length m, and an inverse FFT. That spectrum (scaled by 1 / m) is a constant of the length: it is
computed once with float64 numpy.fft on the host and rounded, like the twiddles (in the transform's
own dtype it would add an FFT's rounding to every transform).

Example:
    >>> radices(1000), radices(4096), bluestein_length(1009)
    ((8, 5, 5, 5), (16, 8, 8, 4), 2048)
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

KEPT = 64  # plans kept (each holds about a length's worth of twiddles on its runtime)
ODD = (7, 5, 3)
PARTS = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
COMPLEX_OF = {v: k for k, v in PARTS.items()}


def radices(n: int) -> tuple | None:
    """The radices of n's Stockham passes, the largest first; None when n has a prime factor above 7."""
    odd = []
    for p in ODD:
        while n % p == 0:
            odd.append(p)
            n //= p
    a = n.bit_length() - 1
    if n != 1 << a:
        return None
    if a < 4:
        return tuple(([1 << a] if a else []) + odd)
    q, r = divmod(a - 4, 3)  # 2^a = 16 * 8^q * 2^r
    if r == 1 and q:
        return (16,) + (8,) * (q - 1) + (16,) + tuple(odd)
    return (16,) + (8,) * q + ((1 << r,) if r else ()) + tuple(odd)


def _smooth(limit: int) -> list:
    """The 7-smooth numbers from `limit` up to the power of two at or above it."""
    top = 1 << (limit - 1).bit_length()
    found = [1]
    for p in (2, 3, 5, 7):
        found = [f * p ** e for f in found for e in range(int(math.log(top, p)) + 2) if f * p ** e <= top]
    return sorted(f for f in set(found) if f >= limit)


def bluestein_length(n: int) -> int:
    """The convolution length for n: the 7-smooth m >= 2n - 1 of least m * passes."""
    return min(_smooth(2 * n - 1), key=lambda m: (m * len(radices(m)), m))


def magic(d: int) -> tuple:
    """(multiplier, shift1, shift2) such that floor(x / d) = (t + ((x - t) >> shift1)) >> shift2 with
    t = mulhi(x, multiplier), for every 32-bit x (Granlund and Montgomery)."""
    lg = (d - 1).bit_length()
    return ((((1 << lg) - d) << 32) // d + 1) & 0xFFFFFFFF, min(lg, 1), max(lg - 1, 0)


class Plan(NamedTuple):
    """The passes of length n: radices, each pass's offset into the twiddle table, the table's length
    (the offset of its imaginary parts) and the table (split real / imaginary parts, on the runtime)."""

    n: int
    radices: tuple
    offsets: tuple
    count: int
    twiddles: object


class Bluestein(NamedTuple):
    """Length n through a convolution of length m: the plan of m, the chirp w_t (t < n) and the
    spectrum of conj(w) wrapped to m, scaled by 1 / m (both split real / imaginary parts)."""

    n: int
    m: int
    inner: Plan
    chirp: object
    spectrum: object


def _split(z: np.ndarray, part: np.dtype) -> np.ndarray:
    return np.concatenate([z.real, z.imag]).astype(part)


def _stockham(n: int, part: np.dtype, upload) -> Plan:
    rs = radices(n)
    tables, offsets, ns, count = [], [], 1, 0
    for r in rs:
        offsets.append(count)
        angles = np.arange(1, r)[:, None] * np.arange(ns)[None, :] % (r * ns)
        tables.append(np.exp(-2j * np.pi * angles.reshape(-1) / (r * ns)))
        count += (r - 1) * ns
        ns *= r
    table = _split(np.concatenate(tables), part) if count else np.zeros(2, part)
    return Plan(n, rs, tuple(offsets), count, upload(table))


def chirp(n: int) -> np.ndarray:
    """w_t = exp(-i pi t^2 / n), t < n, in complex128 (t^2 reduced mod 2n first, exactly)."""
    t = np.arange(n, dtype=np.int64)
    return np.exp(-1j * np.pi * ((t * t) % (2 * n)) / n)


def _bluestein(n: int, part: np.dtype, upload) -> Bluestein:
    m = bluestein_length(n)
    w = chirp(n)
    b = np.zeros(m, np.complex128)
    b[:n] = np.conj(w)
    b[m - n + 1:] = np.conj(w[1:])[::-1]
    return Bluestein(n, m, _stockham(m, part, upload), upload(_split(w, part)),
                     upload(_split(np.fft.fft(b) / m, part)))


def _rfft_twiddles(n: int, part: np.dtype, upload):
    return upload(_split(np.exp(-2j * np.pi * np.arange(n // 2 + 1) / n), part))


_KEPT: OrderedDict = OrderedDict()


def _kept(kind: str, n: int, part: np.dtype, runtime, make):
    key = (kind, n, part, runtime)
    found = _KEPT.get(key)
    if found is None:
        upload = (lambda a: a) if runtime is None else runtime.to_device
        found = _KEPT[key] = make(n, part, upload)
        while len(_KEPT) > KEPT:
            _KEPT.popitem(last=False)
    else:
        _KEPT.move_to_end(key)
    return found


def plan_for(n: int, part: np.dtype, runtime) -> Plan | Bluestein:
    """The plan of length n for float dtype `part` (the complex dtype's parts) on `runtime` (None: host)."""
    if radices(n) is not None:
        return _kept("stockham", n, part, runtime, _stockham)
    return _kept("bluestein", n, part, runtime, _bluestein)


def rfft_twiddles(n: int, part: np.dtype, runtime):
    """exp(-2 pi i k / n) for k <= n // 2 (split real / imaginary parts): the real transform's post-twiddle."""
    return _kept("rfft", n, part, runtime, _rfft_twiddles)
