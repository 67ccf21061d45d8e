"""Integer division and remainder by a constant divisor as multiply-shift (Granlund and Montgomery).

A hardware integer divide costs tens of cycles on a CPU and is a long software routine on GPUs; a
divisor known when the kernel is specialized (a literal, or a comptime argument, folded to a `const`)
lets `div` and `rem` become a multiply-high and shifts. For i32, u32, i64 and u64, scalar:

- unsigned by d: a power of two is a shift (`rem`: a mask); otherwise, with l = ceil(log2 d) and the
  magic m = floor(2^N (2^l - d) / d) + 1, `t = mulhi(x, m)`, `q = (t + ((x - t) >> 1)) >> (l - 1)`
  (Granlund and Montgomery 1994, figure 4.1: exact for every N-bit x). `mulhi` is the IR's u32 op for
  N = 32 and four 32 x 32 -> 64-bit products for N = 64.
- signed by d: the unsigned quotient of |x| (as unsigned, so |MIN| is exact) by |d|, negated when the
  signs differ; d = -1 is `neg` (MIN div -1 = MIN, as the IR defines).
- `rem` is `x - q * d` (wrapping); a divisor 0 gives 0 for both, as the IR defines.

The result keeps the IR's semantics (truncating division, `x div 0 = 0`, `MIN div -1 = MIN`) on every
target, so it runs after the other passes, before DCE. Positions (indices and what they are computed
from, `walker.data_values`) are left alone: targets render them with the compiler's own division, which
it reduces itself and needs to see to vectorize addressing.

Example:
    >>> lower_constant_division(kernel)   # %q = div %x, 7  ->  mulhi, sub, shr, add, shr
"""

from __future__ import annotations

from .. import ir
from ..ir import For, If, Instr, Type, Value
from ..targets.walker import data_values

_WIDTHS = {"i32": 32, "u32": 32, "i64": 64, "u64": 64}
_UNSIGNED = {32: ir.u32, 64: ir.u64}


def lower_constant_division(kernel: ir.Kernel) -> None:
    """Rewrite, in place, every scalar i32/u32/i64/u64 `div` and `rem` of data by a constant."""
    consts = {s.result: s.attr for s in ir.walk(kernel.body) if isinstance(s, Instr) and s.op == "const"}
    same: dict = {}
    _lower_block(kernel, kernel.body, consts, same, data_values(kernel))
    ir.substitute(kernel.body, same)


def _lower_block(kernel: ir.Kernel, block: list, consts: dict, same: dict, data: set) -> None:
    out = []
    for s in block:
        if isinstance(s, For):
            _lower_block(kernel, s.body, consts, same, data)
        elif isinstance(s, If):
            _lower_block(kernel, s.then, consts, same, data)
            _lower_block(kernel, s.orelse, consts, same, data)
        elif (isinstance(s, Instr) and s.op in ("div", "rem") and s.result in data and s.result.type.lanes == 1
              and s.result.type.dtype.name in _WIDTHS and s.args[1] in consts):
            emit = _Emitter(kernel, s.line)
            result = _lower(emit, s.op, s.args[0], int(consts[s.args[1]]))
            if emit.out and emit.out[-1].result is result:
                emit.out[-1].result = s.result  # the last instruction defines the original value
            else:
                same[s.result] = result
            out.extend(emit.out)
            continue
        out.append(s)
    block[:] = out


class _Emitter:
    """Appends instructions (stamped with the source line of the op they replace) to `out`."""

    def __init__(self, kernel: ir.Kernel, line: int) -> None:
        self.kernel, self.line, self.out = kernel, line, []

    def emit(self, op: str, args: tuple, type: Type, attr=None) -> Value:
        v = Value(self.kernel.next_id, type)
        self.kernel.next_id += 1
        self.out.append(Instr(op, args, v, attr, self.line))
        return v

    def const(self, value: int, dtype) -> Value:
        bits = dtype.itemsize * 8
        value &= (1 << bits) - 1
        if dtype.signed and value >> (bits - 1):
            value -= 1 << bits
        return self.emit("const", (), Type(dtype), value)

    def op(self, op: str, *args: Value) -> Value:
        return self.emit(op, args, ir.result_type(op, args))

    def cast(self, x: Value, dtype) -> Value:
        return self.emit("cast", (x,), Type(dtype))

    def shr(self, x: Value, k: int) -> Value:
        return x if k == 0 else self.op("shr", x, self.const(k, x.type.dtype))


def _lower(e: _Emitter, op: str, x: Value, d: int) -> Value:
    dtype = x.type.dtype
    if d == 0:
        return e.const(0, dtype)
    q = _signed_quotient(e, x, d) if dtype.signed else _unsigned_quotient(e, x, d)
    if op == "div":
        return q
    if not dtype.signed and d & (d - 1) == 0:
        return e.op("and", x, e.const(d - 1, dtype))
    return e.op("sub", x, e.op("mul", q, e.const(d, dtype)))


def _signed_quotient(e: _Emitter, x: Value, d: int) -> Value:
    dtype = x.type.dtype
    if d == 1:
        return x
    if d == -1:
        return e.op("neg", x)
    unsigned = _UNSIGNED[_WIDTHS[dtype.name]]
    q = e.cast(_unsigned_quotient(e, e.cast(e.op("abs", x), unsigned), abs(d)), dtype)
    zero = e.const(0, dtype)
    flip = e.op("lt", x, zero) if d > 0 else e.op("ge", x, zero)
    return e.op("select", flip, e.op("neg", q), q)


def _unsigned_quotient(e: _Emitter, x: Value, d: int) -> Value:
    n = _WIDTHS[x.type.dtype.name]
    if d & (d - 1) == 0:
        return e.shr(x, d.bit_length() - 1)
    shift = (d - 1).bit_length()
    magic = ((1 << n) * ((1 << shift) - d)) // d + 1
    t = _mulhi(e, x, magic)
    return e.shr(e.op("add", t, e.shr(e.op("sub", x, t), 1)), shift - 1)


def _mulhi(e: _Emitter, x: Value, m: int) -> Value:
    """The high half of the 2N-bit product of unsigned `x` and the constant `m`."""
    dtype = x.type.dtype
    if dtype.itemsize == 4:
        return e.op("mulhi", x, e.const(m, dtype))
    low = e.const(0xFFFFFFFF, dtype)
    x0, x1 = e.op("and", x, low), e.shr(x, 32)
    m0, m1 = e.const(m & 0xFFFFFFFF, dtype), e.const(m >> 32, dtype)
    p00, p01, p10, p11 = e.op("mul", x0, m0), e.op("mul", x0, m1), e.op("mul", x1, m0), e.op("mul", x1, m1)
    middle = e.op("add", e.op("add", e.shr(p00, 32), e.op("and", p01, low)), e.op("and", p10, low))
    high = e.op("add", e.op("add", p11, e.shr(p01, 32)), e.shr(p10, 32))
    return e.op("add", high, e.shr(middle, 32))
