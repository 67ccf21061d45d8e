"""Complex operands on the Cube backend: each complex array is read as its float pairs.

A complex tensor's array is a NumPy complex64/complex128 array on the CPU, a device array of that dtype
on CUDA and wgpu: interleaved (real, imag) pairs of f32 (f64) in memory. `pairs(x)` is the same memory
as a real array of shape `x.shape + (2,)` (a view: no copy, on every target), and `joined(p)` the
reverse for a C-contiguous pair array. A complex op is a real elementwise program over the pair domain
`shape + (2,)`, written with views of its operands' pairs (one part broadcast along the pair axis, the
pair axis reversed) and a constant of two values along it; so `a * b` is the one real kernel
`a0 * b + s * a1 * swap(b)` with `s = (-1, 1)`, rendered by every target (C, CUDA, WGSL) as any real
program is. Rows here: arithmetic (add, sub, neg, mul, div), conj, real, imag, complex, abs, exp,
eq, ne, where, cast, sum, matmul (four real products), the movement views, and the DFTs `fft` and `rfft`
(`ember/kernels/fft.py`, which read the pairs themselves). Other primitives run
their NumPy reference (`CubeBackend.fallbacks`), which is exact; none gives a wrong value.

Example:
    >>> COMPLEX_TABLE["mul"].run(Aval((1,), c64), np.array([1 + 2j], np.complex64), np.array([3j], np.complex64))
    array([-6.+3.j], dtype=complex64)
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ...cube.runtime.arguments import DeviceArray
from ...dtype import COMPLEX, DType, bool_, dtype_of, f32, f64, real_of
from ...kernels import cast as cast_kernel
from ...kernels import fft as fft_kernels
from ...kernels.elementwise import run_elementwise
from ...ops.primitive import Aval
from ...ops.program import Program
from .lowering import TABLE, Lowering, Unlowered

_PARTS = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_WHOLE = {v: k for k, v in _PARTS.items()}


def pairs(x):
    """The (real, imag) pairs of complex array `x`: a real view of shape `x.shape + (2,)`."""
    part = _PARTS[x.dtype]
    if isinstance(x, np.ndarray):
        return x[..., None].view(part)
    return x.strided(x.shape + (2,), x.strides + (part.itemsize,), dtype=part)


def joined(p):
    """The complex array whose pairs are real array `p` (shape S + (2,)), copied first unless it is
    C-contiguous."""
    if not p.flags.c_contiguous:
        p = cast_kernel(p, p.dtype)
    whole = _WHOLE[p.dtype]
    if isinstance(p, np.ndarray):
        return p.view(whole)[..., 0]
    return p.strided(p.shape[:-1], p.strides[:-1], dtype=whole)


def _part(p, k: int):
    """Part k of pair array `p`, broadcast along the pair axis (the same value in both places)."""
    return p[..., k:k + 1]


def _swapped(p):
    """`p` with each pair reversed: (imag, real)."""
    return p[..., ::-1]


_CONSTANTS: dict = {}


def _constant(values, part: np.dtype, like):
    """A 1-d array of `values` along the pair axis (a 0-d one of a single value), on the runtime of
    `like` (kept per runtime)."""
    runtime = like.runtime if isinstance(like, DeviceArray) else None
    key = (values, part, runtime)
    found = _CONSTANTS.get(key)
    if found is None:
        first = values[0] if isinstance(values, tuple) else values
        host = np.array(values, np.bool_ if isinstance(first, bool) else part)
        found = _CONSTANTS[key] = host if runtime is None else runtime.to_device(host)
    return found


class _Builder:
    """A real elementwise program over the pair domain, built as expressions: value ids and steps."""

    def __init__(self, part: DType) -> None:
        self.part = part
        self.arrays: list = []
        self.steps: list = []

    def input(self, array) -> int:
        self.arrays.append(array)
        return len(self.arrays) - 1

    def __call__(self, name: str, *args: int, dtype: DType | None = None, params: tuple = ()) -> int:
        self.steps.append((name, params, args, dtype or self.part))
        return -len(self.steps)  # resolved to an id in `run`, once every input is known

    def run(self, shape: tuple, *outputs: int) -> list:
        n = len(self.arrays)
        fix = lambda v: v if v >= 0 else n - v - 1  # noqa: E731  (step k was given id -(k + 1))
        steps = tuple((name, params, tuple(fix(a) for a in args), dtype) for name, params, args, dtype in self.steps)
        program = Program(tuple(dtype_of(a.dtype) for a in self.arrays), steps, tuple(fix(o) for o in outputs))
        return run_elementwise(program, shape, list(self.arrays), alike=True)


def _domain(out: Aval) -> tuple:
    return tuple(out.shape) + (2,)


def _part_dtype(x) -> DType:
    return real_of(dtype_of(x.dtype))


def _add_like(name: str) -> Callable:
    def run(out: Aval, a, b):
        prog = _Builder(_part_dtype(a))
        (p,) = prog.run(_domain(out), prog(name, prog.input(pairs(a)), prog.input(pairs(b))))
        return joined(p)
    return run


def _neg(out: Aval, a):
    prog = _Builder(_part_dtype(a))
    (p,) = prog.run(_domain(out), prog("neg", prog.input(pairs(a))))
    return joined(p)


def _mul(out: Aval, a, b):
    pa, pb = pairs(a), pairs(b)
    prog = _Builder(_part_dtype(a))
    a0, a1 = prog.input(_part(pa, 0)), prog.input(_part(pa, 1))
    bb, bs = prog.input(pb), prog.input(_swapped(pb))
    s = prog.input(_constant((-1.0, 1.0), pa.dtype, pa))
    # (a0 + i a1)(b0 + i b1) = (a0 b0 - a1 b1) + i (a0 b1 + a1 b0): a0 * b + s * a1 * swap(b)
    (p,) = prog.run(_domain(out), prog("add", prog("mul", a0, bb), prog("mul", s, prog("mul", a1, bs))))
    return joined(p)


def _div(out: Aval, a, b):
    pa, pb = pairs(a), pairs(b)
    prog = _Builder(_part_dtype(a))
    aa, asw = prog.input(pa), prog.input(_swapped(pa))
    b0, b1 = prog.input(_part(pb, 0)), prog.input(_part(pb, 1))
    s = prog.input(_constant((1.0, -1.0), pa.dtype, pa))
    # a conj(b) / |b|^2: (a0 b0 + a1 b1, a1 b0 - a0 b1) = a * b0 + s * swap(a) * b1
    num = prog("add", prog("mul", aa, b0), prog("mul", s, prog("mul", asw, b1)))
    den = prog("add", prog("mul", b0, b0), prog("mul", b1, b1))
    (p,) = prog.run(_domain(out), prog("div", num, den))
    return joined(p)


def _conj(out: Aval, a):
    pa = pairs(a)
    prog = _Builder(_part_dtype(a))
    (p,) = prog.run(_domain(out), prog("mul", prog.input(pa), prog.input(_constant((1.0, -1.0), pa.dtype, pa))))
    return joined(p)


def _exp(out: Aval, a):
    pa = pairs(a)
    prog = _Builder(_part_dtype(a))
    a0, a1 = prog.input(_part(pa, 0)), prog.input(_part(pa, 1))
    first = prog.input(_constant((True, False), pa.dtype, pa))
    # exp(a0) (cos a1, sin a1)
    trig = prog("where", first, prog("cos", a1), prog("sin", a1))
    (p,) = prog.run(_domain(out), prog("mul", prog("exp", a0), trig))
    return joined(p)


def _complex(out: Aval, re, im):
    prog = _Builder(dtype_of(re.dtype))
    first = prog.input(_constant((True, False), re.dtype, re if isinstance(re, DeviceArray) else im))
    (p,) = prog.run(_domain(out), prog("where", first, prog.input(re[..., None] if re.ndim else re),
                                       prog.input(im[..., None] if im.ndim else im)))
    return joined(p)


def _real_part(k: int) -> Callable:
    def run(out: Aval, a):
        return pairs(a)[..., k]  # a view, as the movement rows give
    return run


def _abs(out: Aval, a):
    pa = pairs(a)
    prog = _Builder(_part_dtype(a))
    a0, a1 = prog.input(pa[..., 0]), prog.input(pa[..., 1])
    (p,) = prog.run(tuple(out.shape), prog("sqrt", prog("add", prog("mul", a0, a0), prog("mul", a1, a1))))
    return p


def _compare(name: str) -> Callable:
    join = "logical_and" if name == "eq" else "logical_or"

    def run(out: Aval, a, b):
        pa, pb = pairs(a), pairs(b)
        prog = _Builder(_part_dtype(a))
        parts = [prog(name, prog.input(pa[..., k]), prog.input(pb[..., k]), dtype=bool_) for k in (0, 1)]
        (p,) = prog.run(tuple(out.shape), prog(join, *parts, dtype=bool_))
        return p
    return run


def _where(out: Aval, c, a, b):
    prog = _Builder(_part_dtype(a))
    (p,) = prog.run(_domain(out), prog("where", prog.input(c[..., None]), prog.input(pairs(a)), prog.input(pairs(b))))
    return joined(p)


def _cast(out: Aval, x, *, dtype: DType):
    if x.dtype.kind == "c" and dtype.category == COMPLEX:  # c64 <-> c128: the parts cast
        return joined(cast_kernel(pairs(x), real_of(dtype).np))
    if x.dtype.kind == "c":  # to a real dtype: the real part (PyTorch's), cast
        return TABLE["cast"].run(out, pairs(x)[..., 0], dtype=dtype)
    part = real_of(dtype)
    re = x if dtype_of(x.dtype) is part else TABLE["cast"].run(Aval(out.shape, part), x, dtype=part)
    return _complex(out, re, _constant(0.0, part.np, re))


def _sum(out: Aval, x, *, dims, keepdim):
    p = TABLE["sum"].run(Aval(_domain(out), _part_dtype(x)), pairs(x), dims=dims, keepdim=keepdim)
    return joined(p)


def _matmul(out: Aval, a, b):
    pa, pb = pairs(a), pairs(b)
    mm = TABLE["matmul"].run
    part = _part_dtype(a)
    real = Aval(tuple(out.shape), part)
    products = [mm(real, cast_kernel(pa[..., i], pa.dtype), cast_kernel(pb[..., j], pb.dtype))
                for i, j in ((0, 0), (1, 1), (0, 1), (1, 0))]
    prog = _Builder(part)
    rr, ii, ri, ir = (prog.input(q[..., None]) for q in products)
    first = prog.input(_constant((True, False), pa.dtype, pa))
    (p,) = prog.run(_domain(out), prog("where", first, prog("sub", rr, ii), prog("add", ri, ir)))
    return joined(p)


def _reshape(out: Aval, x, *, shape):
    v = x.view()
    try:
        v.shape = shape
        return v
    except AttributeError:
        return joined(cast_kernel(pairs(x), _PARTS[x.dtype])).reshape(shape)


def _only_pairs(run: Callable) -> Callable:
    """`run`, refusing (`Unlowered`: the reference runs) inputs whose parts are not f32 or f64."""
    def checked(out: Aval, *arrays, **params):
        for a in arrays:
            if a.dtype.kind == "f" and dtype_of(a.dtype) not in (f32, f64):
                raise Unlowered(f"{a.dtype} beside complex operands")
        return run(out, *arrays, **params)
    return checked


COMPLEX_TABLE: dict[str, Lowering] = {
    "add": Lowering(_add_like("add")), "sub": Lowering(_add_like("sub")), "neg": Lowering(_neg),
    "mul": Lowering(_mul), "div": Lowering(_div), "conj": Lowering(_conj), "exp": Lowering(_exp),
    "complex": Lowering(_complex), "real": Lowering(_real_part(0)), "imag": Lowering(_real_part(1)),
    "abs": Lowering(_abs), "eq": Lowering(_compare("eq")), "ne": Lowering(_compare("ne")),
    "where": Lowering(_where), "cast": Lowering(_only_pairs(_cast)), "sum": Lowering(_sum),
    "matmul": Lowering(_matmul), "reshape": Lowering(_reshape),
    "fft": Lowering(lambda out, x, *, dims, inverse: fft_kernels.fft(x, dims, inverse)),
    "rfft": Lowering(lambda out, x, *, dim: fft_kernels.rfft(x, dim)),
    **{name: TABLE[name] for name in ("permute", "expand", "slice", "flip")},
}
"""The Cube backend's rows for primitives with a complex operand or result (see the module docstring)."""
