"""`QuantScheme`: how a tensor is quantized (value type, granularity, scale dtype, mode, storage), and
`QType`, the dtype-like value of a quantized tensor.

Names follow Burn's `QuantScheme` (`value`, `level`, `param`, `mode`, `store`) and the OCP Microscaling
spec (fp4 e2m1 with UE8M0 scales in blocks of 32). A scheme is a frozen value; `check(shape)` says
whether it fits a tensor, and the layout methods give the shapes of the stored parts (docs/quantization.md,
docs/quantization.md): codes along the last axis (per channel: the channel axis first, the rest
flattened), `scales` of one entry per block, per-tensor `scales` of shape (1,).

Example:
    >>> scheme = int4(block=32)
    >>> scheme.parts((10, 64))
    {'values': (10, 32), 'scales': (10, 2)}
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtype import DType, dtype_of
from ..errors import QuantSchemeError

VALUES = ("int8", "int4", "int2", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "nf4")
LEVELS = ("tensor", "channel", "block")
PARAMS = ("f32", "f16", "bf16", "ue8m0")
MODES = ("symmetric", "affine")
_BITS = {"int8": 8, "int4": 4, "int2": 2, "fp8_e4m3": 8, "fp8_e5m2": 8, "fp4_e2m1": 4, "nf4": 4}
DOUBLE_QUANT_BLOCK = 256
"""QLoRA's block of the second-level (double) quantization of the scales."""


@dataclass(frozen=True)
class QuantScheme:
    """A quantization scheme (see the module docs; build one with `int8()`, `int4(block=32)`, ...).

    `value`: the code type; `level`: "tensor", "channel" (one scale per index of `axis`) or "block"
    (`block` consecutive elements of the last axis share a scale; a last, shorter block is allowed
    except for UE8M0 scales, whose MX blocks are whole); `param`: the scale dtype; `mode`: "symmetric"
    or "affine" (integer codes only: unsigned codes and a uint8 zero point); `double_quant`: NF4's
    second-level int8 quantization of its f32 scales (QLoRA).
    """

    value: str
    level: str = "tensor"
    block: int | None = None
    axis: int | None = None
    param: str = "f32"
    mode: str = "symmetric"
    double_quant: bool = False

    def __post_init__(self) -> None:
        def bad(why: str) -> QuantSchemeError:
            return QuantSchemeError(f"{self}: {why}")

        if self.value not in VALUES:
            raise bad(f"value {self.value!r} is not one of {', '.join(VALUES)}")
        if self.level not in LEVELS or self.param not in PARAMS or self.mode not in MODES:
            raise bad(f"level must be one of {LEVELS}, param one of {PARAMS}, mode one of {MODES}")
        if (self.level == "block") != (self.block is not None):
            raise bad("a block size is given exactly for level 'block'")
        if self.block is not None and (not isinstance(self.block, int) or self.block < 1):
            raise bad(f"block must be a positive int, got {self.block!r}")
        if (self.level == "channel") != (self.axis is not None) or not isinstance(self.axis, (int, type(None))):
            raise bad("a channel axis (an int) is given exactly for level 'channel'")
        if self.mode == "affine" and not self.is_int:
            raise bad(f"affine mode needs integer codes; {self.value} codes are symmetric")
        if (self.param == "ue8m0") != (self.value == "fp4_e2m1"):
            raise bad("UE8M0 scales go with fp4_e2m1 codes, as in MXFP4 (ember.quant.mxfp4())")
        if self.param == "ue8m0" and self.level != "block":
            raise bad("UE8M0 (MX) scales are per block")
        if self.double_quant and (self.value != "nf4" or self.level != "block" or self.param != "f32"):
            raise bad("double quantization is NF4's, over per-block f32 scales")

    # ---- what the codes are --------------------------------------------------------------------
    @property
    def bits(self) -> int:
        return _BITS[self.value]

    @property
    def is_int(self) -> bool:
        return self.value.startswith("int")

    @property
    def per_byte(self) -> int:
        """Codes a stored byte holds (1, 2 or 4)."""
        return 8 // self.bits

    @property
    def store(self) -> str:
        """The storage (Burn's `QuantStore`): "u8" (a code a byte), "u8x2" or "u8x4" (packed)."""
        return "u8" if self.per_byte == 1 else f"u8x{self.per_byte}"

    @property
    def code(self) -> str:
        """The code name the quantized matmul takes: "int4", "uint4", "nf4", ... (docs/quantization.md,
        "How the parts are stored")."""
        return ("u" + self.value) if self.mode == "affine" else self.value

    @property
    def qrange(self) -> tuple[int, int]:
        """(lowest, highest) integer code quantization produces: symmetric -(2^(b-1)-1)..2^(b-1)-1
        (Burn's rule, so -x quantizes to -code), affine 0..2^b-1."""
        if self.mode == "affine":
            return 0, 2 ** self.bits - 1
        top = 2 ** (self.bits - 1) - 1
        return -top, top

    @property
    def scale_dtype(self) -> DType | None:
        """The float dtype of the scales, None for UE8M0 (stored as uint8 exponents)."""
        return None if self.param == "ue8m0" else dtype_of(self.param)

    # ---- layout --------------------------------------------------------------------------------
    def check(self, shape: tuple[int, ...]) -> None:
        """Raise `QuantSchemeError` naming this scheme and `shape` where the scheme cannot hold it."""
        if self.level == "channel" and not -len(shape) <= self.axis < max(len(shape), 1):
            raise QuantSchemeError(f"{self}: channel axis {self.axis} is out of range for shape {shape}")
        if self.level == "channel" and not shape:
            raise QuantSchemeError(f"{self}: a 0-d tensor has no channel axis (shape {shape})")
        rows, k = self.storage(shape)
        if self.param == "ue8m0" and k % self.block:
            raise QuantSchemeError(f"{self}: the last axis of shape {shape} ({k}) is not a multiple of the "
                                   f"MX block {self.block}; pad it, or use float scales")

    def storage(self, shape: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """(leading shape, K) of the codes as stored: the last axis is K; per channel the channel axis
        leads and the other axes are flattened into K."""
        if self.level == "channel":
            axis = self.axis % len(shape)
            return (shape[axis],), math.prod(shape[:axis] + shape[axis + 1:])
        return (shape[:-1], shape[-1]) if shape else ((), 1)

    def block_for(self, k: int) -> int:
        """The number of consecutive codes that share a scale, for a last axis of K."""
        return self.block if self.level == "block" else max(k, 1)

    def parts(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        """The shape of each stored part for a tensor of `shape` (zeros, scales2, offset where used)."""
        rows, k = self.storage(shape)
        out = {"values": rows + (-(-k // self.per_byte),)}
        scales = (1,) if self.level == "tensor" else rows + (-(-k // self.block_for(k)),)
        out["scales"] = scales
        if self.mode == "affine":
            out["zeros"] = scales
        if self.double_quant:
            out["scales2"] = (-(-math.prod(scales) // DOUBLE_QUANT_BLOCK),)
            out["offset"] = (1,)
        return out

    # ---- naming and files ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The scheme as JSON-ready fields (`from_dict` reads them back)."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, fields: dict) -> "QuantScheme":
        if not isinstance(fields, dict) or set(fields) - set(cls.__dataclass_fields__) or "value" not in fields:
            raise QuantSchemeError(f"not a quantization scheme: {fields!r}")
        return cls(**fields)

    def __str__(self) -> str:
        where = {"tensor": "per tensor", "channel": f"per channel axis={self.axis}",
                 "block": f"block={self.block}"}.get(self.level, self.level)
        extra = "".join((f", {self.mode}" if self.mode != "symmetric" else "",
                         f", {self.param} scales", ", double_quant" if self.double_quant else ""))
        return f"{self.value}({where}{extra})"


class QType:
    """The dtype-like value of a quantized tensor (`ember.qtype(scheme)`): equal when the schemes are.

    Example:
        >>> qtype(nf4()) == qtype(nf4())
        True
    """

    __slots__ = ("scheme",)
    is_float = is_int = is_bool = False

    def __init__(self, scheme: QuantScheme) -> None:
        self.scheme = scheme

    @property
    def name(self) -> str:
        return f"q{self.scheme}"

    @property
    def bits(self) -> int:
        return self.scheme.bits

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QType) and other.scheme == self.scheme

    def __hash__(self) -> int:
        return hash(self.scheme)

    def __repr__(self) -> str:
        return self.name


def qtype(scheme: QuantScheme) -> QType:
    """The dtype of a tensor quantized with `scheme`."""
    return QType(scheme)


def _level(axis: int | None, block: int | None, value: str) -> dict:
    if axis is not None and block is not None:
        raise QuantSchemeError(f"{value}: give a channel axis or a block size, not both (axis={axis}, block={block})")
    return ({"level": "channel", "axis": axis} if axis is not None else
            {"level": "block", "block": block} if block is not None else {"level": "tensor"})


def _int(value: str, axis: int | None, block: int | None, affine: bool, scale_dtype: str) -> QuantScheme:
    return QuantScheme(value, param=_param(scale_dtype), mode="affine" if affine else "symmetric",
                       **_level(axis, block, value))


def _param(scale_dtype) -> str:
    return scale_dtype if isinstance(scale_dtype, str) and scale_dtype in PARAMS else dtype_of(scale_dtype).name


def int8(axis: int | None = None, block: int | None = None, affine: bool = False,
         scale_dtype: str | DType = "f32") -> QuantScheme:
    """8-bit integer codes: per tensor (default), per channel (`axis`) or per block (`block`)."""
    return _int("int8", axis, block, affine, scale_dtype)


def int4(block: int | None = None, axis: int | None = None, affine: bool = False,
         scale_dtype: str | DType = "f32") -> QuantScheme:
    """4-bit integer codes, two a byte."""
    return _int("int4", axis, block, affine, scale_dtype)


def int2(block: int | None = None, axis: int | None = None, affine: bool = False,
         scale_dtype: str | DType = "f32") -> QuantScheme:
    """2-bit integer codes, four a byte."""
    return _int("int2", axis, block, affine, scale_dtype)


def fp8_e4m3(axis: int | None = None, block: int | None = None, scale_dtype: str | DType = "f32") -> QuantScheme:
    """OCP fp8 e4m3 (float8_e4m3fn, largest 448) codes, scaled so the largest magnitude maps to 448."""
    return QuantScheme("fp8_e4m3", param=_param(scale_dtype), **_level(axis, block, "fp8_e4m3"))


def fp8_e5m2(axis: int | None = None, block: int | None = None, scale_dtype: str | DType = "f32") -> QuantScheme:
    """OCP fp8 e5m2 (largest finite 57344) codes."""
    return QuantScheme("fp8_e5m2", param=_param(scale_dtype), **_level(axis, block, "fp8_e5m2"))


def mxfp4(block: int = 32) -> QuantScheme:
    """OCP MXFP4: fp4 e2m1 codes with one UE8M0 (power of two) scale per block of 32."""
    return QuantScheme("fp4_e2m1", level="block", block=block, param="ue8m0")


def nf4(block: int = 64, double_quant: bool = False, scale_dtype: str | DType = "f32") -> QuantScheme:
    """QLoRA's 4-bit NormalFloat: indices into bitsandbytes' 16-value codebook times the block's absmax."""
    return QuantScheme("nf4", level="block", block=block, param=_param(scale_dtype), double_quant=double_quant)
