"""The cube IR: a typed SSA form with structured control flow, shared by every target.

A kernel is a list of statements: `Instr`, `For` or `If`. Every `Instr` defines at most one `Value`,
once (SSA), typed as a scalar dtype or a vector of `lanes` elements. Control flow stays structured (no
CFG, no phi) because every target is; the one mutable thing is a `Local`, made by the frontend only
for a Python name reassigned across a loop or branch. Memory is reached through `Array`s (kernel
parameters and `shared` buffers) at explicit element indices. Nothing here knows a target.

Integers wrap, divide and shift the same way on every target, with no undefined case, except
arithmetic on positions (indices, loop bounds), which must not overflow: docs/cube.md,
"Integer semantics".

Example:
    >>> b = Builder("axpy")
    >>> x = b.array_param("x", f32); y = b.array_param("y", f32); a = b.scalar_param("a", f32)
    >>> i = b.builtin("absolute_pos")
    >>> b.store(y, i, b.binary("add", b.binary("mul", a, b.load(x, i)), b.load(y, i)))
    >>> print(b.kernel)  # doctest: +ELLIPSIS
    kernel axpy(x: array<f32>, y: array<f32>, %0: f32) {
    ...
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Union

from ..dtype import DType, FLOAT, INT, bool_, f32, f64, f16, bf16, i64, i32, i16, i8, u8

# Unsigned 32/64-bit ints exist only inside kernels (index math, counter-based RNG); ember's tensor
# dtypes stop at u8. They are DType instances so targets treat every element type the same way.
u32 = DType("u32", INT, 4, False, "uint32")
u64 = DType("u64", INT, 8, False, "uint64")
DTYPES = {d.name: d for d in (f64, f32, f16, bf16, i64, i32, i16, i8, u8, u32, u64, bool_)}

INDEX = i32  # the type of positions, lengths and loop counters


class IRError(ValueError):
    """An ill-typed or malformed instruction; the frontend re-raises it with the kernel's source line."""


@dataclass(frozen=True)
class Type:
    """A scalar (`lanes == 1`) or a vector of `lanes` elements of `dtype`."""

    dtype: DType
    lanes: int = 1

    def __str__(self) -> str:
        return self.dtype.name if self.lanes == 1 else f"{self.dtype.name}x{self.lanes}"

    @property
    def scalar(self) -> "Type":
        return Type(self.dtype)


class Value:
    """An SSA value: defined once, compared by identity."""

    __slots__ = ("id", "type")

    def __init__(self, id: int, type: Type) -> None:
        self.id = id
        self.type = type

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type}"


@dataclass(eq=False)
class Array:
    """A buffer the kernel reads or writes: a global parameter, or `shared` memory of `size` elements."""

    name: str
    dtype: DType
    kind: str = "global"  # "global" | "shared"
    size: int = 0

    def __repr__(self) -> str:
        return self.name


@dataclass(eq=False)
class Local:
    """A mutable, typed variable (the frontend's answer to a name reassigned in a loop or branch)."""

    name: str
    type: Type


@dataclass(eq=False)
class Fragment:
    """A plane's (warp's) share of an `m x n x k` matrix product operand, held in registers.

    `use` is "a" (m x k), "b" (k x n) or "accumulator" (m x n); `layout` ("row" or "col") is how an
    a/b fragment lies in the memory it is loaded from. Every unit of the plane takes part in each
    fragment op together, like the CubeCL `cmma` API; how the elements are spread over the units is
    the target's business, so a kernel only moves whole fragments between memory and registers.

    `scope` "group" is an accumulator shared by a group of `GROUP_PLANES` planes (a 64 x n block,
    16 rows a plane), the operand of `Builder.group_mma`, whose a and b come from shared memory.
    """

    name: str
    use: str
    dtype: DType
    m: int
    n: int
    k: int
    layout: str = "row"
    scope: str = "plane"


@dataclass(eq=False)
class Instr:
    """One operation. `attr` holds what is not a value: a constant, an Array, a Local, a builtin name."""

    op: str
    args: tuple
    result: Value | None = None
    attr: object = None
    line: int = 0  # source line in the kernel, for error messages


@dataclass(eq=False)
class For:
    """`for var in range(start, stop, step)`; `step` is a positive or negative constant or value."""

    var: Value
    start: Value
    stop: Value
    step: Value
    body: list = field(default_factory=list)
    line: int = 0


@dataclass(eq=False)
class If:
    cond: Value
    then: list = field(default_factory=list)
    orelse: list = field(default_factory=list)
    line: int = 0


Stmt = Union[Instr, For, If]


@dataclass(eq=False)
class ScalarParam:
    name: str
    value: Value


@dataclass(eq=False)
class Kernel:
    """A specialized kernel: parameters (Arrays and ScalarParams in call order) and a body."""

    name: str
    params: list
    body: list
    next_id: int = 0

    def __str__(self) -> str:
        return print_kernel(self)

    def hash(self) -> str:
        """A stable content hash (value ids renumbered), the key of the compilation cache."""
        return hashlib.sha256(print_kernel(self, canonical=True).encode()).hexdigest()[:32]


# ----------------------------------------------------------------------------------------------
# The op table: what each op accepts and whether it may be moved, merged or deleted by passes.
# An IR op that means exactly what an elementwise primitive means has its name (reciprocal,
# bitwise_not, exp, ...). These differ and keep their own names: `div` of ints truncates, `rem`
# truncates (C's % and fmod; the primitive `remainder` floors), `min`/`max` do not propagate NaN (the
# primitives `minimum`/`maximum` do), `shl`/`shr` leave a shift by the bit width or more undefined
# (the primitives `left_shift`/`right_shift` give NumPy's result), `not`/`and`/`or`/`xor` are on bools
# or bits alike.

UNARY_FLOAT = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos",
               "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
               "floor", "ceil", "round", "trunc", "reciprocal")
UNARY_NUMERIC = ("neg", "abs")
UNARY_LOGIC = ("not",)       # bool -> bool
UNARY_BITS = ("bitwise_not",)  # int -> int
ARITH = ("add", "sub", "mul", "div", "rem", "min", "max", "pow", "atan2")
TERNARY_FLOAT = ("fma",)  # a * b + c rounded once (C's fmaf, CUDA's; WGSL's fma may round twice)
BITS = ("and", "or", "xor", "shl", "shr")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
BUILTINS = ("absolute_pos", "absolute_pos_x", "absolute_pos_y", "absolute_pos_z",
            "unit_pos", "unit_pos_x", "unit_pos_y", "unit_pos_z",
            "cube_pos", "cube_pos_x", "cube_pos_y", "cube_pos_z",
            "cube_dim", "cube_dim_x", "cube_dim_y", "cube_dim_z",
            "cube_count", "cube_count_x", "cube_count_y", "cube_count_z", "plane_dim", "unit_pos_plane")
PLANE = ("plane_sum", "plane_prod", "plane_max", "plane_min", "plane_all", "plane_any")
ATOMIC = ("atomic_add", "atomic_max", "atomic_min")
# Matrix fragments (a plane's share of a small matrix product, on tensor cores where a target has them)
# and asynchronous copies from global to shared memory: see `Fragment` and `Builder.matrix_*`.
MATRIX = ("fragment", "matrix_fill", "matrix_load", "matrix_mma", "matrix_store", "group_mma", "group_wait",
          "group_store")
COPY = ("copy_async", "copy_commit", "copy_wait")
# Fragment shapes (m, n, k) and the input dtypes each takes; the accumulator is f32.
MATRIX_SHAPES = {"f16": ((16, 16, 16),), "bf16": ((16, 16, 16),), "f32": ((16, 16, 8),)}
# A plane group's accumulator: 64 x n (n a multiple of 8 up to 256) of products 16 deep, from f16/bf16
# operands in shared memory laid out as `group_mma` says.
GROUP_PLANES = 4
GROUP_M, GROUP_K, GROUP_MAX_N = 64, 16, 256
GROUP_INPUTS = ("f16", "bf16")
# The shared layout group_mma reads: rows of 128 bytes, in blocks of 8 rows (1024 bytes) whose 16-byte
# chunks are swizzled (chunk j of row r is stored at chunk j ^ (r % 8)).
SWIZZLE_ROW_BYTES, SWIZZLE_BLOCK_BYTES = 128, 1024

# Reads of an array at an index: CSE merges equal ones with no write to the array between, DCE deletes unused
# ones. `lut16` is a load whose index the builder has masked to 0..15 (a 16-entry table).
LOADS = ("load", "lut16")
# Ops without side effects: CSE may merge them and DCE may delete them when unused.
PURE = frozenset(("const", "cast", "select", "builtin", "len", "mulhi", "mad8", "extract", "splat", "pack",
                  "read") + UNARY_FLOAT + UNARY_NUMERIC + UNARY_LOGIC + UNARY_BITS + ARITH + BITS
                 + COMPARE + TERNARY_FLOAT)
# Ops whose result differs between the units of a cube even when their operands do not.
VARYING_BUILTINS = frozenset(b for b in BUILTINS if b.startswith(("absolute_pos", "unit_pos")))


def is_pure(instr: Instr) -> bool:
    return instr.op in PURE


def written_array(instr: Instr) -> "Array | None":
    """The array `instr` writes (a store, an atomic, a fragment store, an asynchronous copy), else None."""
    if instr.op == "store" or instr.op in ATOMIC:
        return instr.attr
    if instr.op in ("matrix_store", "copy_async", "group_store"):
        return instr.attr[0]
    return None


# ----------------------------------------------------------------------------------------------
# Walking

def walk(body: list) -> Iterator[Stmt]:
    """Every statement, nested ones included, in program order."""
    for s in body:
        yield s
        if isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)


def operands(s: Stmt) -> tuple:
    """The values a statement reads directly (not those of nested statements)."""
    if isinstance(s, Instr):
        return s.args
    if isinstance(s, For):
        return (s.start, s.stop, s.step)
    return (s.cond,)


def substitute(body: list, mapping: dict) -> None:
    """Replace, in place, every use of a value `v` by `mapping[v]` (keys and values are Values)."""
    if not mapping:
        return
    for s in walk(body):
        if isinstance(s, Instr):
            if any(a in mapping for a in s.args):
                s.args = tuple(mapping.get(a, a) for a in s.args)
        elif isinstance(s, For):
            s.start, s.stop, s.step = (mapping.get(v, v) for v in (s.start, s.stop, s.step))
        else:
            s.cond = mapping.get(s.cond, s.cond)


def use_counts(body: list) -> dict:
    counts: dict = {}
    for s in walk(body):
        for v in operands(s):
            counts[v] = counts.get(v, 0) + 1
    return counts


# ----------------------------------------------------------------------------------------------
# Type rules

def _is_numeric(t: Type) -> bool:
    return t.dtype.category in (INT, FLOAT)


def result_type(op: str, args: tuple, attr=None) -> Type:
    """The result type of `op` over `args`, or IRError naming what does not fit."""
    types = [a.type for a in args]
    if op in ARITH or op in BITS:
        a, b = types
        if a != b:
            raise IRError(f"{op} needs operands of one type, got {a} and {b}")
        if op in ARITH and not _is_numeric(a):
            raise IRError(f"{op} needs numbers, got {a}")
        if op in ("pow", "atan2") and not a.dtype.is_float:
            raise IRError(f"{op} needs floats, got {a}")
        if op in ("shl", "shr") and not a.dtype.is_int:
            raise IRError(f"{op} needs integers, got {a}")
        if op in ("and", "or", "xor") and a.dtype.is_float:
            raise IRError(f"{op} needs integers or bools, got {a}")
        return a
    if op in COMPARE:
        a, b = types
        if a != b:
            raise IRError(f"cannot compare {a} with {b}; cast one side first")
        return Type(bool_, a.lanes)
    if op in UNARY_FLOAT:
        if not types[0].dtype.is_float:
            raise IRError(f"{op} needs a float, got {types[0]}; cast it first")
        return types[0]
    if op in UNARY_NUMERIC:
        if not _is_numeric(types[0]):
            raise IRError(f"{op} needs a number, got {types[0]}")
        return types[0]
    if op in UNARY_LOGIC:
        if types[0].dtype is not bool_:
            raise IRError(f"not needs a bool, got {types[0]}")
        return types[0]
    if op in UNARY_BITS:
        if not types[0].dtype.is_int:
            raise IRError(f"~ needs an integer, got {types[0]}")
        return types[0]
    if op == "select":
        c, a, b = types
        if c.dtype is not bool_ or a != b or c.lanes not in (1, a.lanes):
            raise IRError(f"select needs (bool, T, T), got ({c}, {a}, {b})")
        return a
    if op in TERNARY_FLOAT:
        if types[0] != types[1] or types[1] != types[2] or not types[0].dtype.is_float:
            raise IRError(f"{op} needs three floats of one type, got ({', '.join(map(str, types))})")
        return types[0]
    if op == "mulhi":
        if types[0] != types[1] or types[0].dtype is not u32:
            raise IRError(f"mulhi needs two u32, got {types[0]} and {types[1]}")
        return types[0]
    if op == "mad8":
        acc, a, b = types
        if acc.dtype is not i32 or any(t.dtype.name not in ("i8", "u8") or t.lanes != acc.lanes for t in (a, b)):
            raise IRError(f"mad8 needs (i32, 8-bit int, 8-bit int), got ({acc}, {a}, {b})")
        return acc
    if op in PLANE:
        return types[0]
    raise IRError(f"no type rule for {op}")


# ----------------------------------------------------------------------------------------------
# Building

class Builder:
    """Appends typed instructions to a kernel; `with b.loop(...)` and `with b.branch(...)` nest."""

    def __init__(self, name: str) -> None:
        self.kernel = Kernel(name, [], [])
        self._blocks: list[list] = [self.kernel.body]
        self.line = 0  # the frontend sets this to stamp instructions with their source line

    # -- values ---------------------------------------------------------------------------------
    def new_value(self, type: Type) -> Value:
        v = Value(self.kernel.next_id, type)
        self.kernel.next_id += 1
        return v

    def emit(self, op: str, args: tuple = (), type: Type | None = None, attr=None) -> Value | None:
        result = self.new_value(type) if type is not None else None
        self._blocks[-1].append(Instr(op, tuple(args), result, attr, self.line))
        return result

    @property
    def block(self) -> list:
        return self._blocks[-1]

    # -- parameters -----------------------------------------------------------------------------
    def array_param(self, name: str, dtype: DType) -> Array:
        arr = Array(name, dtype)
        self.kernel.params.append(arr)
        return arr

    def scalar_param(self, name: str, dtype: DType) -> Value:
        v = self.new_value(Type(dtype))
        self.kernel.params.append(ScalarParam(name, v))
        return v

    # -- pure ops -------------------------------------------------------------------------------
    def const(self, value, dtype: DType) -> Value:
        if dtype.is_float:
            value = float(value)
        elif dtype is bool_:
            value = bool(value)
        else:
            value = int(value)
            bits = dtype.itemsize * 8
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.signed else (0, (1 << bits) - 1)
            if not lo <= value <= hi:
                raise IRError(f"constant {value} does not fit {dtype.name}")
        return self.emit("const", (), Type(dtype), value)

    def binary(self, op: str, a: Value, b: Value) -> Value:
        return self.emit(op, (a, b), result_type(op, (a, b)))

    def unary(self, op: str, a: Value) -> Value:
        return self.emit(op, (a,), result_type(op, (a,)))

    def cast(self, a: Value, dtype: DType) -> Value:
        if a.type.dtype is dtype:
            return a
        return self.emit("cast", (a,), Type(dtype, a.type.lanes))

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return self.emit("select", (cond, a, b), result_type("select", (cond, a, b)))

    def ternary(self, op: str, a: Value, b: Value, c: Value) -> Value:
        return self.emit(op, (a, b, c), result_type(op, (a, b, c)))

    def mulhi(self, a: Value, b: Value) -> Value:
        return self.emit("mulhi", (a, b), result_type("mulhi", (a, b)))

    def mad8(self, acc: Value, a: Value, b: Value) -> Value:
        """acc + i32(a) * i32(b) for 8-bit integers a and b (wrapping): a byte dot product's step."""
        return self.emit("mad8", (acc, a, b), result_type("mad8", (acc, a, b)))

    def builtin(self, name: str) -> Value:
        if name not in BUILTINS:
            raise IRError(f"unknown builtin {name}")
        return self.emit("builtin", (), Type(INDEX), name)

    def length(self, arr: Array) -> Value:
        return self.emit("len", (), Type(INDEX), arr)

    # -- vectors --------------------------------------------------------------------------------
    def extract(self, v: Value, lane: int) -> Value:
        return self.emit("extract", (v,), v.type.scalar, lane)

    def splat(self, v: Value, lanes: int) -> Value:
        return self.emit("splat", (v,), Type(v.type.dtype, lanes))

    def pack(self, values: list) -> Value:
        t = values[0].type
        if any(v.type != t for v in values) or t.lanes != 1:
            raise IRError("pack needs scalars of one type")
        return self.emit("pack", tuple(values), Type(t.dtype, len(values)))

    # -- memory ---------------------------------------------------------------------------------
    def load(self, arr: Array, index: Value, lanes: int = 1) -> Value:
        self._check_index(index)
        return self.emit("load", (index,), Type(arr.dtype, lanes), arr)

    def lut16(self, arr: Array, index: Value) -> Value:
        """arr[index & 15]: a look-up in a table of (at least) 16 32-bit values, which the C target does as a
        vector shuffle across its units (`targets/c.py`); a load elsewhere."""
        self._check_index(index)
        if arr.dtype.itemsize != 4:
            raise IRError(f"lut16 needs a table of 32-bit values, got {arr.name} of {arr.dtype.name}")
        masked = self.binary("and", self.cast(index, INDEX), self.const(15, INDEX))
        return self.emit("lut16", (masked,), Type(arr.dtype), arr)

    def store(self, arr: Array, index: Value, value: Value) -> None:
        self._check_index(index)
        if value.type.dtype is not arr.dtype:
            raise IRError(f"cannot store {value.type} into {arr.name} of {arr.dtype.name}; cast it first")
        self.emit("store", (index, value), None, arr)

    def shared(self, dtype: DType, size: int, name: str = "") -> Array:
        if not isinstance(size, int) or size <= 0:
            raise IRError(f"shared memory needs a positive comptime size, got {size!r}")
        arr = Array(name or f"shared{self.kernel.next_id}", dtype, "shared", size)
        self.kernel.next_id += 1
        self.emit("shared", (), None, arr)
        return arr

    def atomic(self, op: str, arr: Array, index: Value, value: Value) -> Value:
        self._check_index(index)
        if value.type != Type(arr.dtype):
            raise IRError(f"{op} of {value.type} into {arr.name} of {arr.dtype.name}")
        return self.emit(op, (index, value), value.type, arr)

    def sync(self) -> None:
        self.emit("sync_units")

    def plane(self, op: str, v: Value) -> Value:
        if op not in PLANE:
            raise IRError(f"unknown plane op {op}")
        return self.emit(op, (v,), v.type)

    # -- matrix fragments and asynchronous copies ------------------------------------------------
    def fragment(self, use: str, dtype: DType, m: int, n: int, k: int, layout: str = "row",
                 scope: str = "plane") -> Fragment:
        """Declare a fragment (see `Fragment`); a/b take f16, bf16 or f32 (computed as tf32), the
        accumulator f32. Shapes per input dtype are `MATRIX_SHAPES`; a "group" accumulator is
        `GROUP_M` x n x `GROUP_K`, n a multiple of 8 up to `GROUP_MAX_N`."""
        if scope == "group":
            shape_ok = m == GROUP_M and k == GROUP_K and n % 8 == 0 and 8 <= n <= GROUP_MAX_N
            if use != "accumulator" or dtype is not f32 or not shape_ok:
                raise IRError(f"a plane group's fragment is an f32 accumulator of {GROUP_M} x n x {GROUP_K}, n a "
                              f"multiple of 8 up to {GROUP_MAX_N}; got {use} {dtype.name} m={m} n={n} k={k}")
            frag = Fragment(f"frag{self.kernel.next_id}", use, dtype, m, n, k, layout, scope)
            self.kernel.next_id += 1
            self.emit("fragment", (), None, frag)
            return frag
        if scope != "plane":
            raise IRError(f"a fragment's scope is 'plane' or 'group', got {scope!r}")
        if use not in ("a", "b", "accumulator"):
            raise IRError(f"a fragment's use is 'a', 'b' or 'accumulator', got {use!r}")
        if layout not in ("row", "col"):
            raise IRError(f"a fragment's layout is 'row' or 'col', got {layout!r}")
        if use == "accumulator" and dtype is not f32:
            raise IRError(f"an accumulator fragment holds f32, got {dtype.name}")
        shapes = (MATRIX_SHAPES.get(dtype.name, ()) if use != "accumulator"
                  else {s for shapes in MATRIX_SHAPES.values() for s in shapes})
        if (m, n, k) not in shapes:
            raise IRError(f"no {dtype.name} fragment of shape m={m} n={n} k={k}; known: "
                          + ", ".join(f"{d}: {s}" for d, s in MATRIX_SHAPES.items()))
        frag = Fragment(f"frag{self.kernel.next_id}", use, dtype, m, n, k, layout)
        self.kernel.next_id += 1
        self.emit("fragment", (), None, frag)
        return frag

    def matrix_fill(self, frag: Fragment, value: Value) -> None:
        """Every element of accumulator `frag` = `value` (a scalar of its dtype)."""
        if frag.use != "accumulator" or value.type != Type(frag.dtype):
            raise IRError(f"matrix_fill needs an accumulator and a {frag.dtype.name} scalar, got {frag.use} "
                          f"and {value.type}")
        self.emit("matrix_fill", (value,), None, frag)

    def matrix_load(self, frag: Fragment, arr: Array, index: Value, stride: Value) -> None:
        """Load `frag` from `arr`: element (r, c) at `index + r * stride + c` ("row") or
        `index + c * stride + r` ("col"); `stride` counts elements."""
        self._plane_fragments("matrix_load", frag)
        self._check_index(index)
        self._check_index(stride)
        if arr.dtype is not frag.dtype:
            raise IRError(f"cannot load a {frag.dtype.name} fragment from {arr.name} of {arr.dtype.name}")
        self.emit("matrix_load", (index, stride), None, (frag, arr))

    def matrix_mma(self, d: Fragment, a: Fragment, b: Fragment, c: Fragment) -> None:
        """d = a @ b + c (d and c accumulators, may be the same fragment)."""
        self._plane_fragments("matrix_mma", d, a, b, c)
        uses = (d.use, a.use, b.use, c.use)
        if uses != ("accumulator", "a", "b", "accumulator"):
            raise IRError(f"matrix_mma takes (accumulator, a, b, accumulator), got {uses}")
        if a.dtype is not b.dtype or len({(f.m, f.n, f.k) for f in (d, a, b, c)}) != 1:
            raise IRError("matrix_mma needs fragments of one shape, and a and b of one dtype")
        self.emit("matrix_mma", (), None, (d, a, b, c))

    def matrix_store(self, arr: Array, index: Value, stride: Value, frag: Fragment, layout: str = "row") -> None:
        """Store accumulator `frag` into `arr` (an f32 array) laid out as in `matrix_load`."""
        self._plane_fragments("matrix_store", frag)
        self._check_index(index)
        self._check_index(stride)
        if frag.use != "accumulator" or arr.dtype is not frag.dtype or layout not in ("row", "col"):
            raise IRError(f"matrix_store writes an accumulator into an array of its dtype with layout 'row' "
                          f"or 'col', got {frag.use}, {arr.dtype.name}, {layout!r}")
        self.emit("matrix_store", (index, stride), None, (arr, frag, layout))

    @staticmethod
    def _plane_fragments(op: str, *frags: Fragment) -> None:
        if any(f.scope != "plane" for f in frags):
            raise IRError(f"{op} takes a plane's fragments; a plane group's accumulator goes to group_mma and "
                          f"group_store")

    def group_mma(self, acc: Fragment, a: Array, a_indices: tuple, b: Array, b_indices: tuple, b_panel: int) -> None:
        """Start `acc += A_i @ B_i` for each pair of indices, as one asynchronous batch of the plane group
        (`group_wait` waits for it; `acc` must not be touched meanwhile). Both operands are f16 or bf16
        in shared memory in the swizzled layout (see `SWIZZLE_ROW_BYTES`):

        - A_i is 64 x 16: row r, column c at `a_indices[i] + r * R + c`, R the elements of a 128-byte row
          (64); the index is a whole number of 8-row blocks from the array's start plus a column offset
          that is a multiple of 16 (it may start at any multiple of 16 within the row);
        - B_i is 16 x n, in panels of R columns: row r, column c at `b_indices[i] + (c // R) * b_panel +
          r * R + c % R`; the index is a whole number of 8-row blocks, `b_panel` (elements) too.

        Every unit of the group calls it with the same arguments; copies that filled the operands must
        have been waited for (`copy_wait`) and the units synced.
        """
        if acc.scope != "group":
            raise IRError(f"group_mma accumulates into a plane group's fragment, got a {acc.scope}'s {acc.use}")
        if a.kind != "shared" or b.kind != "shared" or a.dtype is not b.dtype or a.dtype.name not in GROUP_INPUTS:
            raise IRError(f"group_mma reads two shared arrays of one dtype among {GROUP_INPUTS}, got {a.name} "
                          f"({a.kind}, {a.dtype.name}) and {b.name} ({b.kind}, {b.dtype.name})")
        if not a_indices or len(a_indices) != len(b_indices):
            raise IRError(f"group_mma takes one or more pairs of indices, got {len(a_indices)} and {len(b_indices)}")
        for v in (*a_indices, *b_indices):
            self._check_index(v)
        if not isinstance(b_panel, int) or (b_panel * b.dtype.itemsize) % SWIZZLE_BLOCK_BYTES:
            raise IRError(f"group_mma's b_panel is a comptime count of elements making whole {SWIZZLE_BLOCK_BYTES}-"
                          f"byte blocks, got {b_panel!r}")
        self.emit("group_mma", (*a_indices, *b_indices), None, (acc, a, b, b_panel))

    def group_wait(self, acc: Fragment, pending: int) -> None:
        """Wait until at most `pending` of this plane group's `group_mma` batches into `acc` are still
        running (`acc` may be read once none is)."""
        if acc.scope != "group":
            raise IRError(f"group_wait waits for a plane group's accumulator, got a {acc.scope}'s {acc.use}")
        if not isinstance(pending, int) or pending < 0:
            raise IRError(f"group_wait takes a comptime count >= 0, got {pending!r}")
        self.emit("group_wait", (), None, (acc, pending))

    def group_store(self, arr: Array, index: Value, stride: Value, acc: Fragment, rows: Value, cols: Value) -> None:
        """Store a plane group's accumulator into `arr` (any float dtype, rounded): element (r, c) to
        `arr[index + r * stride + c]` for r < `rows` and c < `cols` (the rest is not written)."""
        for v in (index, stride, rows, cols):
            self._check_index(v)
        if acc.scope != "group" or not arr.dtype.is_float:
            raise IRError(f"group_store writes a plane group's accumulator into a float array, got a "
                          f"{acc.scope}'s {acc.use} and {arr.name} of {arr.dtype.name}")
        self.emit("group_store", (index, stride, rows, cols), None, (arr, acc))

    def copy_async(self, dst: Array, dst_index: Value, src: Array, src_index: Value, count: int,
                   valid: Value) -> None:
        """Start copying `count` elements `src[src_index:]` (global) to `dst[dst_index:]` (shared), or
        zeros when `valid` is false; `count` elements are 4, 8 or 16 bytes. The copy may land any time
        before the `copy_wait` that covers it; a target without such copies does it at once."""
        self._check_index(dst_index)
        self._check_index(src_index)
        if dst.kind != "shared" or src.kind != "global" or dst.dtype is not src.dtype:
            raise IRError(f"copy_async copies a global array into a shared one of its dtype, got {src.name} "
                          f"({src.kind}, {src.dtype.name}) -> {dst.name} ({dst.kind}, {dst.dtype.name})")
        if count * src.dtype.itemsize not in (4, 8, 16):
            raise IRError(f"copy_async moves 4, 8 or 16 bytes, got {count} x {src.dtype.name}")
        if valid.type != Type(bool_):
            raise IRError(f"copy_async's condition must be a bool, got {valid.type}")
        self.emit("copy_async", (dst_index, src_index, valid), None, (dst, src, count))

    def copy_commit(self) -> None:
        """Close the group of `copy_async`s started since the last commit."""
        self.emit("copy_commit")

    def copy_wait(self, pending: int) -> None:
        """Wait until at most `pending` committed groups of this unit's copies are still in flight
        (other units' copies need a `sync` after this)."""
        if not isinstance(pending, int) or pending < 0:
            raise IRError(f"copy_wait takes a comptime count >= 0, got {pending!r}")
        self.emit("copy_wait", (), None, pending)

    def _check_index(self, index: Value) -> None:
        if not index.type.dtype.is_int or index.type.lanes != 1:
            raise IRError(f"an index must be a scalar integer, got {index.type}")

    # -- locals ---------------------------------------------------------------------------------
    def local(self, type: Type, name: str = "") -> Local:
        var = Local(name or f"var{self.kernel.next_id}", type)
        self.kernel.next_id += 1
        self.emit("local", (), None, var)
        return var

    def read(self, var: Local) -> Value:
        return self.emit("read", (), var.type, var)

    def write(self, var: Local, value: Value) -> None:
        if value.type != var.type:
            raise IRError(f"variable {var.name} holds {var.type}, cannot assign {value.type}")
        self.emit("write", (value,), None, var)

    def ret(self) -> None:
        self.emit("return")

    # -- structure ------------------------------------------------------------------------------
    @contextmanager
    def loop(self, start: Value, stop: Value, step: Value):
        for v in (start, stop, step):
            if v.type != Type(INDEX):
                raise IRError(f"range bounds must be {INDEX.name}, got {v.type}")
        stmt = For(self.new_value(Type(INDEX)), start, stop, step, [], self.line)
        self.block.append(stmt)
        self._blocks.append(stmt.body)
        try:
            yield stmt.var
        finally:
            self._blocks.pop()

    def branch(self, cond: Value) -> If:
        """Append an If; fill it with `with b.inside(stmt.then): ...`."""
        if cond.type != Type(bool_):
            raise IRError(f"a condition must be a bool, got {cond.type}")
        stmt = If(cond, [], [], self.line)
        self.block.append(stmt)
        return stmt

    @contextmanager
    def inside(self, block: list):
        self._blocks.append(block)
        try:
            yield
        finally:
            self._blocks.pop()


# ----------------------------------------------------------------------------------------------
# Printing

def print_kernel(k: Kernel, canonical: bool = False) -> str:
    """The kernel as text; `canonical` renumbers values and names so equal kernels print equal."""
    names: dict = {}

    def val(v: Value) -> str:
        if not canonical:
            return f"%{v.id}"
        if v not in names:
            names[v] = f"%{len(names)}"
        return names[v]

    objs: dict = {}

    def obj(o) -> str:
        if not canonical:
            return o.name
        if id(o) not in objs:
            objs[id(o)] = f"@{len(objs)}"
        return objs[id(o)]

    lines = []

    def attr_str(a) -> str:
        if isinstance(a, (Array, Local)):
            return obj(a)
        if isinstance(a, Fragment):
            scope = "group " if a.scope == "group" else ""
            return f"{obj(a)}<{scope}{a.use} {a.dtype.name} m{a.m}n{a.n}k{a.k} {a.layout}>"
        if isinstance(a, tuple):
            return "(" + ", ".join(attr_str(x) for x in a) + ")"
        return repr(a)

    def emit(body: list, depth: int) -> None:
        pad = "  " * depth
        for s in body:
            if isinstance(s, Instr):
                lhs = f"{val(s.result)} = " if s.result is not None else ""
                parts = [val(a) for a in s.args]
                if s.attr is not None:
                    parts.append(attr_str(s.attr))
                extra = ""
                if s.op == "shared":
                    extra = f" {s.attr.dtype.name}[{s.attr.size}]"
                elif s.op == "local":
                    extra = f" {s.attr.type}"
                ty = f" : {s.result.type}" if s.result is not None else ""
                lines.append(f"{pad}{lhs}{s.op} {', '.join(parts)}{extra}{ty}")
            elif isinstance(s, For):
                lines.append(f"{pad}for {val(s.var)} in range({val(s.start)}, {val(s.stop)}, {val(s.step)}) {{")
                emit(s.body, depth + 1)
                lines.append(pad + "}")
            else:
                lines.append(f"{pad}if {val(s.cond)} {{")
                emit(s.then, depth + 1)
                if s.orelse:
                    lines.append(pad + "} else {")
                    emit(s.orelse, depth + 1)
                lines.append(pad + "}")

    params = []
    for p in k.params:
        if isinstance(p, Array):
            params.append(f"{obj(p)}: array<{p.dtype.name}>")
        else:
            params.append(f"{val(p.value)}: {p.value.type}")
    emit(k.body, 1)
    head = f"kernel {'k' if canonical else k.name}({', '.join(params)}) {{"
    return "\n".join([head] + lines + ["}"])
