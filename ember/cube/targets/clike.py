"""The C-family base of the C and CUDA C renderers: type names, literals, storage conversions and the
expression of each scalar op.

`CFamily` holds what the C-family targets (C, CUDA C) render alike; a target subclasses it and
overrides the few names that differ (its `bool` type, how it spells NaN, `mulhi`).
f16/bf16 are computed in `float` and kept in memory as 16-bit words; the target's prelude defines
the conversion helpers (`ember_f16_load/store/round`, `ember_bf16_load/store/round`). Narrow integers
are brought back to their type after C's promotion to int.

Integer ops are rendered without undefined behaviour, with the results the IR defines (`ir.py`, "Integer
semantics"): float to int casts of NaN or out-of-range values give the type's minimum through 32 bits
(64 for i64 and u32/u64), as x86 and NumPy do; and for the values a kernel computes on (`data`,
`walker.data_values`): division and remainder truncate, by 0 give 0, `MIN / -1` is MIN and `MIN % -1`
is 0 (a divisor made safe by compares, no branch), shifts by a negative count or one past the width
give 0 (`<<`, unsigned `>>`) or the sign (signed `>>`), signed `+ - *`, negation and `abs` wrap
(computed in unsigned). Positions (indices of loads, stores and atomics, loop bounds, and what they are computed
from) keep C's operators: kernels keep them in range, divide them by sizes and shift them by less
than the width, and gcc vectorizes addressing only when it may assume no overflow (docs/backends.md).

Example:
    >>> CFamily().scalar("add", ["a", "b"], [f32, f32], f32)
    '(a + b)'
"""

from __future__ import annotations

import math

from ...dtype import bool_, bf16, f16, f64
from .. import ir


def bf16_helpers(qualifier: str, bits_to_float: str, float_to_bits: str) -> str:
    """The C source of `ember_bf16_load/store/round` (bf16 kept as 16-bit words and computed in
    float; stores round to nearest even and keep a NaN quiet), for a target's function `qualifier`
    and its bit casts: C expressions of `u` (uint32_t) as a float and of `f` (float) as a uint32_t.

    Example:
        >>> "ember_bf16_round" in bf16_helpers("static inline", "ember_as_float(u)", "ember_as_bits(f)")
        True
    """
    return (f"{qualifier} float ember_bf16_load(uint16_t b) {{ uint32_t u = (uint32_t)b << 16; return {bits_to_float}; }}\n"
            f"{qualifier} uint16_t ember_bf16_store(float f) {{\n"
            f"  uint32_t u = {float_to_bits};\n"
            "  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  /* quiet NaN */\n"
            "  u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */\n"
            "  return (uint16_t)(u >> 16);\n"
            "}\n"
            f"{qualifier} float ember_bf16_round(float f) {{ return ember_bf16_load(ember_bf16_store(f)); }}\n")


class RenderError(ValueError):
    """An op or type a C-family target has no rendering for."""


BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&", "or": "|", "xor": "^",
          "shl": "<<", "shr": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
MATH = {name: name for name in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin",
                                "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                                "acosh", "atanh", "erf", "floor", "ceil", "trunc", "pow", "atan2", "fma")}
MATH.update(round="rint", rem="fmod")


class CFamily:
    """Names and expressions a C-family target shares; class attributes are what a target overrides."""

    TARGET = "C"
    Error = RenderError
    STORAGE = {"f64": "double", "f32": "float", "f16": "ember_f16", "bf16": "uint16_t", "i64": "int64_t",
               "i32": "int32_t", "i16": "int16_t", "i8": "int8_t", "u8": "uint8_t", "u32": "uint32_t",
               "u64": "uint64_t", "bool": "uint8_t"}
    COMPUTE = dict(STORAGE, f16="float", bf16="float", bool="_Bool")
    MATH = MATH
    TRUE, FALSE = "1", "0"

    def storage_type(self, dtype) -> str:
        return self.STORAGE[dtype.name]

    def compute_type(self, t: ir.Type) -> str:
        """The scalar compute type, or `ember_<dtype>x<lanes>` for a vector (the target declares it)."""
        return self.COMPUTE[t.dtype.name] if t.lanes == 1 else f"ember_{t.dtype.name}x{t.lanes}"

    def float_literal(self, value: float, double: bool) -> str:
        """A NaN or an infinity of `float` (or `double`)."""
        kind = "double" if double else "float"
        if math.isnan(value):
            return f"(({kind})NAN)"
        return f"({'-' if value < 0 else ''}({kind})INFINITY)"

    def literal(self, value, dtype) -> str:
        """A literal of `dtype`'s compute type."""
        if dtype.is_float:
            if math.isnan(value) or math.isinf(value):
                return self.float_literal(value, dtype is f64)
            return f"{float(value).hex()}{'' if dtype is f64 else 'f'}"
        if dtype is bool_:
            return self.TRUE if value else self.FALSE
        if dtype.name == "i64" and value == -(1 << 63):
            return "(-9223372036854775807LL - 1)"
        suffix = {"i64": "LL", "u64": "ULL", "u32": "u"}.get(dtype.name, "")
        return f"(({self.COMPUTE[dtype.name]}){value}{suffix})"

    # f16/bf16 live in memory as 16-bit words: the prelude's helpers load, store and round them.
    def from_storage(self, x: str, dtype) -> str:
        if dtype in (f16, bf16):
            return f"ember_{dtype.name}_load({x})"
        return f"(_Bool){x}" if dtype is bool_ else x

    def to_storage(self, x: str, dtype) -> str:
        if dtype in (f16, bf16):
            return f"ember_{dtype.name}_store({x})"
        return f"(uint8_t)({x})" if dtype is bool_ else x

    def round_to(self, x: str, dtype) -> str:
        """A float holding an f16/bf16 value must be rounded to that format after a cast."""
        return f"ember_{dtype.name}_round({x})" if dtype in (f16, bf16) else x

    def mulhi(self, a: list) -> str:
        return f"((uint32_t)(((uint64_t){a[0]} * (uint64_t){a[1]}) >> 32))"

    def mad8(self, a: list) -> str:
        """acc + a * b, the product of two 8-bit ints (exact in int), added wrapping."""
        return f"((int32_t)((uint32_t){a[0]} + (uint32_t)((int32_t){a[1]} * (int32_t){a[2]})))"

    def bitwise_not(self, x: str, out) -> str:
        return f"(~{x})"

    def math(self, op: str, a: list, src) -> str:
        return f"{self.MATH[op]}{'f' if src.is_float and src is not f64 else ''}({', '.join(a)})"

    def scalar(self, op: str, a: list, types: list, out, data: bool = True) -> str:
        """C for one scalar op over operands rendered as `a` (compute types) of dtypes `types`; `data`: a
        value the kernel computes on, not a position (see the module docstring)."""
        src = types[0] if types else out
        fs = "f" if src.is_float and src is not f64 else ""
        if op == "cast":
            if out is bool_:
                return f"({a[0]} != 0)"
            if src.is_float and out.is_int:
                return f"(({self.COMPUTE[out.name]}){self.float_to_int(a[0], src, out)})"
            return self.round_to(f"(({self.COMPUTE[out.name]}){a[0]})", out)
        if not src.is_float and src is not bool_:
            integer = self.integer(op, a, src, data)
            if integer is not None:
                return integer
        if op in ("min", "max"):
            return f"({a[0]} {'<' if op == 'min' else '>'} {a[1]} ? {a[0]} : {a[1]})"
        if op == "select":
            return f"({a[0]} ? {a[1]} : {a[2]})"
        if op == "mulhi":
            return self.mulhi(a)
        if op == "mad8":
            return self.mad8(a)
        if op == "splat":
            return a[0]
        if op == "neg":
            return f"(-{a[0]})"
        if op == "not":
            return f"(!{a[0]})"
        if op == "bitwise_not":
            return self.bitwise_not(a[0], out)
        if op == "abs":
            return f"fabs{fs}({a[0]})" if src.is_float else f"({a[0]} < 0 ? -{a[0]} : {a[0]})"
        if op == "rsqrt" and op not in self.MATH:
            return f"(({self.COMPUTE[src.name]})1 / sqrt{fs}({a[0]}))"
        if op == "reciprocal":
            return f"(({self.COMPUTE[src.name]})1 / {a[0]})"
        if op in self.MATH:
            return self.math(op, a, src)
        if op in BINARY:
            expr = f"({a[0]} {BINARY[op]} {a[1]})"
            # C promotes narrow ints to int: bring the result back to the value's type.
            if not src.is_float and src.itemsize < 4 and op not in COMPARE:
                return f"(({self.COMPUTE[out.name]}){expr})"
            return expr
        raise self.Error(f"the {self.TARGET} target has no rendering for {op}")

    def integer(self, op: str, a: list, t, data: bool) -> str | None:
        """C for an integer op of dtype `t` whose plain C operator has undefined cases, or the remainder,
        else None; positions (`data` false) keep C's operators."""
        T, U = self.COMPUTE[t.name], "uint64_t" if t.itemsize == 8 else "uint32_t"
        width = t.itemsize * 8
        if not data:  # a position: C's operators (kernels divide positions by sizes, shift them in range)
            return f"(({T})({a[0]} % {a[1]}))" if op == "rem" else None
        if op in ("div", "rem"):
            x, y = a
            if t.signed:  # y is 0 or -1: divide by 1, then scale the quotient by 0 or -1 (in unsigned)
                safe = f"({y} + ({y} == 0) + 2 * ({y} == -1))"
                if op == "rem":
                    return f"(({T})({x} % {safe}))"
                return f"(({T})(({U})({x} / {safe}) * ({U})(({y} != 0) - 2 * ({y} == -1))))"
            safe = f"({y} + ({y} == 0))"
            return f"(({T})({x} % {safe}))" if op == "rem" else f"(({T})(({x} / {safe}) * ({y} != 0)))"
        if op in ("shl", "shr"):
            x, y = a
            inside = f"(({U}){y} < {width})"
            if op == "shl":
                return f"({inside} ? ({T})(({U}){x} << (({U}){y} & {width - 1})) : ({T})0)"
            if t.signed:  # past the width: the sign
                return f"(({T})({x} >> ({inside} ? {y} : {width - 1})))"
            return f"({inside} ? ({T})({x} >> {y}) : ({T})0)"
        if not (t.signed and t.itemsize >= 4):  # narrower types compute in int, which holds them
            return None
        if op in ("add", "sub", "mul"):
            return f"(({T})(({U}){a[0]} {BINARY[op]} ({U}){a[1]}))"
        if op == "neg":
            return f"(({T})-({U}){a[0]})"
        if op == "abs":
            return f"({a[0]} < 0 ? ({T})-({U}){a[0]} : {a[0]})"
        return None

    def float_to_int(self, x: str, src, out) -> str:
        """`x` (a float of dtype `src`) truncated to an integer of 32 bits (64 for i64, u32, u64), NaN and
        values out of that range giving its minimum; the caller converts to `out`, which wraps."""
        bits = 32 if out.itemsize < 4 or out.name == "i32" else 64
        wide = f"int{bits}_t"
        lo, hi = self.literal(-2.0 ** (bits - 1), src), self.literal(2.0 ** (bits - 1), src)
        low = "(-2147483647 - 1)" if bits == 32 else "(-9223372036854775807LL - 1)"
        return f"(({x} >= {lo}) & ({x} < {hi}) ? ({wide}){x} : {low})"
