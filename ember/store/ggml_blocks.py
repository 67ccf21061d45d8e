"""ggml's quantized blocks (Q8_0, Q4_0, Q4_K, Q6_K) decoded with NumPy, bit for bit as ggml does.

A quantized row of K elements is K / block blocks of `type_size` bytes each; `dequantize` turns the
bytes of rows, shape (..., K // block * type_size), into f32 values of shape (..., K), computing every
product in f32 in ggml's order (`gguf.quants.dequantize` gives the same bits). `parts` gives Q8_0 and
Q4_0 in ember's quantized-tensor layout (docs/store.md, "GGUF"): codes as uint8 (int8 bytes; int4
two's complement nibbles, element 2j low), one f16 scale per block of 32, no zero point. Q4_K and
Q6_K have no such layout: their 6- and 8-bit sub-block scales multiply a per-super-block f16.

Example:
    >>> dequantize(np.zeros((2, 34), np.uint8), "Q8_0").shape
    (2, 32)
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCKS", "dequantize", "parts"]

# ggml type name -> (elements per block, bytes per block)
BLOCKS: dict[str, tuple[int, int]] = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_K": (256, 144), "Q6_K": (256, 210)}
_CHUNK = 1 << 14  # blocks decoded at a time, bounding the temporaries to a few MB


def _f16(raw: np.ndarray) -> np.ndarray:
    """Little-endian f16 fields, (n, 2) bytes, as f32 of shape (n, 1)."""
    return np.ascontiguousarray(raw).view("<f2").astype(np.float32)


def _nibbles(raw: np.ndarray, axis: int) -> np.ndarray:
    """The low nibbles of `raw`, then its high nibbles, concatenated along `axis`."""
    return np.concatenate([raw & 0x0F, raw >> 4], axis=axis)


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    # d: f16; qs[32]: int8. x = d * q
    return _f16(blocks[:, :2]) * blocks[:, 2:].view(np.int8).astype(np.float32)


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    # d: f16; qs[16]: element j in the low nibble of byte j, element j + 16 in its high one. x = d * (q - 8)
    return _f16(blocks[:, :2]) * (_nibbles(blocks[:, 2:], 1).astype(np.float32) - 8)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    # d, dmin: f16; 12 bytes of eight 6-bit (scale, min) pairs; qs[128]: 4 chunks of 32 bytes, each the
    # low nibbles of one 32-element sub-block then the high nibbles of the next. x = d*sc * q - dmin*m
    n = len(blocks)
    a, b, c = blocks[:, 4:8], blocks[:, 8:12], blocks[:, 12:16]
    sc = np.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 6) << 4)], axis=1).astype(np.float32)
    mn = np.concatenate([b & 0x3F, (c >> 4) | ((b >> 6) << 4)], axis=1).astype(np.float32)
    scale, offset = _f16(blocks[:, :2]) * sc, _f16(blocks[:, 2:4]) * mn
    q = _nibbles(blocks[:, 16:].reshape(n, 4, 1, 32), 2).reshape(n, 8, 32).astype(np.float32)
    return (scale[:, :, None] * q - offset[:, :, None]).reshape(n, 256)


_Q6_SHIFTS = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    # ql[128]: low 4 bits; qh[64]: high 2 bits; sc[16]: int8 per 16 elements; d: f16. Per half of 128
    # elements, quarter c, index l < 32: ql[32 (c % 2) + l] nibble c // 2, qh[l] bits 2c. x = d*sc * (q - 32)
    n = len(blocks)
    low = _nibbles(blocks[:, :128].reshape(n, 2, 1, 2, 32), 2).reshape(n, 2, 4, 32)
    high = (blocks[:, 128:192].reshape(n, 2, 1, 32) >> _Q6_SHIFTS) & 0x03
    q = ((low | (high << 4)).astype(np.float32) - 32).reshape(n, 16, 16)
    scale = _f16(blocks[:, 208:210]) * blocks[:, 192:208].view(np.int8).astype(np.float32)
    return (scale[:, :, None] * q).reshape(n, 256)


_DECODERS = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_K": _q4_k, "Q6_K": _q6_k}


def _blocks(data: np.ndarray, kind: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """The bytes of rows as (n_blocks, type_size), and the rows' shape in elements."""
    block, size = BLOCKS[kind]
    shape = (*data.shape[:-1], data.shape[-1] // size * block)
    return np.ascontiguousarray(data, np.uint8).reshape(-1, size), shape


def dequantize(data: np.ndarray, kind: str) -> np.ndarray:
    """f32 values of rows of `kind` blocks: bytes (..., K // block * type_size) -> (..., K).

    Example:
        >>> dequantize(np.zeros((3, 144), np.uint8), "Q4_K").shape
        (3, 256)
    """
    blocks, shape = _blocks(data, kind)
    block, decode = BLOCKS[kind][0], _DECODERS[kind]
    out = np.empty((len(blocks), block), np.float32)
    for start in range(0, len(blocks), _CHUNK):
        out[start:start + _CHUNK] = decode(blocks[start:start + _CHUNK])
    return out.reshape(shape)


def parts(data: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Q8_0 or Q4_0 rows as `(values, scales)`: uint8 codes, (..., K) or (..., K / 2), and f16 scales,
    (..., K / 32), with `scale[k // 32] * code(k)` equal to ggml's value of element k.

    Example:
        >>> values, scales = parts(np.zeros((3, 18), np.uint8), "Q4_0")
        >>> values.shape, scales.shape, scales.dtype
        ((3, 16), (3, 1), dtype('float16'))
    """
    blocks, shape = _blocks(data, kind)
    scales = blocks[:, :2].copy().view("<f2").astype(np.float16).reshape(*shape[:-1], shape[-1] // 32)
    if kind == "Q8_0":
        return blocks[:, 2:].reshape(shape), scales
    if kind != "Q4_0":
        raise ValueError(f"{kind} has no (values, scales) layout; only Q8_0 and Q4_0 do")
    # ggml's code q stands for q - 8, whose 4-bit two's complement is q ^ 8; repack in element order
    codes = _nibbles(blocks[:, 2:], 1) ^ 0x08
    values = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return values.reshape(*shape[:-1], shape[-1] // 2), scales
