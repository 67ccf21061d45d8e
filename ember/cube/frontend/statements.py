"""Tracing statements: blocks, assignment, runtime and comptime `if`/`for`, and `return`.

A Python name reassigned inside a runtime loop or branch and read afterwards (or on the next
iteration) becomes an IR `Local` declared just before the outermost loop/branch that assigns it
(`_Region`); a tuple of values becomes one Local per element (`VarTuple`); every other name stays
bound to an SSA value.
"""

from __future__ import annotations

import ast
from collections import Counter

from ...dtype import DType, bool_, f32
from .. import ir
from ..ir import INDEX, IRError, Type, Value
from ..lang import Builtin, Intrinsic, KernelError
from .source import ArrayRef, VarRef, VarTuple

_MISSING = object()


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


class Statements:
    """The statement half of `Tracer` (a mixin: `Expressions` supplies `eval` and the typed helpers)."""

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
            before = dict(self.env)
            with self.b.inside(stmt.then):
                self.exec_block(node.body)
            self.forget_branch_values(before)  # the else branch must not see the then branch's values
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
            t.forget_branch_values(self.saved)
            return False

    def region(self, node, body) -> "_Region":
        return Statements._Region(self, node, body)

    def forget_branch_values(self, saved: dict) -> None:
        """Drop the SSA values that names took inside a runtime branch or loop body (they are not
        defined outside it): names go back to `saved`, except variables (Locals), which live on."""
        env = {}
        for name, value in self.env.items():
            if isinstance(value, (VarRef, VarTuple)):
                env[name] = value
            elif name in saved:
                env[name] = saved[name]
        self.env.clear()
        self.env.update(env)

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
