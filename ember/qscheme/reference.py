"""NumPy references of quantization: `quantize(x, scheme) -> parts` and `dequantize(parts, scheme, shape)`,
exact for every value type, and the packing of codes into bytes (docs/quantization.md, "How the parts are stored"). They are the test
oracle of ember's on-device compositions (`ember/api/quantize.py`) and written independently of them:
fp8 and fp4 codes come from `ml_dtypes`' round-to-nearest-even casts (values saturated to the format's
largest finite), NF4 codes are the nearest entry of bitsandbytes' codebook, the MX shared exponent is
`frexp`'s. The rules (docs/quantization.md): a scale is rounded to its dtype before codes are made;
codes are `round_half_even(x * (1 / scale))` (PyTorch's fake_quantize order), integer codes clamped to
`scheme.qrange`; dequantized `scale * (code_value - zero)` in f32.

Example:
    >>> parts = quantize(np.array([[0.5, -1.0, 0.25]], np.float32), int8(axis=0))
    >>> dequantize(parts, int8(axis=0), (1, 3)).round(3).tolist()
    [[0.5, -1.0, 0.252]]
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantSchemeError
from .scheme import DOUBLE_QUANT_BLOCK, QuantScheme

NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], np.float32)
"""QLoRA's NormalFloat-4 codebook, exactly bitsandbytes' (`get_4bit_type("nf4")`), by code 0..15."""
NF4_MIDPOINTS = ((NF4[:-1].astype(np.float64) + NF4[1:]) / 2).astype(np.float32)
"""The decision thresholds of NF4 quantization (bitsandbytes' `dQuantizeNF4` constants): the code of y
is the number of midpoints below it, so a value exactly on one takes the lower code."""
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
"""The OCP MX fp4 e2m1 values by bit pattern (sign, 2 exponent bits, 1 mantissa bit)."""
FLOAT_CODES = {"fp8_e4m3": ("float8_e4m3fn", 448.0, -6, 3), "fp8_e5m2": ("float8_e5m2", 57344.0, -14, 2),
               "fp4_e2m1": ("float4_e2m1fn", 6.0, 0, 1)}
"""value -> (ml_dtypes type, largest finite, smallest normal exponent, mantissa bits)."""
MX_ELEMENT_EMAX = 2
"""The exponent of e2m1's largest power of two (4): the MX shared exponent is floor(log2(amax)) - 2."""
METHODS = ("absmax", "mse")
"""How quantize chooses scales: "absmax" (the block's range as is) or "mse" (the range clipped by the
ratio of `MSE_CLIP_RATIOS` that gives the least squared error)."""
MSE_CLIP_RATIOS = tuple(float(np.float32(1 - i / 50)) for i in range(26))
"""The clip ratios the "mse" method tries, 1.0 down to 0.5 by 0.02 (f32 values)."""


def code_values(scheme: QuantScheme) -> np.ndarray:
    """The f32 value of each code 0 .. 2^bits - 1 (two's complement for symmetric integers)."""
    n = 2 ** scheme.bits
    codes = np.arange(n)
    if scheme.value == "nf4":
        return NF4
    if scheme.value == "fp4_e2m1":
        return E2M1
    if scheme.value in FLOAT_CODES:
        import ml_dtypes
        return codes.astype(np.uint8).view(getattr(ml_dtypes, FLOAT_CODES[scheme.value][0])).astype(np.float32)
    if scheme.mode == "affine":
        return codes.astype(np.float32)
    return np.where(codes < n // 2, codes, codes - n).astype(np.float32)


def ue8m0_values() -> np.ndarray:
    """The f32 scale of each UE8M0 code: 2^(e - 127), e = 255 NaN."""
    return np.append(np.ldexp(np.float32(1), np.arange(255) - 127), np.nan).astype(np.float32)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes (..., K) of `bits` each into bytes (..., ceil(K * bits / 8)), code j of a byte in bits
    j*bits.. (low first); the missing codes of a last byte are 0."""
    per = 8 // bits
    k = codes.shape[-1]
    padded = np.zeros(codes.shape[:-1] + (-(-k // per) * per,), np.uint8)
    padded[..., :k] = codes
    groups = padded.reshape(codes.shape[:-1] + (-1, per)).astype(np.uint16)
    return sum(groups[..., j] << (bits * j) for j in range(per)).astype(np.uint8)


def unpack(values: np.ndarray, bits: int, k: int) -> np.ndarray:
    """The inverse of `pack`: codes (..., k) from bytes."""
    per = 8 // bits
    mask = 2 ** bits - 1
    codes = np.stack([(values >> (bits * j)) & mask for j in range(per)], axis=-1)
    return codes.reshape(values.shape[:-1] + (-1,))[..., :k].astype(np.uint8)


def to_storage(x: np.ndarray, scheme: QuantScheme) -> np.ndarray:
    """`x` laid out as its codes are stored: (leading..., K)."""
    rows, k = scheme.storage(x.shape)
    if scheme.level == "channel":
        x = np.moveaxis(x, scheme.axis, 0)
    return x.reshape(rows + (k,))


def from_storage(y: np.ndarray, scheme: QuantScheme, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of `to_storage` for a tensor of logical `shape`."""
    if scheme.level != "channel":
        return y.reshape(shape)
    axis = scheme.axis % len(shape)
    moved = (shape[axis],) + shape[:axis] + shape[axis + 1:]
    return np.moveaxis(y.reshape(moved), 0, axis)


def blocks_of(xs: np.ndarray, block: int) -> np.ndarray:
    """(..., K) -> (..., nb, block), zero padded."""
    k = xs.shape[-1]
    nb = -(-k // block)
    padded = np.zeros(xs.shape[:-1] + (nb * block,), np.float32)
    padded[..., :k] = xs
    return padded.reshape(xs.shape[:-1] + (nb, block))


def _rounded(scale: np.ndarray, scheme: QuantScheme) -> np.ndarray:
    return scale.astype(scheme.scale_dtype.np).astype(np.float32)


def _inverse(scale: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(scale > 0, np.float32(1) / scale, np.float32(0)).astype(np.float32)


def quantize(x: np.ndarray, scheme: QuantScheme, method: str = "absmax") -> dict[str, np.ndarray]:
    """The stored parts of `x` quantized with `scheme` (values, scales, and zeros / scales2 / offset
    where the scheme has them). `method`: "absmax" (the scale rule above) or "mse" (each block's range
    clipped by the ratio of `MSE_CLIP_RATIOS` whose codes give the least squared error, `mse_ratios`)."""
    scheme.check(x.shape)
    check_method(method, scheme, x.shape)
    shapes = scheme.parts(x.shape)
    xs = to_storage(np.asarray(x, np.float32), scheme)
    k = xs.shape[-1]
    blocks = blocks_of(xs, scheme.block_for(k))
    _, inv, zero, parts = qparams(blocks, scheme, method)
    out = {"values": pack(codes(blocks, inv, zero, scheme).reshape(blocks.shape[:-2] + (-1,))[..., :k], scheme.bits)}
    for name, part in parts.items():
        out[name] = part.reshape(shapes[name])
    if scheme.double_quant:
        out.update(double_quantize(out["scales"]))
    return out


def check_method(method: str, scheme: QuantScheme, shape: tuple[int, ...]) -> None:
    """Raise `QuantSchemeError` unless `method` is a scale rule quantize knows."""
    if method not in METHODS:
        raise QuantSchemeError(f"{scheme}: quantize method {method!r} (shape {shape}) is not one of "
                               f"{', '.join(METHODS)}")


def qparams(blocks: np.ndarray, scheme: QuantScheme, method: str = "absmax"):
    """(f32 scale, its inverse, zero point or 0, stored parts) of f32 `blocks` (..., nb, block) by
    `method`, each of shape (..., nb, 1) (per tensor: all ones)."""
    stats = _stats(blocks, scheme)
    return _params(stats, scheme, mse_ratios(blocks, stats, scheme) if method == "mse" else None)


def _stats(blocks: np.ndarray, scheme: QuantScheme) -> dict[str, np.ndarray]:
    """The blocks' abs-max, and min / max for affine schemes, shaped (..., nb, 1) (per tensor: all ones)."""
    axes = tuple(range(blocks.ndim)) if scheme.level == "tensor" else -1

    def stat(fn):
        return fn(blocks, axis=axes, keepdims=True) if blocks.size else np.zeros(blocks.shape[:-1] + (1,), np.float32)

    if scheme.mode == "affine":
        return {"lo": np.minimum(stat(np.min), 0), "hi": np.maximum(stat(np.max), 0)}
    return {"absmax": stat(lambda b, **kw: np.abs(b).max(**kw))}


def _params(stats: dict[str, np.ndarray], scheme: QuantScheme, ratio: np.ndarray | None):
    """(f32 scale, its inverse, zero point or 0, stored parts) of blocks whose range is `stats` times
    `ratio`."""
    clip = {n: v if ratio is None else (v * ratio).astype(np.float32) for n, v in stats.items()}
    if scheme.param == "ue8m0":
        absmax = clip["absmax"]
        exponent = np.frexp(absmax)[1] - 1 - MX_ELEMENT_EMAX
        exponent = np.clip(np.where(absmax > 0, exponent, -127), -127, 127)
        return (np.ldexp(np.float32(1), exponent).astype(np.float32), np.ldexp(np.float32(1), -exponent).astype(np.float32),
                0, {"scales": (exponent + 127).astype(np.uint8)})
    if scheme.mode == "affine":
        lo = clip["lo"]
        scale = _rounded((clip["hi"] - lo) / np.float32(scheme.qrange[1]), scheme)
        inv = _inverse(scale)
        zero = np.clip(np.round(-lo * inv), *scheme.qrange)
        return scale, inv, zero, {"scales": scale.astype(scheme.scale_dtype.np), "zeros": zero.astype(np.uint8)}
    top = {"nf4": 1.0}.get(scheme.value, FLOAT_CODES.get(scheme.value, (0, scheme.qrange[1]))[1])
    scale = _rounded(clip["absmax"] / np.float32(top), scheme)
    return scale, _inverse(scale), 0, {"scales": scale.astype(scheme.scale_dtype.np)}


def codes(blocks: np.ndarray, inv: np.ndarray, zero, scheme: QuantScheme) -> np.ndarray:
    """The uint8 code patterns of `blocks` with the inverse scale `inv` (and `zero`) of each block."""
    y = blocks * inv
    if scheme.is_int:
        qlo, qhi = scheme.qrange
        return (np.clip(np.round(y) + zero, qlo, qhi).astype(np.int64) & (2 ** scheme.bits - 1)).astype(np.uint8)
    if scheme.value == "nf4":
        return np.searchsorted(NF4_MIDPOINTS, y, side="left").astype(np.uint8)
    return _float_codes(y, scheme)


def block_sum(x: np.ndarray) -> np.ndarray:
    """The sum over the last axis in a fixed order, so that every device adds the same way: padded with
    zeros to a power of two, then the first half plus the second, until one is left (keepdims)."""
    n = x.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    x = np.concatenate([x, np.zeros(x.shape[:-1] + (width - n,), x.dtype)], axis=-1)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x


def mse_ratios(blocks: np.ndarray, stats: dict[str, np.ndarray], scheme: QuantScheme) -> np.ndarray:
    """For each block, the entry of `MSE_CLIP_RATIOS` whose clipped range gives codes of least squared
    error `sum((x - dequantized)^2)` (summed by `block_sum`; the first, largest ratio on ties)."""
    table = code_values(scheme)
    flat = blocks.reshape(1, -1) if scheme.level == "tensor" else blocks
    best_ratio = best_error = None
    for r in MSE_CLIP_RATIOS:
        ratio = np.full(next(iter(stats.values())).shape, r, np.float32)
        scale, inv, zero, _ = _params(stats, scheme, ratio)
        values = scale * (table[codes(blocks, inv, zero, scheme)] - np.float32(zero))
        d = blocks - values
        error = block_sum((d * d).reshape(flat.shape)).reshape(ratio.shape)
        if best_error is None:
            best_ratio, best_error = ratio, error
        else:
            better = error < best_error
            best_ratio, best_error = np.where(better, ratio, best_ratio), np.where(better, error, best_error)
    return best_ratio


def _float_codes(y: np.ndarray, scheme: QuantScheme) -> np.ndarray:
    import ml_dtypes
    kind, top, _, _ = FLOAT_CODES[scheme.value]
    y = np.where(y == 0, np.float32(0), y)  # a zero encodes as +0, as ember's composition does
    return np.clip(y, -top, top).astype(getattr(ml_dtypes, kind)).view(np.uint8) & (2 ** scheme.bits - 1)


def double_quantize(scales: np.ndarray) -> dict[str, np.ndarray]:
    """NF4's second level: the f32 scales less their midrange, int8 codes per block of 256."""
    flat = scales.reshape(-1)
    offset = (flat.max() + flat.min()) * np.float32(0.5) if flat.size else np.float32(0)
    blocks = blocks_of((flat - offset)[None], DOUBLE_QUANT_BLOCK)[0]
    scale2 = (np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float32)
    codes = np.clip(np.round(blocks * _inverse(scale2)), -127, 127).astype(np.int8).view(np.uint8)
    return {"scales": codes.reshape(-1)[:flat.size].reshape(scales.shape), "scales2": scale2.reshape(-1),
            "offset": np.array([offset], np.float32)}


def float_scales(parts: dict[str, np.ndarray], scheme: QuantScheme) -> np.ndarray:
    """The f32 scales of `parts` (double quantization undone, UE8M0 exponents made powers of two)."""
    scales = parts["scales"]
    if scheme.param == "ue8m0":
        return ue8m0_values()[scales]
    if not scheme.double_quant:
        return scales.astype(np.float32)
    codes = scales.reshape(-1).view(np.int8).astype(np.float32)
    per_code = np.repeat(parts["scales2"], DOUBLE_QUANT_BLOCK)[:codes.size]
    return (codes * per_code + parts["offset"][0]).reshape(scales.shape).astype(np.float32)


def dequantize(parts: dict[str, np.ndarray], scheme: QuantScheme, shape: tuple[int, ...],
               dtype=np.float32) -> np.ndarray:
    """The tensor of logical `shape` that `parts` hold, as `dtype` (computed in f32)."""
    rows, k = scheme.storage(shape)
    values = code_values(scheme)[unpack(parts["values"], scheme.bits, k)]
    scales = float_scales(parts, scheme)
    zeros = parts["zeros"].astype(np.float32) if "zeros" in parts else None
    if scheme.level == "tensor":
        out = scales[0] * (values - zeros[0]) if zeros is not None else scales[0] * values
    else:
        block = scheme.block_for(k)
        scale = np.repeat(scales, block, axis=-1)[..., :k]
        out = scale * (values - np.repeat(zeros, block, axis=-1)[..., :k]) if zeros is not None else scale * values
    return from_storage(out.astype(np.float32), scheme, shape).astype(dtype)
