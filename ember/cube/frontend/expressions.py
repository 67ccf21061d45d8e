"""Tracing expressions: comptime values fold in Python, kernel values emit typed IR.

Python numbers meeting kernel values take their type (like literals in C); two kernel values must
share a type. Intrinsics (`cube.exp`, `cube.shared`, ...) dispatch here by name.
"""

from __future__ import annotations

import ast
import math
import operator

from ...dtype import DType, bool_
from .. import ir
from ..ir import INDEX, IRError, Type, Value
from ..lang import Builtin, Intrinsic
from .source import ArrayRef

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "rem", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
           ast.LShift: "shl", ast.RShift: "shr"}
_PY_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
              ast.Pow: operator.pow, ast.BitAnd: operator.and_, ast.BitOr: operator.or_,
              ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_CMPOPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
              ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
              ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNARY_MATH = set(ir.UNARY_FLOAT)
# Comptime evaluation of the math intrinsics on Python numbers.
_PY_MATH = {"exp": math.exp, "exp2": lambda x: 2.0 ** x, "log": math.log, "log2": math.log2,
            "log1p": math.log1p, "sqrt": math.sqrt, "rsqrt": lambda x: 1.0 / math.sqrt(x),
            "sin": math.sin, "cos": math.cos, "tan": math.tan, "tanh": math.tanh, "erf": math.erf,
            "floor": math.floor, "ceil": math.ceil, "round": round, "trunc": math.trunc,
            "reciprocal": lambda x: 1.0 / x, "abs": abs, "expm1": math.expm1, "log10": math.log10,
            "asin": math.asin, "acos": math.acos, "atan": math.atan, "sinh": math.sinh,
            "cosh": math.cosh, "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh}


class Expressions:
    """The expression half of `Tracer` (a mixin over `self.b`, `self.src`, `self.env`)."""

    # ------------------------------------------------------------------------------------------
    # Expressions

    def eval(self, node: ast.expr):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.src.error(node, f"unsupported expression in a kernel: {type(node).__name__}")
        return method(node)

    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node):
        return self.lookup(node.id, node)

    def expr_Tuple(self, node):
        return tuple(self.eval(e) for e in node.elts)

    expr_List = expr_Tuple

    def expr_ListComp(self, node):
        """A comprehension over comptime iterables, unrolled at trace time into a tuple."""
        saved = dict(self.env)
        out = []

        def run(generators):
            if not generators:
                out.append(self.eval(node.elt))
                return
            gen = generators[0]
            items = self.eval(gen.iter)
            if isinstance(items, (Value, ArrayRef)):
                raise self.src.error(node, "a comprehension in a kernel needs a comptime iterable")
            for item in items:
                self.assign(gen.target, item, node)
                conds = [self.eval(c) for c in gen.ifs]
                if any(isinstance(c, Value) for c in conds):
                    raise self.src.error(node, "a comprehension filter must be comptime")
                if all(conds):
                    run(generators[1:])

        try:
            run(node.generators)
        finally:
            self.env.clear()
            self.env.update(saved)
        return tuple(out)

    expr_GeneratorExp = expr_ListComp

    def expr_Attribute(self, node):
        base = self.eval(node.value)
        if isinstance(base, ArrayRef):
            if node.attr == "dtype":
                return base.array.dtype
            raise self.src.error(node, f"an array has no attribute {node.attr!r} (only .dtype and len())")
        if isinstance(base, Value):
            if node.attr == "dtype":
                return base.type.dtype
            raise self.src.error(node, f"a kernel value has no attribute {node.attr!r}")
        value = getattr(base, node.attr)
        if isinstance(value, Builtin):
            return self.b.builtin(value.name)
        return value

    def expr_BinOp(self, node):
        return self.binop(type(node.op), self.eval(node.left), self.eval(node.right), node)

    def expr_UnaryOp(self, node):
        x = self.eval(node.operand)
        op = type(node.op)
        if not isinstance(x, Value):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[op](x)
        if op is ast.UAdd:
            return x
        if op is ast.USub:
            return self.b.unary("neg", x)
        if op is ast.Not:
            return self.b.unary("not", self.truth(x, node))
        return self.b.unary("not" if x.type.dtype is bool_ else "bitwise_not", x)

    def expr_BoolOp(self, node):
        values = [self.eval(v) for v in node.values]
        is_and = isinstance(node.op, ast.And)
        if not any(isinstance(v, Value) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if is_and else (result or v)
            return result
        # Runtime and/or evaluate every operand (no short circuit) and give a bool.
        bools = [self.truth(v, node) if isinstance(v, Value) else self.b.const(bool(v), bool_)
                 for v in values]
        result = bools[0]
        for v in bools[1:]:
            result = self.b.binary("and" if is_and else "or", result, v)
        return result

    def expr_Compare(self, node):
        left = self.eval(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            if not isinstance(left, Value) and not isinstance(right, Value):
                part = _PY_CMPOPS[type(op)](left, right)
            else:
                if type(op) not in _CMPOPS:
                    raise self.src.error(node, f"{type(op).__name__} needs comptime operands")
                a, b = self.coerce(left, right, node)
                part = self.b.binary(_CMPOPS[type(op)], a, b)
            if result is None:
                result = part
            elif isinstance(result, Value) or isinstance(part, Value):
                result = self.expr_and(result, part)
            else:
                result = result and part
            left = right
        return result

    def expr_and(self, a, b):
        a = a if isinstance(a, Value) else self.b.const(bool(a), bool_)
        b = b if isinstance(b, Value) else self.b.const(bool(b), bool_)
        return self.b.binary("and", a, b)

    def expr_IfExp(self, node):
        cond = self.eval(node.test)
        if not isinstance(cond, Value):
            return self.eval(node.body if cond else node.orelse)
        a, b = self.coerce(self.eval(node.body), self.eval(node.orelse), node)
        return self.b.select(self.truth(cond, node), a, b)

    def expr_Subscript(self, node):
        base = self.eval(node.value)
        index = self.eval(node.slice)
        if isinstance(base, ArrayRef):
            return self.load(base, index, node)
        if isinstance(index, Value):
            raise self.src.error(node, "a comptime sequence cannot be indexed by a runtime value")
        return base[index]

    def expr_Call(self, node):
        func = self.eval(node.func)
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords}
        if isinstance(func, Intrinsic):
            return self.intrinsic(func.name, args, kwargs, node)
        if isinstance(func, DType):
            if len(args) != 1:
                raise self.src.error(node, f"{func.name}(x) takes one argument")
            return self.convert(args[0], func)
        inline = getattr(func, "__cube_inline__", None)
        if inline is not None:
            return inline(self.b, args, kwargs)
        if func is len:
            if isinstance(args[0], ArrayRef):
                return self.b.length(args[0].array)
        elif func in (min, max, abs) and any(isinstance(a, Value) for a in args):
            return self.intrinsic(func.__name__, args, kwargs, node)
        elif func is range and any(isinstance(a, Value) for a in args):
            raise self.src.error(node, "range(...) over runtime values is only allowed as the "
                                       "iterable of a for loop")
        if any(isinstance(a, (Value, ArrayRef)) for a in list(args) + list(kwargs.values())):
            raise self.src.error(node, f"{getattr(func, '__name__', func)!s} is not a cube function; "
                                       f"decorate it with @cube.function to call it on kernel values")
        return func(*args, **kwargs)

    # ------------------------------------------------------------------------------------------
    # Typed helpers

    def convert(self, x, dtype: DType) -> Value:
        """`dtype(x)` in a kernel: a typed constant from a Python number, or a cast of a value."""
        if isinstance(x, Value):
            return self.b.cast(x, dtype)
        if isinstance(x, (bool, int, float)):
            return self.b.const(x, dtype)
        raise IRError(f"cannot convert {type(x).__name__} to {dtype.name}")

    def coerce(self, a, b, node) -> tuple:
        """Give a Python number the type of the value it meets (like a literal in C)."""
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise self.src.error(node, "this operation needs a kernel value or a dtype, e.g. cube.f32(1)")
        if not isinstance(a, Value):
            a = self.literal(a, b.type, node)
        if not isinstance(b, Value):
            b = self.literal(b, a.type, node)
        return a, b

    def literal(self, x, type: Type, node) -> Value:
        if not isinstance(x, (bool, int, float)):
            raise self.src.error(node, f"cannot use a {type(x).__name__} with a kernel value")
        dtype = type.dtype
        if isinstance(x, float) and not dtype.is_float:
            if x != int(x):
                raise self.src.error(node, f"the float {x} meets an {dtype.name} value; cast one side")
        v = self.b.const(x, dtype)
        return self.b.splat(v, type.lanes) if type.lanes > 1 else v

    def truth(self, x: Value, node) -> Value:
        if x.type.dtype is bool_:
            return x
        return self.b.binary("ne", x, self.literal(0, x.type, node))

    def index(self, x, node) -> Value:
        if isinstance(x, bool) or isinstance(x, float):
            raise self.src.error(node, f"an index or bound must be an integer, got {x!r}")
        if isinstance(x, int):
            return self.b.const(x, INDEX)
        if not isinstance(x, Value) or not x.type.dtype.is_int:
            raise self.src.error(node, "an index or bound must be an integer")
        return self.b.cast(x, INDEX)

    def binop(self, op, a, b, node):
        if not isinstance(a, Value) and not isinstance(b, Value):
            return _PY_BINOPS[op](a, b)
        if isinstance(a, ArrayRef) or isinstance(b, ArrayRef):
            raise self.src.error(node, "arrays cannot be used in arithmetic; index them")
        name = _BINOPS[op]
        if name == "pow" and isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 4:
            result = a  # small integer powers are multiplications (exact, and any dtype)
            for _ in range(b - 1):
                result = self.b.binary("mul", result, a)
            return result
        a, b = self.coerce(a, b, node)
        dtype = a.type.dtype
        if name == "div" and not dtype.is_float:
            raise self.src.error(node, "/ on integers: use // (which truncates toward zero in kernels)")
        if name == "floordiv":
            q = self.b.binary("div", a, b)
            return self.b.unary("floor", q) if dtype.is_float else q
        return self.b.binary(name, a, b)

    def load(self, arr, index, node) -> Value:
        if not isinstance(arr, ArrayRef):
            raise self.src.error(node, "only arrays can be indexed with a runtime index")
        return self.b.load(arr.array, self.index(index, node))

    def store(self, arr, index, value, node) -> None:
        if not isinstance(arr, ArrayRef):
            raise self.src.error(node, "only arrays can be stored into")
        if not isinstance(value, Value):
            value = self.convert(value, arr.array.dtype)
        self.b.store(arr.array, self.index(index, node), value)

    # ------------------------------------------------------------------------------------------
    # Intrinsics

    def intrinsic(self, name: str, args: list, kwargs: dict, node):
        b = self.b
        if name in _UNARY_MATH or name == "abs":
            (x,) = args
            if not isinstance(x, Value):
                return _PY_MATH[name](x)
            return b.unary(name, x)
        if name in ("min", "max", "pow", "atan2"):
            if len(args) != 2:
                raise self.src.error(node, f"{name} takes two arguments in a kernel")
            if not any(isinstance(a, Value) for a in args):
                return {"min": min, "max": max, "pow": pow, "atan2": math.atan2}[name](*args)
            x, y = self.coerce(args[0], args[1], node)
            return b.binary(name, x, y)
        if name in ir.TERNARY_FLOAT:
            if len(args) != 3:
                raise self.src.error(node, f"{name} takes three arguments in a kernel")
            if not any(isinstance(a, Value) for a in args):
                return args[0] * args[1] + args[2]
            t = next(a.type for a in args if isinstance(a, Value))
            x, y, z = (a if isinstance(a, Value) else self.convert(a, t.dtype) for a in args)
            return b.ternary(name, x, y, z)
        if name in ("select", "where"):
            cond, x, y = args
            if not isinstance(cond, Value):
                return x if cond else y
            x, y = self.coerce(x, y, node)
            return b.select(self.truth(cond, node), x, y)
        if name == "cast":
            x, dtype = args
            return self.convert(x, dtype)
        if name == "mulhi":
            x, y = self.coerce(args[0], args[1], node)
            return b.mulhi(x, y)
        if name == "mad8":
            acc, x, y = args
            if not (isinstance(x, Value) and isinstance(y, Value)):
                raise self.src.error(node, "cube.mad8(acc, a, b) takes 8-bit integer values a and b (loaded or cast)")
            return b.mad8(acc if isinstance(acc, Value) else self.convert(acc, ir.i32), x, y)
        if name == "lut16":
            table, index = args
            if not isinstance(table, ArrayRef):
                raise self.src.error(node, "cube.lut16(table, index) looks up in an array")
            return b.lut16(table.array, index if isinstance(index, Value) else self.convert(index, ir.i32))
        if name == "shared":
            dtype, size = args
            return ArrayRef(b.shared(dtype, size))
        if name == "sync_units":
            b.sync()
            return None
        if name.startswith("atomic_"):
            arr, index, value = args
            if not isinstance(value, Value):
                value = self.convert(value, arr.array.dtype)
            return b.atomic(name, arr.array, self.index(index, node), value)
        if name.startswith("plane_"):
            (x,) = args
            return b.plane(name, x if isinstance(x, Value) else self.const_default(x))
        if name == "unroll":
            raise self.src.error(node, "cube.unroll(...) is only allowed as the iterable of a for loop")
        raise self.src.error(node, f"cube.{name} is not supported here")
