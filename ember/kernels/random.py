"""Counter-based random numbers: Philox4x32-10, the stream every ember backend draws from.

`ember/random.py` defines the stream and its distributions in NumPy (the NumPy backend runs that
definition); these kernels compute the same numbers. Block b of stream (seed, offset) is
Philox4x32-10 of counter (offset + b split in two u32, 0, 0) with key (seed split in two u32).

- 32-bit draws, four per block (element j is word j % 4 of block j // 4):
  `bits` (the raw u32 words); `uniform` in f32/f16/bf16: low + (high - low) * (word >> 8) * 2**-24 in
  f32, rounded to the dtype and clamped to the largest value below `high`, so draws lie in
  [low, high); `normal`: Box-Muller in f32 on word pairs (0, 1) and (2, 3) of each block.
- 64-bit draws, two per block (element j joins words 2(j % 2) and 2(j % 2) + 1 of block j // 2 into a
  u64 w): `uniform` in f64 with 53 random bits, low + (high - low) * (w >> 11) * 2**-53, clamped below
  `high`; `normal` in f64: Box-Muller in f64 on the two draws of a block; `randint`: low + w mod
  (high - low).

A caller that drew n numbers advances `offset` by at least ceil(n / 2) blocks.

Example:
    >>> uniform((2, 2), seed=0).dtype
    dtype('float32')
"""

from __future__ import annotations

import numpy as np

from .. import cube
from ..dtype import f32
from ..random import M0, M1, ROUNDS, W0, W1, philox4x32, split64, uniform_top, words
from ..cube.runtime.base import Runtime
from .common import check_size, cube_dtype, empty, grid

TWO_PI = 6.283185307179586
__all__ = ["bits", "uniform", "normal", "randint", "philox4x32", "bits_reference"]
bits_reference = words  # the NumPy definition of `bits`: bits_reference(n, seed, offset)


@cube.function
def philox_block(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counter (c0..c3) with key (k0, k1): four u32 words."""
    for r in cube.unroll(range(ROUNDS)):
        hi0, lo0 = cube.mulhi(c0, M0), c0 * M0
        hi1, lo1 = cube.mulhi(c2, M1), c2 * M1
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = k0 + W0, k1 + W1
    return c0, c1, c2, c3


@cube.function
def block_words(i, key0, key1, ctr0, ctr1):
    """The four words of block `ctr + i` (the 64-bit counter split in two u32, with carry)."""
    c0 = ctr0 + cube.u32(i)
    c1 = ctr1 + cube.select(c0 < ctr0, cube.u32(1), cube.u32(0))  # carry into the high word
    return philox_block(c0, c1, cube.u32(0), cube.u32(0), key0, key1)


@cube.function
def unit_float(word):
    """A u32 word as an f32 in [0, 1) from its top 24 bits."""
    return cube.f32(word >> 8) * 5.9604644775390625e-08


@cube.kernel
def philox_kernel(out: cube.Array, n: cube.i32, key0: cube.u32, key1: cube.u32, ctr0: cube.u32,
                  ctr1: cube.u32, a: cube.f32, b: cube.f32, top: cube.f32, dist: cube.Comptime[str]):
    i = cube.ABSOLUTE_POS
    if i * 4 < n:
        w = block_words(i, key0, key1, ctr0, ctr1)
        if dist == "bits":
            values = w
        elif dist == "uniform":
            # rounded to the output dtype first: the clamp must see what is stored
            values = tuple(cube.min(cube.f32(cube.cast(a + (b - a) * unit_float(w[j]), out.dtype)), top)
                           for j in range(4))
        else:
            values = ()
            for p in cube.unroll((0, 2)):
                radius = cube.sqrt(-2.0 * cube.log(unit_float(w[p]) + 5.9604644775390625e-08))
                angle = TWO_PI * unit_float(w[p + 1])
                values = values + (a + b * radius * cube.cos(angle), a + b * radius * cube.sin(angle))
        for j in cube.unroll(range(4)):
            if i * 4 + j < n:
                out[i * 4 + j] = cube.cast(values[j], out.dtype)


@cube.function
def words64(i, key0, key1, ctr0, ctr1):
    """The two u64 draws of block `ctr + i`: elements 2i and 2i + 1 of a 64-bit stream."""
    w = block_words(i, key0, key1, ctr0, ctr1)
    return tuple((cube.u64(w[2 * j]) << cube.u64(32)) | cube.u64(w[2 * j + 1]) for j in range(2))


@cube.kernel
def randint_kernel(out: cube.Array, n: cube.i32, key0: cube.u32, key1: cube.u32, ctr0: cube.u32,
                   ctr1: cube.u32, low: cube.i64, span: cube.u64):
    i = cube.ABSOLUTE_POS
    if i * 2 < n:
        w = words64(i, key0, key1, ctr0, ctr1)
        for j in cube.unroll(range(2)):
            if i * 2 + j < n:
                out[i * 2 + j] = cube.cast(low + cube.i64(w[j] % span), out.dtype)


@cube.function
def unit_double(word):
    """A u64 word as an f64 in [0, 1) from its top 53 bits."""
    return cube.f64(word >> cube.u64(11)) * 1.1102230246251565e-16


@cube.kernel
def wide_kernel(out: cube.Array[cube.f64], n: cube.i32, key0: cube.u32, key1: cube.u32, ctr0: cube.u32,
                ctr1: cube.u32, a: cube.f64, b: cube.f64, top: cube.f64, dist: cube.Comptime[str]):
    """f64 draws from 64-bit words: uniform in [a, b) clamped to `top`, or normal (mean a, std b)."""
    i = cube.ABSOLUTE_POS
    if i * 2 < n:
        w = words64(i, key0, key1, ctr0, ctr1)
        if dist == "uniform":
            values = tuple(cube.min(a + (b - a) * unit_double(w[j]), top) for j in range(2))
        else:
            radius = cube.sqrt(-2.0 * cube.log(unit_double(w[0]) + 1.1102230246251565e-16))
            angle = TWO_PI * unit_double(w[1])
            values = (a + b * radius * cube.cos(angle), a + b * radius * cube.sin(angle))
        for j in cube.unroll(range(2)):
            if i * 2 + j < n:
                out[i * 2 + j] = values[j]


def _launch(kernel, per_block: int, op: str, shape, dtype, seed: int, offset: int, *args, runtime=None,
            **comptime) -> np.ndarray:
    """A new array of `shape` and `dtype` on `runtime` (None: the host) filled by `kernel`, one unit per
    Philox block."""
    out = empty(shape, cube_dtype(dtype).np, runtime=runtime)
    check_size(op, out)
    if out.size:
        count, dim = grid(-(-out.size // per_block))
        kernel.launch(count, dim, out.reshape(-1), out.size, *split64(seed), *split64(offset), *args, **comptime)
    return out


def bits(shape, seed: int, offset: int = 0, *, runtime: Runtime | None = None) -> np.ndarray:
    """Raw Philox words (u32) of the stream (seed, offset), on `runtime` (None: NumPy, the host's; as
    for every function here).

    Example:
        >>> bits(3, seed=0).dtype
        dtype('uint32')
    """
    return _launch(philox_kernel, 4, "bits", shape, np.uint32, seed, offset, 0.0, 0.0, 0.0, runtime=runtime,
                   dist="bits")


def uniform(shape, seed: int, offset: int = 0, low: float = 0.0, high: float = 1.0, dtype=f32, *,
            runtime: Runtime | None = None) -> np.ndarray:
    """Uniform numbers in [low, high) of a float dtype (f64 with 53 random bits, others with 24).

    Example:
        >>> u = uniform(1000, seed=7); bool((u >= 0).all() and (u < 1).all())
        True
    """
    t = cube_dtype(dtype)
    top = uniform_top(float(high), float(low), t.np)
    if t.itemsize == 8:
        return _launch(wide_kernel, 2, "uniform", shape, t, seed, offset, float(low), float(high), top,
                       runtime=runtime, dist="uniform")
    return _launch(philox_kernel, 4, "uniform", shape, t, seed, offset, float(low), float(high), top,
                   runtime=runtime, dist="uniform")


def normal(shape, seed: int, offset: int = 0, mean: float = 0.0, std: float = 1.0, dtype=f32, *,
           runtime: Runtime | None = None) -> np.ndarray:
    """Normal numbers with the given mean and standard deviation (Box-Muller; in f64 for f64).

    Example:
        >>> normal((2, 3), seed=1).shape
        (2, 3)
    """
    if cube_dtype(dtype).itemsize == 8:
        return _launch(wide_kernel, 2, "normal", shape, dtype, seed, offset, float(mean), float(std), 0.0,
                       runtime=runtime, dist="normal")
    return _launch(philox_kernel, 4, "normal", shape, dtype, seed, offset, float(mean), float(std), 0.0,
                   runtime=runtime, dist="normal")


def randint(shape, seed: int, offset: int, low: int, high: int, dtype, *,
            runtime: Runtime | None = None) -> np.ndarray:
    """Integers uniform in [low, high) (high > low) as `dtype`.

    Example:
        >>> randint(4, seed=0, offset=0, low=-3, high=3, dtype=np.int32).dtype
        dtype('int32')
    """
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    return _launch(randint_kernel, 2, "randint", shape, dtype, seed, offset, int(low), int(high - low),
                   runtime=runtime)
