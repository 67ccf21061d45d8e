"""`@cube.kernel` and `@cube.function`: parameters, specialization and launch.

A kernel is specialized once per combination of comptime values and element types, and each
specialization is traced to IR once (then cached here); compiling the IR is the runtime's job.

Example:
    >>> @cube.kernel
    ... def fill(out: cube.Array, value: cube.Comptime[float]):
    ...     if cube.ABSOLUTE_POS < len(out):
    ...         out[cube.ABSOLUTE_POS] = out.dtype(value)
    >>> y = np.empty(100, np.float32)
    >>> fill.launch(cube.CubeCount(1), cube.CubeDim(128), y, value=2.5)
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dtype import DType
from . import ir
from .compile_cache import source_stamp
from .frontend import ArrayRef, Source, Tracer
from .runtime.arguments import DeviceArray
from .lang import ArraySpec, ComptimeSpec, KernelError, ScalarSpec, SpecFactory

if TYPE_CHECKING:
    from .runtime.base import Runtime


@dataclass(frozen=True)
class Param:
    """One kernel parameter: `kind` is "array", "scalar" or "comptime"; `dtype` may name a comptime."""

    name: str
    kind: str
    dtype: object = None
    default: object = inspect.Parameter.empty


def _parameters(source: Source) -> list:
    ns = source.namespace()
    sig = inspect.signature(source.fn)
    params = []
    for arg in source.tree.args.args:
        if arg.annotation is None:
            raise source.error(arg, f"kernel parameter {arg.arg!r} needs an annotation "
                                    f"(cube.Array[...], a dtype, or cube.Comptime[...])")
        try:
            spec = eval(compile(ast.Expression(arg.annotation), source.file, "eval"), ns)
        except Exception as e:
            raise source.error(arg, f"cannot evaluate the annotation of {arg.arg!r}: {e}") from None
        default = sig.parameters[arg.arg].default
        if isinstance(spec, SpecFactory):
            try:
                spec = spec.bare()
            except TypeError:
                raise source.error(arg, f"parameter {arg.arg!r}: {spec!r} needs a dtype, "
                                        f"e.g. {spec!r}['T']") from None
        if isinstance(spec, ArraySpec):
            params.append(Param(arg.arg, "array", spec.dtype, default))
        elif isinstance(spec, ComptimeSpec):
            params.append(Param(arg.arg, "comptime", None, default))
        elif isinstance(spec, ScalarSpec):
            params.append(Param(arg.arg, "scalar", spec.dtype, default))
        elif isinstance(spec, DType):
            params.append(Param(arg.arg, "scalar", spec, default))
        else:
            raise source.error(arg, f"parameter {arg.arg!r}: unsupported annotation {spec!r}")
    return params


class KernelFunction:
    """A function under `@cube.kernel`: call `.launch(count, dim, *args, **comptime)` to run it."""

    def __init__(self, fn, source: str | None = None) -> None:
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.source = Source.of(fn, source)
        self.params = _parameters(self.source)
        self.runtime_params = [p for p in self.params if p.kind != "comptime"]
        self._traced: dict = {}

    def __repr__(self) -> str:
        return f"<cube.kernel {self.__name__}>"

    def __call__(self, *args, **kwargs):
        raise KernelError(f"{self.__name__} is a cube kernel: run it with "
                          f"{self.__name__}.launch(CubeCount(...), CubeDim(...), *args)")

    def comptime_values(self, given: dict) -> dict:
        """Fill defaults and check that every comptime parameter has a value and no stranger came."""
        values = {}
        names = {p.name for p in self.params if p.kind == "comptime"}
        unknown = set(given) - names
        if unknown:
            raise KernelError(f"{self.__name__}: unknown comptime argument(s) {sorted(unknown)}; "
                              f"comptime parameters are {sorted(names)}")
        for p in self.params:
            if p.kind != "comptime":
                continue
            if p.name in given:
                values[p.name] = given[p.name]
            elif p.default is not inspect.Parameter.empty:
                values[p.name] = p.default
            else:
                raise KernelError(f"{self.__name__}: comptime argument {p.name!r} is missing")
        return values

    def resolve_dtypes(self, arg_dtypes: tuple, comptime: dict) -> tuple:
        """The element type of each runtime parameter, from annotations, comptime values and args."""
        if len(arg_dtypes) != len(self.runtime_params):
            raise KernelError(f"{self.__name__} takes {len(self.runtime_params)} runtime arguments "
                              f"({', '.join(p.name for p in self.runtime_params)}), got {len(arg_dtypes)}")
        resolved = []
        for p, given in zip(self.runtime_params, arg_dtypes):
            want = comptime[p.dtype] if isinstance(p.dtype, str) else p.dtype
            if want is not None and not isinstance(want, DType):
                raise KernelError(f"{self.__name__}: comptime {p.dtype!r} must be a dtype, got {want!r}")
            if p.kind == "array":
                if want is not None and given is not None and given is not want:
                    raise KernelError(f"{self.__name__}: argument {p.name!r} must hold {want.name}, "
                                      f"got {given.name}")
                resolved.append(want or given)
            else:
                resolved.append(want or given)
            if resolved[-1] is None:
                raise KernelError(f"{self.__name__}: cannot tell the dtype of {p.name!r}")
        return tuple(resolved)

    def specialize(self, dtypes: tuple, comptime: dict) -> ir.Kernel:
        """Trace (once per key) the kernel for these runtime dtypes and complete comptime values."""
        try:
            key = (dtypes, tuple(sorted(comptime.items())))
            hash(key)
        except TypeError:
            raise KernelError(f"{self.__name__}: comptime values must be hashable "
                              f"(numbers, strings, tuples, dtypes), got {comptime!r}") from None
        kernel = self._traced.get(key)
        if kernel is None:
            kernel = self._traced[key] = self._trace(dtypes, comptime)
        return kernel

    def disk_key(self, dtypes: tuple, comptime: dict) -> str | None:
        """A key for what `specialize(dtypes, comptime)` returns, made without tracing: the kernel's
        module and qualified name, its source text, `source_stamp` of its module (all code that
        tracing may run), the dtypes and the comptime values. None where that cannot be exact: a
        kernel with closure variables, comptime values other than numbers, strings, None, dtypes
        and tuples of them, or source that cannot be read (those kernels are traced every process).

        Example:
            >>> add_one.disk_key((cube.f32,), {}) == add_one.disk_key((cube.f32,), {})
            True
        """
        if self.fn.__code__.co_freevars or not isinstance(self.fn.__module__, str):  # exec'd without __name__
            return None
        stamp = source_stamp(self.fn.__module__)
        values = [_stable(v) for _, v in sorted(comptime.items())]
        if stamp is None or None in values:
            return None
        parts = [self.fn.__module__, self.fn.__qualname__, "".join(self.source.lines), stamp,
                 ",".join(d.name for d in dtypes),
                 *(f"{name}={v}" for name, v in zip(sorted(comptime), values))]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()

    def _trace(self, dtypes: tuple, comptime: dict) -> ir.Kernel:
        b = ir.Builder(self.__name__)
        env = {}
        it = iter(dtypes)
        for p in self.params:
            if p.kind == "array":
                env[p.name] = ArrayRef(b.array_param(p.name, next(it)))
            elif p.kind == "scalar":
                env[p.name] = b.scalar_param(p.name, next(it))
            else:
                env[p.name] = comptime[p.name]
        Tracer(b, self.source, env, is_kernel=True).run()
        return b.kernel

    def launch(self, count, dim, /, *args, **comptime) -> None:
        """Run on the runtime of the array arguments: a device array's runtime (`CudaArray`,
        `WgpuArray`; NumPy arrays beside it are copied there for the launch), else the host runtime
        (the CPU runtime, the C target; see `host_runtime`).

        Arrays are passed by pointer and written in place; scalars are converted to the parameter's
        dtype; `comptime` values select the specialization.
        """
        launch_runtime(*args).launch(self, count, dim, args, comptime)


def _stable(value) -> str | None:
    """A text that names `value` exactly across processes (type included: 1, 1.0 and True differ),
    or None when there is none (a function, an object whose repr holds an address)."""
    if value is None or type(value) in (bool, int, float, str):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, DType):
        return f"dtype:{value.name}"
    if type(value) is tuple:
        items = [_stable(v) for v in value]
        return None if None in items else "(" + ",".join(items) + ")"
    return None


def launch_runtime(*args) -> "Runtime":
    """The `Runtime` a launch on `args` runs on: the first device array's, else the host runtime.

    Example:
        >>> launch_runtime(np.zeros(3)) is cpu_runtime()       # NumPy arrays, no host_runtime block
        True
    """
    for a in args:
        if isinstance(a, DeviceArray):
            return a.runtime
    return (_host or _cpu())()


_host = None  # a function giving the runtime that launches on NumPy arrays, when not the CPU one


def _cpu():
    global _cpu_runtime
    if _cpu_runtime is None:
        from .runtime.cpu import cpu_runtime
        _cpu_runtime = cpu_runtime
    return _cpu_runtime


_cpu_runtime = None


@contextmanager
def host_runtime(runtime: "Runtime"):
    """Within the block, kernels launched on NumPy arrays only run on `runtime` (which copies them to
    its device and back), e.g. to run the library's NumPy tests on a GPU.

    Example:
        >>> with host_runtime(cuda_runtime()):
        ...     elementwise.unary("exp", np.zeros(3, np.float32))     # runs on the GPU
    """
    global _host
    before, _host = _host, (lambda: runtime)
    try:
        yield runtime
    finally:
        _host = before


class CubeFunction:
    """A helper under `@cube.function`, inlined into the kernel that calls it.

    Example:
        >>> @cube.function
        ... def gelu(x):
        ...     return 0.5 * x * (1.0 + cube.erf(x * 0.7071067811865476))
    """

    def __init__(self, fn, source: str | None = None) -> None:
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.source = Source.of(fn, source)
        self.signature = inspect.signature(fn)

    def __cube_inline__(self, builder: ir.Builder, args: list, kwargs: dict):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise KernelError(f"{self.__name__}: {e}") from None
        bound.apply_defaults()
        line = builder.line
        result = Tracer(builder, self.source, dict(bound.arguments), is_kernel=False).run()
        builder.line = line
        return result

    def __call__(self, *args, **kwargs):
        raise KernelError(f"{self.__name__} is a cube function: call it from inside a kernel")


def kernel(fn=None, *, source: str | None = None):
    """Decorator: make `fn` a cube kernel (see the module docstring). `source`: the code that defines
    `fn`, for a kernel whose source Python does not keep (typed in a REPL, read from stdin, exec'd).

    Example:
        >>> exec(text, ns)   # text defines `@cube.kernel(source=text) def k(...)`
    """
    return KernelFunction(fn, source) if fn is not None else lambda f: KernelFunction(f, source)


def function(fn=None, *, source: str | None = None):
    """Decorator: make `fn` a helper that kernels can call; it is inlined at each call. `source` as
    for `kernel`."""
    return CubeFunction(fn, source) if fn is not None else lambda f: CubeFunction(f, source)
