"""What the tracer reads and holds: a function's parsed source, and handles to arrays and variables.

Example:
    >>> src = Source.of(my_kernel_function)
    >>> src.error(node, "bad")   # a KernelError naming the file, line and source line
"""

from __future__ import annotations

import ast
import builtins
import inspect
import itertools
import linecache
import sys
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
    def of(cls, fn, text: str | None = None) -> "Source":
        """The source of `fn`: from its file (or linecache, where IPython keeps notebook cells), else
        from `text` (the code that defined it, `@cube.kernel(source=...)`), else, for a function made by
        `python -c`, from that command line."""
        if text is None:
            try:
                lines, start = inspect.getsourcelines(fn)
            except (OSError, TypeError) as e:
                text = _command_line(fn)
                if text is None:
                    raise KernelError(f"cannot read the source of {fn!r} (defined in "
                                      f"{getattr(getattr(fn, '__code__', None), 'co_filename', '?')}): {e}. "
                                      f"For a kernel defined in a REPL, from stdin or by exec, pass the code "
                                      f"that defines it, @cube.kernel(source=text), or compile that code under "
                                      f"a name from cube.register_source(text)") from None
        if text is not None:
            lines, start = _lines_of(fn, text)
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


_REGISTERED = itertools.count()


def register_source(text: str) -> str:
    """A file name under which `text` is kept in `linecache` (as IPython keeps notebook cells), for
    `compile`: kernels that code defines can then be read back like any other.

    Example:
        >>> exec(compile(text, cube.register_source(text), "exec"), namespace)
    """
    name = f"<ember-source-{next(_REGISTERED)}>"
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    return name


def _command_line(fn) -> str | None:
    """The code of `python -c CODE` when it holds `fn`'s definition at `fn`'s line, else None (an `exec`
    in a process started by `python -c`, such as a test worker, is not that code)."""
    argv = getattr(sys, "orig_argv", [])
    if getattr(getattr(fn, "__code__", None), "co_filename", None) != "<string>" or "-c" not in argv[:-1]:
        return None
    text = argv[argv.index("-c") + 1]
    try:
        module = ast.parse(text)
    except SyntaxError:
        return None
    return text if _definitions(module, fn)[1] else None


def _definitions(module: ast.Module, fn) -> tuple[list, list]:
    """The defs of `fn`'s name in `module`, and those of them that start (decorators included) at the
    first line of `fn`'s code."""
    defs = [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == fn.__name__]
    first = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
    return defs, [n for n in defs if _start(n) == first]


def _start(node: ast.FunctionDef) -> int:
    return min([node.lineno] + [d.lineno for d in node.decorator_list])


def _lines_of(fn, text: str) -> tuple[list, int]:
    """The lines of `fn`'s definition (decorators included) in `text`, and the line it starts on: the
    def of `fn`'s name starting at its code's first line, else the only def of that name."""
    try:
        module = ast.parse(text)
    except SyntaxError as e:
        raise KernelError(f"the source given for {fn.__qualname__} does not parse: {e}") from None
    defs, at_line = _definitions(module, fn)
    chosen = at_line or (defs if len(defs) == 1 else [])
    if not chosen:
        raise KernelError(f"the source given for {fn.__qualname__} holds {len(defs)} definitions of "
                          f"{fn.__name__!r}, none at its line {getattr(fn.__code__, 'co_firstlineno', '?')}")
    node = chosen[0]
    return text.splitlines(keepends=True)[_start(node) - 1:node.end_lineno], _start(node)


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
