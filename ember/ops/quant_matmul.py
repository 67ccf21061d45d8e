"""`quant_matmul` (a product with a packed, quantized weight) and `int_matmul` (int8 x int8 -> int32).

`quant_matmul(x, values, scales[, zeros], code, block, k, n, transpose)`: the weight W (n, k) in
PyTorch's Linear layout is stored as docs/quantization.md, "How the parts are stored", says: `values` uint8,
codes packed along k (one, two or four a byte by `code`), `scales` (n, ceil(k / block)) or (1,) (per
tensor) of f32/f16/bf16, or uint8 UE8M0 (2^(e - 127)); `zeros` uint8 like `scales`, for the affine
codes (uint8, uint4, uint2) only. W[j, i] = scale[j, i // block] * (code_value(j, i) - zero[j, i // block]).
`transpose=False`: x (..., k) -> x @ W.T (..., n); `transpose=True`: g (..., n) -> g @ W (..., k).
x is f32, f16 or bf16; the result has its dtype, accumulated in f32. The gradient is x's only: the
weight's parts are frozen (a quantized weight is not trained), their cotangents are None.

`int_matmul(a, b)`: a (..., k) int8 and b (n, k) int8 (b in Linear layout) -> a @ b.T in int32, exact.

Example:
    >>> registry["quant_matmul"].infer(Aval((3, 8), f32), Aval((5, 4), u8), Aval((5, 1), f32),
    ...                                code="int4", block=8, k=8, n=5, transpose=False)
    Aval(shape=(3, 5), dtype=f32)
"""

from __future__ import annotations

import functools

import numpy as np

from ..dtype import bf16, f16, f32, i8, i32, u8
from ..errors import DTypeError, ShapeError
from ..limits import check_size
from .primitive import Aval, primitive, saves_none

SIGNED, UNSIGNED, TABLED = "signed", "unsigned", "table"
CODES = {"int8": (8, SIGNED), "int4": (4, SIGNED), "int2": (2, SIGNED),
         "uint8": (8, UNSIGNED), "uint4": (4, UNSIGNED), "uint2": (2, UNSIGNED),
         "nf4": (4, TABLED), "fp4_e2m1": (4, TABLED), "fp8_e4m3": (8, TABLED), "fp8_e5m2": (8, TABLED)}
"""code -> (bits per code, how its value is read: two's complement, unsigned, or a table of values)."""

NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
       0.7229568362236023, 1.0)
"""QLoRA's NF4 codebook, bitsandbytes' 16 values (as f32)."""

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""The OCP MX fp4 e2m1 magnitudes of bit patterns 0..7; bit 3 is the sign."""

FLOAT_SCALES = (f32, f16, bf16)


@functools.cache
def code_table(code: str) -> np.ndarray:
    """The f32 value of each of the 2^bits bit patterns of `code` (read-only).

    Example:
        >>> code_table("int2").tolist(), code_table("fp4_e2m1")[9]
        ([0.0, 1.0, -2.0, -1.0], -0.5)
    """
    bits, kind = CODES[code]
    patterns = np.arange(1 << bits)
    if kind == UNSIGNED:
        table = patterns.astype(np.float32)
    elif kind == SIGNED:
        table = np.where(patterns >= 1 << (bits - 1), patterns - (1 << bits), patterns).astype(np.float32)
    elif code == "nf4":
        table = np.array(NF4, np.float32)
    elif code == "fp4_e2m1":
        table = np.array(E2M1 + tuple(-v for v in E2M1), np.float32)
    else:
        import ml_dtypes  # a dependency of ember (bf16)
        kind_np = ml_dtypes.float8_e4m3fn if code == "fp8_e4m3" else ml_dtypes.float8_e5m2
        table = patterns.astype(np.uint8).view(kind_np).astype(np.float32)
    table.setflags(write=False)
    return table


@functools.cache
def ue8m0_table() -> np.ndarray:
    """The f32 scale of each UE8M0 byte e: 2^(e - 127), NaN for 255 (read-only).

    Example:
        >>> ue8m0_table()[[0, 127, 254]].tolist()[1:], bool(np.isnan(ue8m0_table()[255]))
        ([1.0, 1.7014118346046923e+38], True)
    """
    table = np.ldexp(np.float32(1), np.arange(256) - 127).astype(np.float32)
    table[255] = np.nan
    table.setflags(write=False)
    return table


def packed_width(code: str, k: int) -> int:
    """Bytes of a row of k codes of `code` (ceil(k / codes per byte))."""
    return -(-k // (8 // CODES[code][0]))


def unpack(values: np.ndarray, code: str, k: int) -> np.ndarray:
    """The bit patterns (..., k) of packed `values` (..., packed_width): element j * per + i of a row
    in bits i * bits .. of byte j."""
    bits = CODES[code][0]
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits).astype(np.uint8)
    fields = (values[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return fields.reshape(values.shape[:-1] + (values.shape[-1] * per,))[..., :k]


def decode_scales(scales: np.ndarray) -> np.ndarray:
    """f32 scales: float ones widened, UE8M0 bytes as 2^(e - 127)."""
    return ue8m0_table()[scales] if scales.dtype == np.uint8 else scales.astype(np.float32)


def dequantize(values: np.ndarray, scales: np.ndarray, zeros: np.ndarray | None, *, code: str, block: int,
               k: int) -> np.ndarray:
    """The f32 weight (rows, k) the parts stand for: scale[j, i // block] * (value(j, i) - zero[j, i // block]).

    Example:
        >>> dequantize(np.array([[0x21]], np.uint8), np.array([2.0], np.float32), None, code="int4", block=2, k=2)
        array([[2., 4.]], dtype=float32)
    """
    codes = code_table(code)[unpack(values, code, k)]
    column_block = np.arange(k) // block
    s = decode_scales(scales)
    s = np.broadcast_to(s, (values.shape[0], 1)) if s.ndim == 1 else s[:, column_block]
    if zeros is not None:
        z = np.broadcast_to(zeros, (values.shape[0], 1)) if zeros.ndim == 1 else zeros[:, column_block]
        codes = codes - z.astype(np.float32)
    return (s * codes).astype(np.float32)


# ---- quant_matmul ----------------------------------------------------------------------------------

def _parts(op: str, values: Aval, scales: Aval, zeros: Aval | None, code: str, block: int, k: int, n: int) -> None:
    """Check the weight's parts against (code, block, k, n), naming `op` and the shapes."""
    if code not in CODES:
        raise ShapeError(op, f"unknown code {code!r}: one of {', '.join(CODES)}")
    if not (isinstance(block, int) and block >= 1) or k < 0 or n < 0:
        raise ShapeError(op, f"block {block}, k {k} and n {n} must be a block >= 1 and sizes >= 0")
    want = (n, packed_width(code, k))
    if values.dtype is not u8 or values.shape != want:
        raise ShapeError(op, f"values of shape {values.shape} and dtype {values.dtype} do not hold a ({n}, {k}) "
                             f"{code} weight: it is uint8 of shape {want}")
    blocks = (n, -(-k // block))
    if scales.shape not in (blocks, (1,)):
        raise ShapeError(op, f"scales of shape {scales.shape} do not fit a ({n}, {k}) weight in blocks of {block}: "
                             f"{blocks}, or (1,) for one scale")
    if scales.dtype not in FLOAT_SCALES and scales.dtype is not u8:
        raise DTypeError(f"{op}: scales of dtype {scales.dtype} (shape {scales.shape}): they are f32, f16, bf16, "
                         f"or uint8 for UE8M0")
    affine = CODES[code][1] == UNSIGNED
    if affine and zeros is None:
        raise ShapeError(op, f"the affine code {code} needs zeros shaped as the scales {scales.shape}")
    if not affine and zeros is not None:
        raise ShapeError(op, f"the symmetric code {code} takes no zeros (got shape {zeros.shape})")
    if zeros is not None and (zeros.shape != scales.shape or zeros.dtype is not u8):
        raise ShapeError(op, f"zeros of shape {zeros.shape} and dtype {zeros.dtype}: uint8 shaped as the scales "
                             f"{scales.shape}")


def _quant_matmul_infer(x: Aval, values: Aval, scales: Aval, zeros: Aval | None = None, *, code: str, block: int,
                        k: int, n: int, transpose: bool) -> Aval:
    _parts("quant_matmul", values, scales, zeros, code, block, k, n)
    if x.dtype not in FLOAT_SCALES:
        raise DTypeError(f"quant_matmul: x of dtype {x.dtype} (shape {x.shape}): it is f32, f16 or bf16")
    inner, outer = (n, k) if transpose else (k, n)
    if len(x.shape) < 1 or x.shape[-1] != inner:
        side = "g @ W" if transpose else "x @ W.T"
        raise ShapeError("quant_matmul", f"{side} of x {x.shape} with a ({n}, {k}) {code} weight: the last dim "
                                         f"of x must be {inner}")
    shape = x.shape[:-1] + (outer,)
    check_size("quant_matmul", shape, x.dtype)
    return Aval(shape, x.dtype)


def _quant_matmul_vjp(ctx, g):
    """x's gradient only: g @ W for the forward, g @ W.T for the transposed product. The weight's parts
    are frozen (their cotangents are None)."""
    from .spatial import call
    weight = [ctx.input(i) for i in range(1, len(ctx.input_avals))]
    p = ctx.params
    gx = call("quant_matmul", g, *weight, code=p["code"], block=p["block"], k=p["k"], n=p["n"],
              transpose=not p["transpose"]) if ctx.needs_grad(0) else None
    return (gx,) + (None,) * len(weight)


def _weight_parts(tracked: tuple[bool, ...]) -> tuple[tuple[int, ...], bool]:
    """The rule reads the weight's parts (inputs 1..), never x nor the output."""
    return (tuple(range(1, len(tracked))) if tracked[0] else ()), False


def quant_matmul_reference(x, values, scales, zeros=None, *, code, block, k, n, transpose):
    """NumPy: dequantize the weight (f32), multiply in f32, round to x's dtype."""
    w = dequantize(values, scales, zeros, code=code, block=block, k=k)
    y = np.matmul(x.astype(np.float32), w if transpose else w.T)
    return y.astype(x.dtype)


primitive("quant_matmul", infer=_quant_matmul_infer, vjp=_quant_matmul_vjp, cost="compute",
          saves=_weight_parts)(quant_matmul_reference)


# ---- int_matmul --------------------------------------------------------------------------------------

def _int_matmul_infer(a: Aval, b: Aval) -> Aval:
    if a.dtype is not i8 or b.dtype is not i8:
        raise DTypeError(f"int_matmul: operands are int8, got {a.dtype} {a.shape} and {b.dtype} {b.shape}")
    if len(a.shape) < 1 or len(b.shape) != 2 or a.shape[-1] != b.shape[1]:
        raise ShapeError("int_matmul", f"a {a.shape} @ b.T of b {b.shape}: b is (n, k) and a (..., k)")
    shape = a.shape[:-1] + (b.shape[0],)
    check_size("int_matmul", shape, i32)
    return Aval(shape, i32)


def int_matmul_reference(a, b):
    """NumPy in int64 (exact for any k below 2^17 products of -128 * -128), then int32."""
    return np.matmul(a.astype(np.int64), b.T.astype(np.int64)).astype(np.int32)


primitive("int_matmul", infer=_int_matmul_infer, vjp=None, cost="compute", saves=saves_none)(int_matmul_reference)
