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


def _blocks(xs: np.ndarray, block: int) -> np.ndarray:
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


def quantize(x: np.ndarray, scheme: QuantScheme) -> dict[str, np.ndarray]:
    """The stored parts of `x` quantized with `scheme` (values, scales, and zeros / scales2 / offset
    where the scheme has them)."""
    scheme.check(x.shape)
    shapes = scheme.parts(x.shape)
    xs = to_storage(np.asarray(x, np.float32), scheme)
    k = xs.shape[-1]
    blocks = _blocks(xs, scheme.block_for(k))
    per_tensor = scheme.level == "tensor"
    axes = tuple(range(blocks.ndim)) if per_tensor else -1

    def stat(fn):
        return fn(blocks, axis=axes, keepdims=True) if blocks.size else np.zeros(blocks.shape[:-1] + (1,), np.float32)

    absmax = stat(lambda b, **kw: np.abs(b).max(**kw))
    parts: dict[str, np.ndarray] = {}
    if scheme.param == "ue8m0":
        exponent = np.frexp(absmax)[1] - 1 - MX_ELEMENT_EMAX
        exponent = np.clip(np.where(absmax > 0, exponent, -127), -127, 127)
        ldexp = np.ldexp(blocks, -exponent).astype(np.float32)
        codes = _float_codes(ldexp, scheme)
        parts["scales"] = (exponent + 127).astype(np.uint8)
    else:
        if scheme.mode == "affine":
            lo = np.minimum(stat(np.min), 0)
            hi = np.maximum(stat(np.max), 0)
            scale = _rounded((hi - lo) / np.float32(scheme.qrange[1]), scheme)
        else:
            top = {"nf4": 1.0}.get(scheme.value, FLOAT_CODES.get(scheme.value, (0, scheme.qrange[1]))[1])
            scale = _rounded(absmax / np.float32(top), scheme)
        inv = _inverse(scale)
        y = blocks * inv
        if scheme.is_int:
            qlo, qhi = scheme.qrange
            zero = np.clip(np.round(-lo * inv), qlo, qhi) if scheme.mode == "affine" else 0
            codes = (np.clip(np.round(y) + zero, qlo, qhi).astype(np.int64) & (2 ** scheme.bits - 1)).astype(np.uint8)
            if scheme.mode == "affine":
                parts["zeros"] = np.asarray(zero).astype(np.uint8)
        elif scheme.value == "nf4":
            codes = np.searchsorted(NF4_MIDPOINTS, y, side="left").astype(np.uint8)
        else:
            codes = _float_codes(y, scheme)
        parts["scales"] = scale.astype(scheme.scale_dtype.np)
    codes = codes.reshape(blocks.shape[:-2] + (-1,))[..., :k]
    out = {"values": pack(codes, scheme.bits)}
    for name, part in parts.items():
        out[name] = part.reshape(shapes[name])
    if scheme.double_quant:
        out.update(_double_quantize(out["scales"]))
    return out


def _float_codes(y: np.ndarray, scheme: QuantScheme) -> np.ndarray:
    import ml_dtypes
    kind, top, _, _ = FLOAT_CODES[scheme.value]
    y = np.where(y == 0, np.float32(0), y)  # a zero encodes as +0, as ember's composition does
    return np.clip(y, -top, top).astype(getattr(ml_dtypes, kind)).view(np.uint8) & (2 ** scheme.bits - 1)


def _double_quantize(scales: np.ndarray) -> dict[str, np.ndarray]:
    """NF4's second level: the f32 scales less their midrange, int8 codes per block of 256."""
    flat = scales.reshape(-1)
    offset = (flat.max() + flat.min()) * np.float32(0.5) if flat.size else np.float32(0)
    blocks = _blocks((flat - offset)[None], DOUBLE_QUANT_BLOCK)[0]
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
