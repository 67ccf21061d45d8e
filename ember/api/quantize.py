"""Quantized tensors: `QTensor` (ordinary tensors + a scheme + the logical shape, docs/quantization.md),
`quantize`, `dequantize` and `fake_quantize`, composed of ember ops (reductions, round, clamp, where,
casts, shifts and masks, a gather from the code table), so they run, fuse and differentiate on every
device. They compute exactly what `ember.qscheme.reference` computes (docs/quantization.md): codes
equal, dequantized values equal. Floating codes (fp8, fp4) are made without bit casts: a value's
exponent comes from a binary search of exact power-of-two comparisons, its mantissa from `round`.

Example:
    >>> q = ember.randn(4, 64).quantize(ember.quant.int4(block=32))
    >>> q.shape, q.nbytes, q.dequantize().dtype
    ((4, 64), 160, f32)
"""

from __future__ import annotations

import math

import numpy as np

from ..dtype import f32, i32, u8, dtype_of
from ..errors import QuantSchemeError
from ..qscheme import DOUBLE_QUANT_BLOCK, QType, QuantScheme, qtype, reference
from ..tensor import Tensor, from_host
from .creation import zeros
from .math import where
from .shape import pad, stack

__all__ = ["QTensor", "quantize", "dequantize", "fake_quantize"]


class QTensor:
    """A quantized tensor: `parts` (uint8 `values`, `scales`, and `zeros`, `scales2`, `offset` where the
    scheme has them), its `scheme` and logical `shape`. Immutable; `to(device)` moves every part."""

    __slots__ = ("scheme", "shape", "parts")

    def __init__(self, scheme: QuantScheme, shape: tuple[int, ...], parts: dict[str, Tensor]) -> None:
        shape = tuple(int(n) for n in shape)
        scheme.check(shape)
        expected = scheme.parts(shape)
        if set(parts) != set(expected):
            raise QuantSchemeError(f"{scheme}: a tensor of shape {shape} has parts {sorted(expected)}, "
                                   f"got {sorted(parts)}")
        for name, part in parts.items():
            dtype = _part_dtype(scheme, name)
            if tuple(part.shape) != expected[name] or part.dtype != dtype:
                raise QuantSchemeError(f"{scheme}: part {name!r} of a tensor of shape {shape} must be "
                                       f"{dtype} of shape {expected[name]}, got {part.dtype} of shape "
                                       f"{tuple(part.shape)}")
        self.scheme, self.shape, self.parts = scheme, shape, dict(parts)

    @property
    def dtype(self) -> QType:
        return qtype(self.scheme)

    @property
    def device(self):
        return self.parts["values"].device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The bytes its parts hold."""
        return sum(p.numel * p.dtype.itemsize for p in self.parts.values())

    def to(self, device) -> "QTensor":
        """The same quantized tensor on `device` (a quantized tensor is not cast: dequantize it)."""
        return QTensor(self.scheme, self.shape, {k: v.to(device) for k, v in self.parts.items()})

    def detach(self) -> "QTensor":
        return self

    def dequantize(self, dtype=f32) -> Tensor:
        """The values it stands for, as `dtype` (computed in f32)."""
        return dequantize(self, dtype)

    def float_scales(self) -> Tensor:
        """The f32 scales (double quantization undone; UE8M0 exponents made powers of two)."""
        return _float_scales(self)

    def kernel_args(self) -> dict:
        """What the quantized matmul takes for this tensor as its weight: values, scales (as stored:
        f32, f16, bf16 or UE8M0; double quantization undone), zeros, code, block, k (docs/quantization.md,
        "How the parts are stored")."""
        rows, k = self.scheme.storage(self.shape)
        scales = _float_scales(self) if self.scheme.double_quant else self.parts["scales"]
        return {"values": self.parts["values"], "scales": scales, "zeros": self.parts.get("zeros"),
                "code": self.scheme.code, "block": self.scheme.block_for(k), "k": k}

    def __repr__(self) -> str:
        return (f"QTensor(shape={self.shape}, scheme={self.scheme}, device={self.device!r}, "
                f"nbytes={self.nbytes})")


def _part_dtype(scheme: QuantScheme, name: str):
    if name == "scales" and (scheme.param == "ue8m0" or scheme.double_quant):
        return u8
    return {"values": u8, "zeros": u8, "scales2": f32, "offset": f32}.get(name) or scheme.scale_dtype


_CONSTANTS: dict[tuple, Tensor] = {}


def _constant(key: tuple, make, device) -> Tensor:
    """A constant host table `make()` on `device`, uploaded once per (key, device)."""
    hit = _CONSTANTS.get((key, device))
    if hit is None:
        hit = _CONSTANTS[(key, device)] = from_host(np.ascontiguousarray(make()), device)
    return hit


def _lookup(table: Tensor, codes: Tensor) -> Tensor:
    """`table[codes]` for integer codes of any shape."""
    return table.index_select(0, codes.reshape(-1)).reshape(codes.shape)


# ---- layout ----------------------------------------------------------------------------------------

def _to_storage(x: Tensor, scheme: QuantScheme) -> Tensor:
    rows, k = scheme.storage(x.shape)
    if scheme.level == "channel":
        x = x.movedim(scheme.axis, 0)
    return x.reshape(rows + (k,))


def _from_storage(y: Tensor, scheme: QuantScheme, shape: tuple[int, ...]) -> Tensor:
    if scheme.level != "channel":
        return y.reshape(shape)
    axis = scheme.axis % len(shape)
    return y.reshape((shape[axis],) + shape[:axis] + shape[axis + 1:]).movedim(0, axis)


def _blocks(xs: Tensor, block: int) -> Tensor:
    """(..., K) -> (..., nb, block), padded with the value 0."""
    k = xs.shape[-1]
    nb = -(-k // block)
    return pad(xs, (0, nb * block - k)).reshape(xs.shape[:-1] + (nb, block))


def _pack(codes: Tensor, bits: int) -> Tensor:
    """i32 codes (..., K) into uint8 bytes (..., ceil(K * bits / 8)), low bits first."""
    per = 8 // bits
    if per == 1:
        return codes.cast(u8)
    k = codes.shape[-1]
    groups = pad(codes, (0, -(-k // per) * per - k)).reshape(codes.shape[:-1] + (-1, per))
    byte = groups[..., 0]
    for j in range(1, per):
        byte = byte | (groups[..., j] << (bits * j))
    return byte.cast(u8)


def _unpack(values: Tensor, bits: int, k: int) -> Tensor:
    """uint8 bytes (..., n) into i32 codes (..., k)."""
    v = values.cast(i32)
    per = 8 // bits
    if per == 1:
        return v
    mask = 2 ** bits - 1
    codes = stack([(v >> (bits * j)) & mask for j in range(per)], dim=-1)
    return codes.reshape(values.shape[:-1] + (-1,))[..., :k]


# ---- floating codes without bit casts ---------------------------------------------------------------

def _exponent(a: Tensor, low: int, high: int) -> tuple[Tensor, Tensor, Tensor]:
    """(e, r, 2^-e) for normal a > 0 with 2^low <= a < 2^(high + 1): e = floor(log2 a), r = a * 2^-e in
    [1, 2). A binary search of exact comparisons and power-of-two products (no log2, no bit cast)."""
    r, e, inv = a, a.zeros_like(), a.ones_like()
    for s in _steps(high):
        c = r >= 2.0 ** s
        r, e, inv = where(c, r * 2.0 ** -s, r), where(c, e + s, e), where(c, inv * 2.0 ** -s, inv)
    for s in _steps(-low):
        c = r < 2.0 ** (1 - s)
        r, e, inv = where(c, r * 2.0 ** s, r), where(c, e - s, e), where(c, inv * 2.0 ** s, inv)
    return e, r, inv


def _steps(span: int) -> list[int]:
    """Powers of two, largest first, whose greedy sum reaches any of 0..span."""
    return [2 ** j for j in reversed(range(max(span, 0).bit_length()))]


def _float_codes(y: Tensor, value: str) -> Tensor:
    """The OCP bit patterns (i32) of f32 `y` rounded to nearest even into the fp8/fp4 type `value`,
    saturated to its largest finite; a zero encodes as +0."""
    _, top, emin, mbits = reference.FLOAT_CODES[value]
    emax = math.floor(math.log2(top))
    a = y.abs().clamp(max=top)
    e, r, _ = _exponent(a.clamp(min=2.0 ** emin), emin, emax)
    r = where(a >= 2.0 ** emin, r, a * 2.0 ** -emin)
    code = (r * 2.0 ** mbits).round() + (e - emin) * 2.0 ** mbits
    sign = 8 if value == "fp4_e2m1" else 128
    return where(y < 0, code + sign, code).cast(i32)


# ---- quantize and dequantize -------------------------------------------------------------------------

def quantize(x: Tensor, scheme: QuantScheme, scales: Tensor | float | None = None,
             zeros_: Tensor | int | None = None, method: str = "absmax") -> QTensor:
    """`x` quantized with `scheme`. `scales` (and for affine schemes `zeros_`, in code units) fix the
    scales instead of taking them from `x` (static activation quantization: per-tensor calibrated
    ranges); otherwise `method` makes them: "absmax" (the abs-max, affine: min/max, rule of the scheme)
    or "mse" (each block's range clipped by the ratio of `MSE_CLIP_RATIOS` whose codes give the least
    squared error; docs/quantization.md, "Scale search")."""
    if not isinstance(scheme, QuantScheme):
        raise TypeError(f"quantize: expected a QuantScheme (ember.quant.int8(), ...), got {type(scheme).__name__}")
    if not x.dtype.is_float:
        raise QuantSchemeError(f"{scheme}: quantize takes a float tensor, got {x.dtype} of shape {x.shape}")
    shape = tuple(x.shape)
    scheme.check(shape)
    reference.check_method(method, scheme, shape)
    home, device = x.device, x.device.inner  # computed untracked; the parts live where x does
    x = x.detach().to(device).cast(f32)
    expected = scheme.parts(shape)
    if x.numel == 0:
        return QTensor(scheme, shape, {n: zeros(s, dtype=_part_dtype(scheme, n), device=device)
                                       for n, s in expected.items()}).to(home)
    xs = _to_storage(x, scheme)
    k = xs.shape[-1]
    blocks = _blocks(xs, scheme.block_for(k))
    if scales is not None:
        if scheme.mode == "affine" and zeros_ is None:
            raise QuantSchemeError(f"{scheme}: quantize with fixed scales needs the zero points (zeros_) "
                                   f"of an affine scheme (shape {shape})")
        scale = _given(scales, _stat_shape(blocks, scheme), device).cast(scheme.scale_dtype).cast(f32)
        inv, zero = _inverse(scale), 0.0
        parts = {"scales": scale.cast(scheme.scale_dtype)}
        if scheme.mode == "affine":
            zero = _given(zeros_, scale.shape, device)
            parts["zeros"] = zero.cast(u8)
    else:
        stats = _stats(blocks, scheme)
        ratio = _mse_ratios(blocks, stats, scheme) if method == "mse" else None
        scale, inv, zero, parts = _params(stats, scheme, ratio)
    codes = _codes(blocks, inv, zero, scheme)
    codes = codes.reshape(blocks.shape[:-2] + (-1,))[..., :k]
    out = {"values": _pack(codes, scheme.bits)}
    out.update({n: p.reshape(expected[n]) for n, p in parts.items()})
    if scheme.double_quant:
        out.update(_double_quantize(out["scales"]))
    return QTensor(scheme, shape, out).to(home)


def _stat_shape(blocks: Tensor, scheme: QuantScheme) -> tuple[int, ...]:
    return (1,) * blocks.ndim if scheme.level == "tensor" else blocks.shape[:-1] + (1,)


def _stats(blocks: Tensor, scheme: QuantScheme) -> dict[str, Tensor]:
    """The blocks' abs-max, and min / max for affine schemes, shaped (..., nb, 1) (per tensor: all ones)."""
    shape = _stat_shape(blocks, scheme)
    source = blocks.reshape(1, -1) if scheme.level == "tensor" else blocks

    def stat(t: Tensor, fn: str) -> Tensor:
        return getattr(t, fn)(-1, keepdim=True).reshape(shape)

    if scheme.mode == "affine":
        return {"lo": stat(source, "amin").clamp(max=0), "hi": stat(source, "amax").clamp(min=0)}
    return {"absmax": stat(source.abs(), "amax")}


def _params(stats: dict[str, Tensor], scheme: QuantScheme, ratio: Tensor | None):
    """(f32 scale, its inverse, zero point or 0, stored parts) of blocks whose range is `stats` times
    `ratio`."""
    clip = stats if ratio is None else {n: v * ratio for n, v in stats.items()}
    if scheme.param == "ue8m0":
        e, _, inv = _exponent(clip["absmax"].clamp(min=2.0 ** -125), -125, 127)
        inv = inv * 2.0 ** reference.MX_ELEMENT_EMAX  # 2^-(e - 2): the scale's exact inverse
        return inv.reciprocal(), inv, 0.0, {"scales": (e + (127 - reference.MX_ELEMENT_EMAX)).cast(u8)}
    if scheme.mode == "affine":
        lo = clip["lo"]
        scale = ((clip["hi"] - lo) / float(scheme.qrange[1])).cast(scheme.scale_dtype).cast(f32)
        inv = _inverse(scale)
        zero = (-lo * inv).round().clamp(*scheme.qrange)
        return scale, inv, zero, {"scales": scale.cast(scheme.scale_dtype), "zeros": zero.cast(u8)}
    top = {"nf4": 1.0}.get(scheme.value, reference.FLOAT_CODES.get(scheme.value, (0, scheme.qrange[1]))[1])
    scale = (clip["absmax"] / float(top)).cast(scheme.scale_dtype).cast(f32)
    return scale, _inverse(scale), 0.0, {"scales": scale.cast(scheme.scale_dtype)}


def _inverse(scale: Tensor) -> Tensor:
    return where(scale > 0, scale.reciprocal(), 0.0)


def _codes(blocks: Tensor, inv: Tensor, zero, scheme: QuantScheme) -> Tensor:
    """The i32 code patterns of `blocks` with the inverse scale `inv` (and `zero`) of each block."""
    y = blocks * inv
    if scheme.is_int:
        c = (y.round() + zero).clamp(*scheme.qrange)
        return where(c < 0, c + 2.0 ** scheme.bits, c).cast(i32)
    if scheme.value == "nf4":
        mids = _constant(("nf4 midpoints",), lambda: reference.NF4_MIDPOINTS, blocks.device)
        return (y.unsqueeze(-1) > mids).cast(i32).sum(-1)
    return _float_codes(y, scheme.value)


def _block_sum(x: Tensor) -> Tensor:
    """The sum over the last axis in `reference.block_sum`'s fixed order (zero padded to a power of two,
    then halves added), so that every device rounds the same way (keepdim)."""
    n = x.shape[-1]
    width = 1 << max(n - 1, 0).bit_length()
    x = pad(x, (0, width - n))
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x


def _mse_ratios(blocks: Tensor, stats: dict[str, Tensor], scheme: QuantScheme) -> Tensor:
    """For each block, the entry of `MSE_CLIP_RATIOS` whose clipped range gives codes of least squared
    error (the first, largest ratio on ties), as `reference.mse_ratios` computes."""
    table = _constant((scheme.value, scheme.mode), lambda: reference.code_values(scheme), blocks.device)
    shape = _stat_shape(blocks, scheme)
    flat = (1, -1) if scheme.level == "tensor" else blocks.shape
    best_ratio = best_error = None
    for r in reference.MSE_CLIP_RATIOS:
        ratio = from_host(np.full(shape, r, np.float32), blocks.device)
        scale, inv, zero, _ = _params(stats, scheme, ratio)
        values = scale * (_lookup(table, _codes(blocks, inv, zero, scheme)) - zero)
        d = blocks - values
        error = _block_sum((d * d).reshape(flat)).reshape(shape)
        if best_error is None:
            best_ratio, best_error = ratio, error
        else:
            better = error < best_error
            best_ratio, best_error = where(better, ratio, best_ratio), where(better, error, best_error)
    return best_ratio


def _given(value, shape: tuple[int, ...], device) -> Tensor:
    """A fixed scale or zero point (a number or a tensor of one entry per scale) shaped `shape`."""
    if not isinstance(value, Tensor):
        return from_host(np.full(shape, value, np.float32), device)
    return value.detach().to(device).cast(f32).reshape(shape)


def _double_quantize(scales: Tensor) -> dict[str, Tensor]:
    """NF4's second level: the scales less their midrange, int8 codes per block of 256."""
    flat = scales.reshape(-1)
    offset = ((flat.amax(0, keepdim=True) + flat.amin(0, keepdim=True)) * 0.5)
    blocks = _blocks((flat - offset).reshape(1, -1), DOUBLE_QUANT_BLOCK)[0]
    scale2 = blocks.abs().amax(-1, keepdim=True) / 127.0
    c = (blocks * where(scale2 > 0, scale2.reciprocal(), 0.0)).round().clamp(-127, 127)
    codes = where(c < 0, c + 256.0, c).cast(u8).reshape(-1)[:flat.numel]
    return {"scales": codes.reshape(scales.shape), "scales2": scale2.reshape(-1), "offset": offset}


def _float_scales(q: QTensor) -> Tensor:
    scheme, scales = q.scheme, q.parts["scales"]
    if scheme.param == "ue8m0":
        return _lookup(_constant(("ue8m0",), reference.ue8m0_values, scales.device), scales.cast(i32))
    if not scheme.double_quant:
        return scales.cast(f32)
    n = scales.numel
    int8 = _constant(("int8",), lambda: reference.code_values(QuantScheme("int8")), scales.device)
    codes = _lookup(int8, scales.cast(i32).reshape(-1))
    per_code = q.parts["scales2"].reshape(-1, 1).expand(-1, DOUBLE_QUANT_BLOCK).reshape(-1)[:n]
    return (codes * per_code + q.parts["offset"]).reshape(scales.shape)


def dequantize(q: QTensor, dtype=f32) -> Tensor:
    """The tensor `q` stands for, as `dtype` (computed in f32: `scale * (code_value - zero)`)."""
    scheme, dtype = q.scheme, dtype_of(dtype)
    if q.numel == 0:
        return zeros(q.shape, dtype=dtype, device=q.device)
    rows, k = scheme.storage(q.shape)
    table = _constant((scheme.value, scheme.mode), lambda: reference.code_values(scheme), q.device)
    values = _lookup(table, _unpack(q.parts["values"], scheme.bits, k))
    scales = _float_scales(q)
    zero = q.parts["zeros"].cast(f32) if "zeros" in q.parts else None
    if scheme.level == "tensor":
        out = scales * (values - zero) if zero is not None else scales * values
    else:
        block = scheme.block_for(k)
        blocks = _blocks(values, block)
        scale = scales.unsqueeze(-1)
        out = scale * (blocks - zero.unsqueeze(-1)) if zero is not None else scale * blocks
        out = out.reshape(rows + (-1,))[..., :k]
    return _from_storage(out, scheme, q.shape).cast(dtype)


def fake_quantize(x: Tensor, scheme: QuantScheme) -> Tensor:
    """`dequantize(quantize(x))` in `x`'s dtype with a straight-through gradient (the identity), for
    quantization-aware training."""
    y = dequantize(quantize(x, scheme), x.dtype).to(x.device)
    if not x.requires_grad:
        return y
    return y + (x - x.detach())


def _tensor_quantize(self: Tensor, scheme: QuantScheme, method: str = "absmax") -> QTensor:
    """This tensor quantized with `scheme` (`ember.quantize`; `method`: "absmax" or "mse")."""
    return quantize(self, scheme, method=method)


METHODS = {"quantize": _tensor_quantize, "fake_quantize": fake_quantize}
