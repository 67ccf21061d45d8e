"""Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11), the generator of cuRAND/JAX.

Element j of a stream is lane j % 4 of Philox4x32-10(counter = offset + j // 4, key = seed), where
the counter is a 64-bit block index split in two u32 (the upper 64 counter bits are 0) and the key
is the 64-bit seed split in two u32. The same (seed, offset) gives the same numbers on every target,
and `philox4x32` below is the NumPy reference any backend can use to reproduce a stream exactly.
A caller that drew n numbers advances `offset` by ceil(n / 4).

- `bits`: the raw u32 words.
- `uniform`: low + (high - low) * u with u = (word >> 8) * 2**-24 in [0, 1) (24 random bits, so
  exact in f32; wider dtypes get the same 24-bit values).
- `normal`: Box-Muller on word pairs (0, 1) and (2, 3) of each block, computed in f32.

Example:
    >>> uniform((2, 2), seed=0).dtype
    dtype('float32')
"""

from __future__ import annotations

import numpy as np

from ... import cube
from ...dtype import f32
from .common import check_size, cube_dtype, grid

M0, M1 = 0xD2511F53, 0xCD9E8D57          # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85          # key schedule (golden ratio, sqrt(3) - 1)
ROUNDS = 10
TWO_PI = 6.283185307179586


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
def unit_float(word):
    """A u32 word as an f32 in [0, 1) from its top 24 bits."""
    return cube.f32(word >> 8) * 5.9604644775390625e-08


@cube.kernel
def philox_kernel(out: cube.Array, n: cube.i32, key0: cube.u32, key1: cube.u32, ctr0: cube.u32,
                  ctr1: cube.u32, a: cube.f32, b: cube.f32, dist: cube.Comptime[str]):
    i = cube.ABSOLUTE_POS
    if i * 4 < n:
        c0 = ctr0 + cube.u32(i)
        c1 = ctr1 + cube.select(c0 < ctr0, cube.u32(1), cube.u32(0))  # carry into the high word
        w = philox_block(c0, c1, cube.u32(0), cube.u32(0), key0, key1)
        if dist == "bits":
            values = w
        elif dist == "uniform":
            values = tuple(a + (b - a) * unit_float(w[j]) for j in range(4))
        else:
            values = ()
            for p in cube.unroll((0, 2)):
                radius = cube.sqrt(-2.0 * cube.log(unit_float(w[p]) + 5.9604644775390625e-08))
                angle = TWO_PI * unit_float(w[p + 1])
                values = values + (a + b * radius * cube.cos(angle), a + b * radius * cube.sin(angle))
        for j in cube.unroll(range(4)):
            if i * 4 + j < n:
                out[i * 4 + j] = cube.cast(values[j], out.dtype)


def _split(x: int) -> tuple:
    x &= (1 << 64) - 1
    return x & 0xFFFFFFFF, x >> 32


def _generate(shape, seed: int, offset: int, dist: str, a: float, b: float, dtype) -> np.ndarray:
    out = np.empty(shape, cube_dtype(dtype).np)
    check_size(dist, out)
    if out.size:
        k0, k1 = _split(seed)
        c0, c1 = _split(offset)
        count, dim = grid(-(-out.size // 4))
        philox_kernel.launch(count, dim, out.reshape(-1), out.size, k0, k1, c0, c1, float(a), float(b),
                             dist=dist)
    return out


def bits(shape, seed: int, offset: int = 0) -> np.ndarray:
    """Raw Philox words (u32) of the stream (seed, offset)."""
    return _generate(shape, seed, offset, "bits", 0.0, 0.0, np.uint32)


def uniform(shape, seed: int, offset: int = 0, low: float = 0.0, high: float = 1.0, dtype=f32) -> np.ndarray:
    """Uniform numbers in [low, high).

    Example:
        >>> u = uniform(1000, seed=7); bool((u >= 0).all() and (u < 1).all())
        True
    """
    return _generate(shape, seed, offset, "uniform", low, high, dtype)


def normal(shape, seed: int, offset: int = 0, mean: float = 0.0, std: float = 1.0, dtype=f32) -> np.ndarray:
    """Normal numbers with the given mean and standard deviation (Box-Muller)."""
    return _generate(shape, seed, offset, "normal", mean, std, dtype)


# ----------------------------------------------------------------------------------------------
# NumPy reference

def philox4x32(counters: np.ndarray, key: tuple) -> np.ndarray:
    """Philox4x32-10 of each row of `counters` (shape (n, 4), u32) with `key` (k0, k1): (n, 4) u32.

    Example:
        >>> philox4x32(np.zeros((1, 4), np.uint32), (0, 0))[0].tolist() == \\
        ...     [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
        True
    """
    c = [counters[:, j].astype(np.uint64) for j in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(ROUNDS):
        p0 = c[0] * np.uint64(M0)
        p1 = c[2] * np.uint64(M1)
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & mask]
        k0, k1 = (k0 + np.uint64(W0)) & mask, (k1 + np.uint64(W1)) & mask
    return np.stack(c, axis=1).astype(np.uint32)


def bits_reference(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """The first `n` words of stream (seed, offset), computed with NumPy."""
    blocks = -(-n // 4)
    index = np.arange(blocks, dtype=np.uint64) + np.uint64(offset & ((1 << 64) - 1))
    counters = np.zeros((blocks, 4), np.uint32)
    counters[:, 0] = (index & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    counters[:, 1] = (index >> np.uint64(32)).astype(np.uint32)
    return philox4x32(counters, _split(seed)).reshape(-1)[:n]
