"""The WGSL target: render a kernel as one `@compute` entry point for wgpu (Vulkan, Metal, DX12).

A cube is a workgroup, a unit an invocation; arrays are read_write storage buffers bound in parameter
order, then one uniform "info" buffer of u32 words (lengths, element offsets, scalar parameters:
`info_layout`); planes are subgroups where the adapter has them and the cube is one-dimensional, else
one unit. f16 needs `shader-f16`; f64, i64, u64, i16, i8, u8 and bf16 are refused with
`WgslTargetError` naming the dtype and the adapter; bool arrays are u32 words. Math WGSL lacks is
emitted as helper functions only when a kernel uses it. The whole mapping is in docs/cube.md,
"The WGSL target".

Example:
    >>> source = render(kernel_ir, CubeDim(256))
    >>> "@compute @workgroup_size(256, 1, 1)" in source
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...dtype import bool_, f16, f32, f64, i64
from .. import ir
from ..ir import Instr, i32, u32, u64
from ..lang import CubeDim
from .clike import BINARY
from .walker import Walker, builtin_table, identifier

ENTRY = "main"
VERSION = "wgsl-8"  # bump when the rendering changes, so cached pipelines are rebuilt

# Helper functions by op: WGSL has no erf, expm1, log1p, log10 or 32x32->64-bit multiply.
HELPERS = {
    "erf": """fn ember_erf(x: f32) -> f32 {
  // Taylor series near 0 (relative accuracy), Abramowitz-Stegun 7.1.26 beyond (1.5e-7 absolute).
  let a = abs(x);
  if (a < 0.5f) {
    let z = x * x;
    return x * 1.1283791670955126f * (1.0f + z * (-0.3333333333f + z * (0.1f + z * (-0.0238095238f
        + z * (0.0046296296f + z * (-0.0007575758f + z * 0.0001068376f))))));
  }
  let t = 1.0f / (1.0f + 0.3275911f * a);
  let p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  return sign(x) * (1.0f - p * exp(-a * a));
}""",
    "expm1": """fn ember_expm1(x: f32) -> f32 {
  // Kahan's trick: (u - 1) * x / log(u) cancels the rounding error of u = exp(x) near 0.
  let u = exp(x);
  if (u == 1.0f) { return x; }
  let um1 = u - 1.0f;
  if (um1 == -1.0f) { return -1.0f; }
  if (abs(x) > 1.0f) { return um1; }
  return um1 * x / log(u);
}""",
    "log1p": """fn ember_log1p(x: f32) -> f32 {
  // Goldberg's trick: log(u) * x / (u - 1) with u = 1 + x corrects the rounding of u.
  let u = 1.0f + x;
  if (u == 1.0f) { return x; }
  if (abs(x) > 1.0f) { return log(u); }
  return log(u) * x / (u - 1.0f);
}""",
    "asin": """fn ember_asin_r(z: f32) -> f32 {
  // musl's rational approximation of (asin(x) - x) / x^3 in z = x^2, for asin and acos.
  return z * (0.16666586697f + z * (-0.042743422091f + z * -0.0086563630030f)) / (1.0f + z * -0.70662963390f);
}
fn ember_asin(x: f32) -> f32 {
  // Vulkan lets asin/acos be off by thousands of ulp (lavapipe: 4e-4): musl's asinf instead.
  let a = abs(x);
  if (a < 0.5f) { return x + x * ember_asin_r(x * x); }
  let z = (1.0f - a) * 0.5f;
  let s = sqrt(z);
  return sign(x) * (1.5707963268f - 2.0f * (s + s * ember_asin_r(z)));
}""",
    "acos": """fn ember_acos(x: f32) -> f32 {
  // musl's acosf (see ember_asin).
  if (abs(x) < 0.5f) { return 1.5707962513f - (x - (7.5497894159e-08f - x * ember_asin_r(x * x))); }
  if (x < 0.0f) {
    let z = (1.0f + x) * 0.5f;
    let s = sqrt(z);
    return 2.0f * (1.5707962513f - (s + (ember_asin_r(z) * s - 7.5497894159e-08f)));
  }
  let z = (1.0f - x) * 0.5f;
  let s = sqrt(z);
  return 2.0f * (s + ember_asin_r(z) * s);
}""",
    "log10": """fn ember_log10(x: f32) -> f32 { return log2(x) * 0.30102999566398120f; }""",
    "pow": """fn ember_pow(a: f32, b: f32) -> f32 {
  // C's pow: WGSL's is undefined for a <= 0. A negative base needs an integer exponent.
  if (b == 0.0f) { return 1.0f; }
  let r = pow(abs(a), b);
  if (a == 0.0f) { return select(0.0f, bitcast<f32>(0x7f800000u), b < 0.0f); }
  if (a < 0.0f) {
    if (trunc(b) != b) { return bitcast<f32>(0x7fc00000u); }
    if (trunc(b * 0.5f) != b * 0.5f) { return -r; }
  }
  return r;
}""",
    "mulhi": """fn ember_mulhi(a: u32, b: u32) -> u32 {
  // The high word of a 64-bit product, from 16-bit halves (WGSL has no 64-bit integers).
  let al = a & 0xffffu; let ah = a >> 16u; let bl = b & 0xffffu; let bh = b >> 16u;
  let ll = al * bl; let hl = ah * bl; let lh = al * bh; let hh = ah * bh;
  let mid = (ll >> 16u) + (hl & 0xffffu) + lh;
  return hh + (hl >> 16u) + (mid >> 16u);
}""",
}

_BINARY = dict(BINARY, rem="%")  # C's operators; shifts are rendered apart (WGSL shifts by a u32)
_MATH = {name: name for name in ("exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tan", "atan", "sinh", "cosh",
                                 "tanh", "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "abs", "fma")}
_MATH.update(rsqrt="inverseSqrt")  # round and atan2 are rendered apart (see Renderer.scalar)
_PLANE = {"plane_sum": "subgroupAdd", "plane_prod": "subgroupMul", "plane_max": "subgroupMax",
          "plane_min": "subgroupMin", "plane_all": "subgroupAll", "plane_any": "subgroupAny"}
_ATOMIC_TYPES = ("i32", "u32", "f32")
# i8, u8 and i16 are emulated: one 32-bit word per element in buffers (sign-extended or zero-extended),
# 32-bit values in kernels, wrapped to their width on casts and stores. f16 computes in f32.
_COMPUTE = {"f16": "f32", "i8": "i32", "i16": "i32", "u8": "u32"}
_WORD = {"bool": "u32", "i8": "i32", "i16": "i32", "u8": "u32"}
_WRAP = {"i8": "(({}) << 24u) >> 24u", "i16": "(({}) << 16u) >> 16u", "u8": "(({}) & 255u)"}
_F64_MATH = ("abs", "sqrt", "rsqrt", "floor", "ceil", "trunc")  # what Vulkan computes in 64 bits


class WgslTargetError(ValueError):
    """A kernel this target cannot render: a dtype WGSL lacks, an unsupported atomic or vector."""


@dataclass(frozen=True)
class Capabilities:
    """What the device offers that changes the rendering: optional WGSL features and its name.

    Example:
        >>> Capabilities(subgroups=True, f16=False, adapter="llvmpipe (Vulkan)")
    """

    subgroups: bool = False
    f16: bool = False
    adapter: str = "any adapter"
    int64: bool = False   # i64/u64 (wgpu-native's `shader-int64`)
    f64: bool = False     # f64 arithmetic (`shader-f64`); Vulkan has no f64 exp, log, sin, ...: refused


@dataclass
class InfoLayout:
    """Word positions in the info buffer: (length word, base word) per array, one word per scalar (two
    for 64-bit ones), then the three words of the logical cube count."""

    arrays: dict = field(default_factory=dict)    # Array -> (length word, base word)
    scalars: dict = field(default_factory=dict)   # ScalarParam -> word
    count: int = 0                                # first of the x, y, z words of the cube count
    words: int = 0


def info_layout(kernel: ir.Kernel) -> InfoLayout:
    """Where each array's length and base offset and each scalar's bits sit in the info buffer."""
    layout = InfoLayout()
    for p in kernel.params:
        if isinstance(p, ir.Array):
            layout.arrays[p] = (layout.words, layout.words + 1)
            layout.words += 2
        else:
            layout.scalars[p] = layout.words
            layout.words += 2 if p.value.type.dtype.itemsize == 8 else 1  # 64-bit scalars: low, high word
    layout.count = layout.words
    layout.words += 3
    return layout


def written_arrays(kernel: ir.Kernel) -> set:
    """The arrays a kernel stores to or updates atomically (bound read_write; the rest read-only)."""
    return {s.attr for s in ir.walk(kernel.body) if isinstance(s, Instr) and (s.op == "store" or s.op in ir.ATOMIC)}


def shared_bytes(kernel: ir.Kernel) -> int:
    """Bytes of workgroup memory a kernel declares (4 per element: everything computes in 32 bits)."""
    return sum(max(4, s.attr.dtype.itemsize) * s.attr.size for s in ir.walk(kernel.body)
               if isinstance(s, Instr) and s.op == "shared")


def _divide(op: str, x: str, y: str, t) -> str:
    """Integer `x / y` or `x % y` as the IR defines them (by 0: 0; MIN / -1: MIN, MIN % -1: 0), through a
    divisor made safe (1 for 0 and -1). The remainder is `x - (x / y) * y` spelled out: naga's GLSL output
    keeps `%`, which GLSL leaves undefined for negative operands (llvmpipe's OpenGL adapter gave
    -7 % -2 == -7, -6 % 3 == 1)."""
    zero, one = literal(0, t), literal(1, t)
    special = f"{y} == {zero}" + (f" || {y} == {literal(-1, t)}" if t.signed else "")
    safe = f"select({y}, {one}, {special})"
    if op == "rem":
        return f"({x} - ({x} / {safe}) * {safe})"
    quotient = f"({x} / {safe})"
    if t.signed:  # divided by 1 for -1: negate (0 - MIN wraps to MIN)
        quotient = f"select({quotient}, {zero} - {x}, {y} == {literal(-1, t)})"
    return f"select({quotient}, {zero}, {y} == {zero})"


def _shift(op: str, x: str, y: str, t) -> str:
    """`x << y` or `x >> y` as the IR defines them: a count below 0 or from the width of `t` on gives 0
    (`<<`, unsigned `>>`) or the sign (signed `>>`). WGSL shifts by a u32, taken modulo the word's width
    (narrow types live in 32-bit words)."""
    width = t.itemsize * 8
    count = f"u32({y})"
    if op == "shr" and t.signed:
        return f"({x} >> min({count}, {width - 1}u))"
    shifted = f"({x} {'<<' if op == 'shl' else '>>'} ({count} & {63 if width == 64 else 31}u))"
    return f"select({literal(0, t)}, {shifted}, {count} < {width}u)"


def _float_to_int(x: str, src, out) -> str:
    """Float `x` truncated to i32 (i64 for 64-bit `out`), NaN and values out of range giving its minimum, as
    on the C target (`dtype.float_to_int`); the caller converts to `out`. (u32 keeps WGSL's conversion.)"""
    wide = i64 if out.itemsize == 8 else i32
    bits = wide.itemsize * 8
    inside = f"{x} >= {literal(-2.0 ** (bits - 1), src)} & {x} < {literal(2.0 ** (bits - 1), src)}"
    return f"select({literal(-2 ** (bits - 1), wide)}, {wide.name}({x}), {inside})"


def literal(value, dtype) -> str:
    """A WGSL literal of `dtype`'s compute type (f16 computes in f32)."""
    if dtype is f64:
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            bits = np.array(value, np.float64).view(np.uint64)
            return f"bitcast<f64>({int(bits)}lu)"
        return f"({value!r}lf)" if value < 0 or math.copysign(1, value) < 0 else f"{value!r}lf"
    if dtype is i64:
        if value == -2**63:  # -9223372036854775808 is a negated literal that does not fit
            return "bitcast<i64>(9223372036854775808lu)"
        return f"i64({int(value)})" if value < 0 else f"{int(value)}li"
    if dtype is u64:
        return f"{int(value)}lu"
    if dtype.is_float:
        value = float(np.float32(value))  # a suffixed literal must be an f32 value
        if math.isnan(value):
            return "bitcast<f32>(0x7fc00000u)"
        if math.isinf(value):
            return f"bitcast<f32>({'0xff800000u' if value < 0 else '0x7f800000u'})"
        text = f"{value.hex()}f"
        return f"({text})" if value < 0 else text
    if dtype is bool_:
        return "true" if value else "false"
    if dtype is u32 or dtype.name == "u8":
        return f"{int(value)}u"
    return f"i32({value})" if value < 0 else f"{value}i"  # i32(-2147483648) is valid, -2147483648i is not


class Renderer(Walker):
    """Walks the structured IR once, one line of WGSL per instruction."""

    LOOP_VAR = "var {}: i32"
    BARRIER = "workgroupBarrier();"

    def __init__(self, kernel: ir.Kernel, dim: CubeDim, caps: Capabilities) -> None:
        super().__init__(kernel, dim)
        self.caps = caps
        self.helpers: set[str] = set()
        self.atomic_arrays = {s.attr for s in ir.walk(kernel.body) if isinstance(s, Instr) and s.op in ir.ATOMIC}
        self.written = written_arrays(kernel)
        self.shared = [s.attr for s in ir.walk(kernel.body) if isinstance(s, Instr) and s.op == "shared"]
        self.names = {arr: f"a{i}_{identifier(arr.name)}" for i, arr in enumerate(
            p for p in kernel.params if isinstance(p, ir.Array))}
        self.names.update({arr: f"s{i}" for i, arr in enumerate(self.shared)})
        self.layout = info_layout(kernel)
        uses_planes = any(isinstance(s, Instr) and (s.op in ir.PLANE or s.op == "builtin" and s.attr in (
            "plane_dim", "unit_pos_plane")) for s in ir.walk(kernel.body))
        wide_planes = any(isinstance(s, Instr) and s.op in ir.PLANE and s.result.type.dtype.itemsize == 8
                          for s in ir.walk(kernel.body))  # no 64-bit subgroup ops: a plane is one unit
        self.subgroups = caps.subgroups and uses_planes and dim.total == dim.x and not wide_planes
        self._check_types()

    # -- types ----------------------------------------------------------------------------------
    def _refuse(self, dtype, what: str) -> None:
        why = "WGSL has no such type" if dtype is not f16 else "the adapter lacks the shader-f16 feature"
        raise WgslTargetError(f"kernel {self.k.name}: {what} of {dtype.name} cannot run on the WGSL target "
                              f"(adapter {self.caps.adapter!r}): {why}; emulating it is not implemented yet")

    def _check_types(self) -> None:
        ok = {"f32", "i32", "u32", "bool", "i8", "u8", "i16"} | ({"f16"} if self.caps.f16 else set()) | \
            ({"i64", "u64"} if self.caps.int64 else set()) | ({"f64"} if self.caps.f64 else set())
        for p in self.k.params:
            if isinstance(p, ir.Array):
                if p.dtype.name not in ok:
                    self._refuse(p.dtype, f"array {p.name!r}")
            elif p.value.type.dtype.name not in ok:
                self._refuse(p.value.type.dtype, f"scalar {p.name!r}")
        for s in ir.walk(self.k.body):
            if isinstance(s, Instr):
                t = s.result.type if s.result is not None else None
                if t is not None and t.dtype.name not in ok:
                    self._refuse(t.dtype, f"a value (line {s.line}, {s.op})")
                if t is not None and t.lanes > 4:
                    raise WgslTargetError(f"kernel {self.k.name}: vectors of {t.lanes} lanes (WGSL has 2 to 4)")
                if s.op == "shared" and s.attr.dtype.name not in ok:
                    self._refuse(s.attr.dtype, f"shared memory (line {s.line})")
                if s.op == "local" and s.attr.type.dtype.name not in ok:
                    self._refuse(s.attr.type.dtype, f"a variable (line {s.line})")
                if s.op in ir.MATRIX or s.op in ir.COPY:
                    raise WgslTargetError(f"kernel {self.k.name}: line {s.line}: {s.op} (matrix fragments and "
                                          f"asynchronous copies) has no WGSL rendering; it runs on the CUDA target")
                if s.op in ir.ATOMIC and s.attr.dtype.name not in _ATOMIC_TYPES:
                    raise WgslTargetError(f"kernel {self.k.name}: line {s.line}: {s.op} on {s.attr.dtype.name} "
                                          f"(WGSL atomics cover {', '.join(_ATOMIC_TYPES)})")

    def wtype(self, t: ir.Type) -> str:
        scalar = _COMPUTE.get(t.dtype.name, t.dtype.name)
        return scalar if t.lanes == 1 else f"vec{t.lanes}<{scalar}>"

    def storage_type(self, arr: ir.Array) -> str:
        if arr in self.atomic_arrays:
            return "atomic<u32>" if arr.dtype is f32 else f"atomic<{arr.dtype.name}>"
        if arr.kind == "shared":
            return self.wtype(ir.Type(arr.dtype))
        return _WORD.get(arr.dtype.name, arr.dtype.name)  # bools, i8, u8, i16: one 32-bit word each

    # -- top ------------------------------------------------------------------------------------
    def render(self) -> str:
        d = self.dim
        # f16 arrays, or f16 values alone (a fused kernel rounding through f16 between f32 arrays)
        head = ["enable f16;"] if self.caps.f16 and (
            any(isinstance(p, ir.Array) and p.dtype is f16 for p in self.k.params)
            or any(isinstance(s, ir.Instr) and s.result is not None and s.result.type.dtype is f16
                   for s in ir.walk(self.k.body))) else []
        binding = 0
        for p in self.k.params:
            if isinstance(p, ir.Array):
                # Every array is read_write: one buffer (a memory-pool page) may hold a kernel's inputs and
                # outputs, and wgpu refuses a buffer bound read-only and writable in one dispatch.
                access = "read_write"
                head.append(f"@group(0) @binding({binding}) var<storage, {access}> {self.names[p]}: "
                            f"array<{self.storage_type(p)}>;")
                binding += 1
        head.append(f"@group(0) @binding({binding}) var<uniform> ember_info: "
                    f"array<vec4<u32>, {max(1, -(-self.layout.words // 4))}>;")
        for arr in self.shared:
            head.append(f"var<workgroup> {self.names[arr]}: array<{self.storage_type(arr)}, {arr.size}>;")
        builtins = ["@builtin(local_invocation_id) lid: vec3<u32>", "@builtin(local_invocation_index) lidx: u32",
                    "@builtin(workgroup_id) wid_p: vec3<u32>", "@builtin(num_workgroups) nwg_p: vec3<u32>"]
        if self.subgroups:
            builtins += ["@builtin(subgroup_size) sg_size: u32", "@builtin(subgroup_invocation_id) sg_id: u32"]
        self.emit(f"@compute @workgroup_size({d.x}, {d.y}, {d.z})", 0)
        self.emit(f"fn {ENTRY}({', '.join(builtins)}) {{", 0)
        # The dispatch may fold a cube count beyond the adapter's per-dimension limit into more dims
        # (the runtime's `dispatch_shape`): `wid`/`nwg` are the logical cube position and count.
        c = self.layout.count
        self.emit(f"let nwg = vec3<u32>({_word(c)}, {_word(c + 1)}, {_word(c + 2)});", 1)
        self.emit("let flat_wid = (wid_p.z * nwg_p.y + wid_p.y) * nwg_p.x + wid_p.x;", 1)
        self.emit("if (flat_wid >= nwg.x * nwg.y * nwg.z) { return; }", 1)
        self.emit("let wid = vec3<u32>(flat_wid % nwg.x, (flat_wid / nwg.x) % nwg.y, flat_wid / (nwg.x * nwg.y));", 1)
        for p in self.k.params:
            if isinstance(p, ir.Array):
                n, base = self.layout.arrays[p]
                self.emit(f"let len_{self.names[p]} = i32({_word(n)});", 1)
                self.emit(f"let base_{self.names[p]} = i32({_word(base)});", 1)
            else:
                w = self.layout.scalars[p]
                self.emit(f"let v{p.value.id} = {_from_bits(_word(w), p.value.type.dtype, _word(w + 1))};", 1)
        self.block(self.k.body, 1)
        self.emit("}", 0)
        prelude = [HELPERS[h] for h in sorted(self.helpers)]
        consts = [f"const NU: i32 = {d.total}i;", f"const DX: i32 = {d.x}i;", f"const DY: i32 = {d.y}i;",
                  f"const DZ: i32 = {d.z}i;"]
        return "\n".join(head + consts + prelude + [""] + self.lines) + "\n"

    def declare(self, var: ir.Local, depth: int) -> None:
        self.emit(f"var {self.local_name(var)}: {self.wtype(var.type)} = {self.wtype(var.type)}();", depth)

    def define(self, s: Instr, a: list, depth: int) -> None:
        self.emit(f"let v{s.result.id}: {self.wtype(s.result.type)} = {self.expr(s, a)};", depth)

    def literal(self, value, dtype) -> str:
        return literal(value, dtype)

    def array_name(self, arr: ir.Array) -> str:
        return self.names[arr]

    def load(self, s: Instr, a: list) -> str:
        t = s.result.type
        if t.lanes == 1:
            return self.element(s.attr, s.args[0], a[0])
        lanes = ", ".join(self.element(s.attr, s.args[0], a[0], lane) for lane in range(t.lanes))
        return f"{self.wtype(t)}({lanes})"

    def compute(self, s: Instr, a: list) -> str:
        op, t = s.op, s.result.type
        if op == "extract":
            return f"{a[0]}[{s.attr}]"
        if op == "pack":
            return f"{self.wtype(t)}({', '.join(a)})"
        if op == "splat":
            return f"{self.wtype(t)}({a[0]})"
        if t.lanes == 1 and all(v.type.lanes == 1 for v in s.args):
            return self.lane(s, a)
        # A vector op, lane by lane: every scalar rendering (helpers included) then serves vectors.
        return f"{self.wtype(t)}({', '.join(self.lane(s, a, f'[{i}]') for i in range(t.lanes))})"

    def scalar(self, op: str, a: list, types: list, out, data: bool = True) -> str:
        """WGSL for one scalar op over operands rendered as `a` (compute types). WGSL's integers wrap and its
        division does not trap, so positions (`data` false) are rendered as data are."""
        src = types[0] if types else out
        if op == "cast":
            if out is bool_:
                return f"({a[0]} != {self.wtype(ir.Type(src))}())"
            x = _float_to_int(a[0], src, out) if src.is_float and out.is_int and out is not u32 else a[0]
            e = f"{self.wtype(ir.Type(out))}({x})"
            if out.name in _WRAP:
                return _WRAP[out.name].format(e)  # i8/u8/i16 values live in 32 bits, wrapped
            return f"f32(f16({e}))" if out is f16 else e  # f16 values live in f32, rounded
        if op == "min":
            return f"select({a[1]}, {a[0]}, {a[0]} < {a[1]})"  # as C's a < b ? a : b (NaN included)
        if op == "max":
            return f"select({a[1]}, {a[0]}, {a[0]} > {a[1]})"
        if op == "select":
            return f"select({a[2]}, {a[1]}, {a[0]})"
        if op == "mad8":  # 8-bit values live in 32-bit words; i32 arithmetic wraps
            return f"({a[0]} + i32({a[1]}) * i32({a[2]}))"
        if op == "neg":
            return f"({literal(0, src)} - {a[0]})" if src.name in ("u8", "u32", "u64") else f"(-{a[0]})"  # no -u32
        if op == "not":
            return f"(!{a[0]})"
        if op == "bitwise_not":
            return f"(~{a[0]})"
        if op == "reciprocal":
            return f"({literal(1, src)} / {a[0]})"
        if op in ("shl", "shr"):
            return _shift(op, a[0], a[1], src)
        if op in ("div", "rem") and src.is_int:
            return _divide(op, a[0], a[1], src)
        if op == "xor" and src is bool_:
            return f"({a[0]} != {a[1]})"
        if op == "ne" and src.is_float:  # naga's != is ordered (false for NaN); C's is not
            return f"(!({a[0]} == {a[1]}))"
        if op in ("lt", "le", "gt", "ge") and src is bool_:  # WGSL orders no bools: as 0/1 words
            return f"(u32({a[0]}) {_BINARY[op]} u32({a[1]}))"
        if op == "round" and out is not f64:
            # Half to even from floor (lavapipe's roundEven rounds -7.5 to -7): r = floor(x), d = x - r.
            x, r = a[0], f"floor({a[0]})"
            one, half = literal(1, out), literal(0.5, out)
            return (f"select(select({r} + {one}, {r}, ({x} - {r}) < {half}), select({r} + {one}, {r}, "
                    f"{r} * {half} == floor({r} * {half})), ({x} - {r}) == {half})")
        if op == "atan2" and out is f32:  # Vulkan leaves atan2(0, 0) undefined; C gives +-0 or +-pi
            y, x = a
            zero = f"select({y}, select(3.14159274f, -3.14159274f, {y} < 0.0f || (bitcast<u32>({y}) >> 31u) == 1u), " \
                   f"(bitcast<u32>({x}) >> 31u) == 1u)"
            return f"select(atan2({y}, {x}), {zero}, {y} == 0.0f && {x} == 0.0f)"
        if (src is f64 or out is f64) and (op in HELPERS or op in _MATH) and op not in _F64_MATH:
            raise WgslTargetError(f"kernel {self.k.name}: {op} of f64 cannot run on the WGSL target (adapter "
                                  f"{self.caps.adapter!r}): Vulkan has no 64-bit {op}")
        if op in HELPERS:
            self.helpers.update(("asin", op) if op == "acos" else (op,))  # acos uses asin's polynomial
            return f"ember_{op}({', '.join(a)})"
        if op in _MATH:
            return f"{_MATH[op]}({', '.join(a)})"
        if op in _BINARY:
            return f"({a[0]} {_BINARY[op]} {a[1]})"
        raise WgslTargetError(f"the WGSL target has no rendering for {op}")

    def builtin(self, name: str) -> str:
        linear = ("i32(lidx)", "i32((wid.z * nwg.y + wid.y) * nwg.x + wid.x)", "i32(nwg.x * nwg.y * nwg.z)")
        plane = ("i32(sg_size)", "i32(sg_id)") if self.subgroups else ("1i", "0i")
        return builtin_table(*([f"i32({v}.{axis})" for axis in "xyz"] for v in ("lid", "wid", "nwg")),
                             linear, plane)[name]

    # -- memory ---------------------------------------------------------------------------------
    def ref(self, arr: ir.Array, index: ir.Value, rendered: str, lane: int = 0) -> str:
        """`name[index + lane]`: global arrays start at their base word; indices become i32."""
        idx = rendered if index.type.dtype is i32 else f"i32({rendered})"
        if lane:
            idx = f"{idx} + {lane}i"
        if arr.kind == "shared":
            return f"{self.names[arr]}[{idx}]"
        return f"{self.names[arr]}[base_{self.names[arr]} + {idx}]"

    def element(self, arr: ir.Array, index: ir.Value, rendered: str, lane: int = 0) -> str:
        r = self.ref(arr, index, rendered, lane)
        if arr in self.atomic_arrays:
            return f"bitcast<f32>(atomicLoad(&{r}))" if arr.dtype is f32 else f"atomicLoad(&{r})"
        if arr.kind == "shared":
            return r
        return f"f32({r})" if arr.dtype is f16 else f"({r} != 0u)" if arr.dtype is bool_ else r

    def store(self, s: Instr, a: list, depth: int) -> None:
        arr, index, value = s.attr, s.args[0], s.args[1]
        lanes = value.type.lanes
        for lane in range(lanes):
            x = a[1] if lanes == 1 else f"{a[1]}[{lane}]"
            r = self.ref(arr, index, a[0], lane)
            if arr in self.atomic_arrays:
                self.emit(f"atomicStore(&{r}, {f'bitcast<u32>({x})' if arr.dtype is f32 else x});", depth)
            elif arr.dtype is f16 and arr.kind != "shared":
                self.emit(f"{r} = f16({x});", depth)
            elif arr.dtype.name in _WRAP and arr.kind != "shared":
                self.emit(f"{r} = {_WRAP[arr.dtype.name].format(x)};", depth)
            elif arr.dtype is bool_ and arr.kind != "shared":
                self.emit(f"{r} = select(0u, 1u, {x});", depth)
            else:
                self.emit(f"{r} = {x};", depth)

    def atomic(self, s: Instr, a: list, depth: int) -> None:
        arr = s.attr
        r = self.ref(arr, s.args[0], a[0])
        v = f"v{s.result.id}"
        if arr.dtype is not f32:
            fn = {"atomic_add": "atomicAdd", "atomic_max": "atomicMax", "atomic_min": "atomicMin"}[s.op]
            self.emit(f"let {v}: {arr.dtype.name} = {fn}(&{r}, {a[1]});", depth)
            return
        # f32: compare-exchange on the bits until our update lands (max/min: or is no longer better).
        new = {"atomic_add": f"bitcast<f32>(old_{v}) + {a[1]}", "atomic_max": a[1], "atomic_min": a[1]}[s.op]
        keep_going = {"atomic_add": "true", "atomic_max": f"{a[1]} > bitcast<f32>(old_{v})",
                      "atomic_min": f"{a[1]} < bitcast<f32>(old_{v})"}[s.op]
        self.emit(f"var old_{v}: u32 = atomicLoad(&{r});", depth)
        self.emit("loop {", depth)
        self.emit(f"if (!({keep_going})) {{ break; }}", depth + 1)
        self.emit(f"let r_{v} = atomicCompareExchangeWeak(&{r}, old_{v}, bitcast<u32>({new}));", depth + 1)
        self.emit(f"if (r_{v}.exchanged) {{ break; }}", depth + 1)
        self.emit(f"old_{v} = r_{v}.old_value;", depth + 1)
        self.emit("}", depth)
        self.emit(f"let {v}: f32 = bitcast<f32>(old_{v});", depth)

    def plane(self, s: Instr, x: str) -> str:
        t = s.result.type
        if t.lanes > 1:
            raise WgslTargetError(f"kernel {self.k.name}: line {s.line}: plane ops take scalars, got {t}")
        if not self.subgroups:
            return x  # a plane is one unit (see the module docstring)
        op = s.op
        if t.dtype is bool_:  # sum/prod of bools are or/and, as NumPy's bool arithmetic
            op = {"plane_sum": "plane_any", "plane_prod": "plane_all", "plane_max": "plane_any",
                  "plane_min": "plane_all"}.get(op, op)
        return f"{_PLANE[op]}({x})"


def _word(n: int) -> str:
    return f"ember_info[{n // 4}][{n % 4}]"


def _from_bits(word: str, dtype, high: str = "") -> str:
    """A scalar parameter from its 32-bit word (f16 scalars travel as f32, bools as 0/1), or from its
    low and `high` words (64-bit scalars)."""
    if dtype.itemsize == 8:
        joined = f"(u64({word}) | (u64({high}) << 32u))"
        return joined if dtype is u64 else f"bitcast<{dtype.name}>({joined})"
    if dtype is bool_:
        return f"({word} != 0u)"
    if dtype is u32 or dtype.name == "u8":
        return word
    return f"bitcast<{'f32' if dtype.is_float else 'i32'}>({word})"


def render(kernel: ir.Kernel, dim: CubeDim, caps: Capabilities = Capabilities()) -> str:
    """WGSL source for `kernel` launched with cube shape `dim` on a device with `caps`; entry `main`."""
    return Renderer(kernel, dim, caps).render()
