"""The frontend: walk a kernel's Python AST and emit IR, folding comptime values on the way.

A kernel body is *traced*, not executed: each expression evaluates either to a plain Python value
(a comptime value: a number, a tuple, a dtype) or to an IR `Value`. Operations between Python values
happen in Python, so comptime arithmetic, comptime `if` and loops over comptime ranges (under
`cube.unroll`) leave no trace in the IR. Operations touching a `Value` emit instructions.

Python names map onto SSA values. A name that is reassigned inside a runtime loop or branch and read
afterwards (or on the next iteration) becomes an IR `Local`, declared just before the outermost
loop/branch that assigns it; everything else stays SSA.

Example (what `trace` produces for `y[i] = x[i] * 2.0` inside `if i < n`):
    %0 = builtin 'absolute_pos' : i32
    %2 = lt %0, %1 : bool
    if %2 { %3 = load %0, x : f32; %4 = const 2.0 : f32; %5 = mul %3, %4 : f32; store %0, %5, y }
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import operator
import textwrap
from collections import Counter
from dataclasses import dataclass

from ..dtype import DType, bool_, f32
from . import ir
from .ir import INDEX, IRError, Type, Value
from .lang import Builtin, Intrinsic, KernelError

_MISSING = object()

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
            "recip": lambda x: 1.0 / x, "abs": abs, "expm1": math.expm1, "log10": math.log10,
            "asin": math.asin, "acos": math.acos, "atan": math.atan, "sinh": math.sinh,
            "cosh": math.cosh, "asinh": math.asinh, "acosh": math.acosh, "atanh": math.atanh}


@dataclass
class Source:
    """A function's parsed source and where it came from, for tracing and error messages."""

    fn: object
    tree: ast.FunctionDef
    file: str
    line_offset: int
    lines: list

    @classmethod
    def of(cls, fn) -> "Source":
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise KernelError(f"cannot read the source of {fn!r}: {e}") from None
        tree = ast.parse(textwrap.dedent("".join(lines))).body[0]
        if not isinstance(tree, ast.FunctionDef):
            raise KernelError(f"{fn!r} is not a plain function")
        return cls(fn, tree, inspect.getsourcefile(fn) or "<unknown>", start - 1, lines)

    def namespace(self) -> dict:
        """The names the function can see besides its parameters: closure cells, then globals."""
        ns = dict(builtins.__dict__)
        ns.update(self.fn.__globals__)
        closure = self.fn.__closure__ or ()
        for name, cell in zip(self.fn.__code__.co_freevars, closure):
            try:
                ns[name] = cell.cell_contents
            except ValueError:  # an unfilled cell: a name defined later in the enclosing scope
                pass
        return ns

    def error(self, node: ast.AST | None, message: str) -> KernelError:
        if node is None or not hasattr(node, "lineno"):
            return KernelError(f"{message}\n  in {self.fn.__qualname__} ({self.file})")
        line = node.lineno + self.line_offset
        text = self.lines[node.lineno - 1].strip() if node.lineno - 1 < len(self.lines) else ""
        return KernelError(f"{message}\n  File \"{self.file}\", line {line}, in "
                           f"{self.fn.__qualname__}\n    {text}")


class ArrayRef:
    """A kernel-side handle to an Array: subscript to load/store, `len()`, `.dtype`."""

    __slots__ = ("array",)

    def __init__(self, array: ir.Array) -> None:
        self.array = array


class VarRef:
    __slots__ = ("local",)

    def __init__(self, local: ir.Local) -> None:
        self.local = local


class VarTuple:
    """A name bound to a tuple of values that a runtime loop or branch reassigns: one Local each.

    This is how a kernel keeps register-blocked accumulators: `acc = tuple(... for r in range(R))`.
    """

    __slots__ = ("refs",)

    def __init__(self, refs: tuple) -> None:
        self.refs = refs


class _Return(Exception):
    """Unwinds tracing at a `return` reached at comptime."""


def _stored_names(nodes: list) -> set:
    names = set()
    for stmt in nodes:
        for node in ast.walk(stmt):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        names.add(n.id)
    return names


def _loaded_names(node: ast.AST) -> Counter:
    return Counter(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))


class Tracer:
    """Traces one function body into `builder`. Helpers (`@cube.function`) get their own Tracer."""

    def __init__(self, builder: ir.Builder, source: Source, env: dict, is_kernel: bool) -> None:
        self.b = builder
        self.src = source
        self.env = env
        self.ns = source.namespace()
        self.is_kernel = is_kernel
        self.runtime_depth = 0  # how many runtime loops/branches enclose the statement being traced
        self.pending: dict = {}  # name -> [block, index]: where to declare it if it is assigned
        self.result = None
        self._all_loads = _loaded_names(source.tree)

    # ------------------------------------------------------------------------------------------
    # Entry

    def run(self):
        try:
            self.exec_block(self.src.tree.body)
        except _Return:
            pass
        return self.result

    # ------------------------------------------------------------------------------------------
    # Statements

    def exec_block(self, stmts: list) -> bool:
        """Trace statements in order; True when the block ended in a `return`."""
        for stmt in stmts:
            if self.exec_stmt(stmt):
                return True
        return False

    def exec_stmt(self, node: ast.stmt) -> bool:
        self.b.line = node.lineno + self.src.line_offset
        try:
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                raise self.src.error(node, f"unsupported statement in a kernel: {type(node).__name__}")
            return bool(method(node))
        except (KernelError, _Return):
            raise
        except IRError as e:
            raise self.src.error(node, str(e)) from None
        except Exception as e:  # a comptime Python call failed: show it at the kernel line
            raise self.src.error(node, f"{type(e).__name__}: {e}") from None

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return False  # docstring
        self.eval(node.value)

    def stmt_Pass(self, node):
        return False

    def stmt_Assert(self, node):
        cond = self.eval(node.test)
        if isinstance(cond, Value):
            raise self.src.error(node, "assert needs a comptime condition")
        if not cond:
            msg = self.eval(node.msg) if node.msg is not None else "comptime assertion failed"
            raise self.src.error(node, str(msg))

    def stmt_Assign(self, node):
        value = self.eval(node.value)
        for target in node.targets:
            self.assign(target, value, node)

    def stmt_AnnAssign(self, node):
        dtype = self.eval(node.annotation)
        if not isinstance(dtype, DType):
            raise self.src.error(node, "a local annotation must be a dtype, like `acc: cube.f32 = 0`")
        if node.value is None:
            raise self.src.error(node, "an annotated local needs a value")
        self.assign(node.target, self.convert(self.eval(node.value), dtype), node)

    def stmt_AugAssign(self, node):
        op = type(node.op)
        if isinstance(node.target, ast.Subscript):
            arr, index = self.eval(node.target.value), self.eval(node.target.slice)
            current = self.load(arr, index, node)
            self.store(arr, index, self.binop(op, current, self.eval(node.value), node), node)
        else:
            current = self.eval(ast.Name(node.target.id, ast.Load(), lineno=node.lineno))
            self.assign(node.target, self.binop(op, current, self.eval(node.value), node), node)

    def stmt_Return(self, node):
        value = self.eval(node.value) if node.value is not None else None
        if self.is_kernel:
            if value is not None:
                raise self.src.error(node, "a kernel cannot return a value; store it into an array")
            if self.runtime_depth:
                self.b.ret()
                return True
            raise _Return()
        if self.runtime_depth:
            raise self.src.error(node, "a cube.function cannot return from inside a runtime loop or "
                                       "branch; assign a variable and return it at the end")
        self.result = value
        raise _Return()

    def stmt_If(self, node):
        cond = self.eval(node.test)
        if not isinstance(cond, Value):
            return self.exec_block(node.body if cond else node.orelse)
        cond = self.truth(cond, node)
        with self.region(node, node.body + node.orelse):
            stmt = self.b.branch(cond)
            with self.b.inside(stmt.then):
                self.exec_block(node.body)
            with self.b.inside(stmt.orelse):
                self.exec_block(node.orelse)
        return False

    def stmt_For(self, node):
        if node.orelse:
            raise self.src.error(node, "for/else is not supported in kernels")
        it = node.iter
        is_call = isinstance(it, ast.Call)
        func = self.eval(it.func) if is_call else None
        if func is range:
            bounds = [self.eval(a) for a in it.args]
            return self.runtime_for(node, bounds)
        if isinstance(func, Intrinsic) and func.name == "unroll":
            items = self.eval(it.args[0])
            if isinstance(items, Value):
                raise self.src.error(node, "cube.unroll needs a comptime range")
        else:
            items = self.eval(it)
        if isinstance(items, (Value, ArrayRef)):
            raise self.src.error(node, "a kernel can loop over range(...) or a comptime sequence only")
        for item in items:  # comptime loop: trace the body once per item
            self.assign(node.target, item, node)
            if self.exec_block(node.body):
                return True
        return False

    def runtime_for(self, node, bounds: list) -> bool:
        if not 1 <= len(bounds) <= 3:
            raise self.src.error(node, "range takes 1 to 3 arguments")
        if len(bounds) == 1:
            bounds = [0] + bounds
        if len(bounds) == 2:
            bounds = bounds + [1]
        if isinstance(bounds[2], Value) or bounds[2] == 0:
            raise self.src.error(node, "a range step must be a nonzero comptime int")
        start, stop, step = (self.index(v, node) for v in bounds)
        if not isinstance(node.target, ast.Name):
            raise self.src.error(node, "a runtime loop variable must be a single name")
        with self.region(node, node.body):
            with self.b.loop(start, stop, step) as var:
                self.env[node.target.id] = var
                self.exec_block(node.body)
        return False

    def stmt_Break(self, node):
        raise self.src.error(node, "break is not supported in kernels; use a condition in the loop body")

    stmt_Continue = stmt_Break

    # ------------------------------------------------------------------------------------------
    # Names, regions and assignment

    class _Region:
        def __init__(self, tracer, node, body):
            self.t, self.node, self.body = tracer, node, body

        def __enter__(self):
            t = self.t
            t.runtime_depth += 1
            self.saved = dict(t.env)
            self.new_pending = []
            inside = _loaded_names(self.node)
            for name in sorted(_stored_names(self.body)):
                current = t.env.get(name, _MISSING)
                if isinstance(current, Value):
                    t.env[name] = t.make_local(name, current)
                elif isinstance(current, (bool, int, float)) and not isinstance(current, DType):
                    t.env[name] = t.make_local(name, t.const_default(current))
                elif isinstance(current, (tuple, list)) and current and all(
                        isinstance(v, Value) for v in current):
                    t.env[name] = VarTuple(tuple(t.make_local(f"{name}{k}", v)
                                                 for k, v in enumerate(current)))
                elif name not in t.pending and not isinstance(current, (VarRef, VarTuple)):
                    if t._all_loads[name] > inside[name]:  # read after the region: must outlive it
                        t.pending[name] = [t.b.block, len(t.b.block)]
                        self.new_pending.append(name)
            return self

        def __exit__(self, *exc):
            t = self.t
            t.runtime_depth -= 1
            for name in self.new_pending:
                t.pending.pop(name, None)
            env = {}
            for name, value in t.env.items():
                if isinstance(value, (VarRef, VarTuple)):
                    env[name] = value
                elif name in self.saved:
                    env[name] = self.saved[name]
            t.env.clear()
            t.env.update(env)
            return False

    def region(self, node, body) -> "_Region":
        return Tracer._Region(self, node, body)

    def make_local(self, name: str, init: Value) -> VarRef:
        var = self.b.local(init.type, name)
        self.b.write(var, init)
        return VarRef(var)

    def const_default(self, x) -> Value:
        """A Python number that must become a runtime variable: bool, i32 or f32 by its Python type."""
        dtype = bool_ if isinstance(x, bool) else INDEX if isinstance(x, int) else f32
        return self.b.const(x, dtype)

    def assign(self, target: ast.expr, value, node) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Value) or len(value) != len(target.elts):
                raise self.src.error(node, "cannot unpack this value into the names on the left")
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
            return
        if isinstance(target, ast.Subscript):
            self.store(self.eval(target.value), self.eval(target.slice), value, node)
            return
        if not isinstance(target, ast.Name):
            raise self.src.error(node, f"cannot assign to {type(target).__name__} in a kernel")
        name = target.id
        current = self.env.get(name, _MISSING)
        if name in self.pending and not isinstance(current, VarRef):
            block, index = self.pending.pop(name)
            init = value if isinstance(value, Value) else None
            vtype = init.type if init is not None else self.py_type(value, node)
            var = ir.Local(name, vtype)
            block.insert(index, ir.Instr("local", (), None, var, self.b.line))
            for entry in self.pending.values():  # later hoists at the same spot go after this one
                if entry[0] is block and entry[1] >= index:
                    entry[1] += 1
            current = self.env[name] = VarRef(var)
        if isinstance(current, VarTuple):
            if not isinstance(value, (tuple, list)) or len(value) != len(current.refs):
                raise self.src.error(node, f"{name} holds a tuple of {len(current.refs)} values; "
                                           f"assign a tuple of the same length")
            for ref, v in zip(current.refs, value):
                self.write_var(ref.local, v, name, node)
            return
        if isinstance(current, VarRef):
            self.write_var(current.local, value, name, node)
        else:
            self.env[name] = value

    def write_var(self, var: ir.Local, value, name: str, node) -> None:
        if not isinstance(value, Value):
            value = self.convert(value, var.type.dtype)
        if value.type != var.type:
            raise self.src.error(node, f"{name} holds {var.type} but is assigned {value.type}; "
                                       f"cast it, or initialise {name} with the type it needs "
                                       f"(e.g. {name} = cube.{value.type.dtype.name}(0))")
        self.b.write(var, value)

    def py_type(self, x, node) -> Type:
        if isinstance(x, (bool, int, float)):
            return Type(bool_ if isinstance(x, bool) else INDEX if isinstance(x, int) else f32)
        raise self.src.error(node, f"cannot keep a {type(x).__name__} in a runtime variable")

    def lookup(self, name: str, node):
        value = self.env.get(name, _MISSING)
        if value is _MISSING:
            if name in self.pending:
                raise self.src.error(node, f"{name} is read before it is assigned")
            value = self.ns.get(name, _MISSING)
            if value is _MISSING:
                raise self.src.error(node, f"name {name!r} is not defined (or is defined only inside "
                                           f"a runtime loop or branch)")
        if isinstance(value, VarRef):
            return self.b.read(value.local)
        if isinstance(value, VarTuple):
            return tuple(self.b.read(r.local) for r in value.refs)
        if isinstance(value, Builtin):
            return self.b.builtin(value.name)
        return value

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
        return self.b.unary("not" if x.type.dtype is bool_ else "bitnot", x)

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
