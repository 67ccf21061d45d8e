"""What the tracer reads and holds: a function's parsed source, and handles to arrays and variables.

Example:
    >>> src = Source.of(my_kernel_function)
    >>> src.error(node, "bad")   # a KernelError naming the file, line and source line
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from dataclasses import dataclass

from .. import ir
from ..lang import KernelError


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
