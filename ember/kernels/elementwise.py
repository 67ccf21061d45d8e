"""The elementwise kernel generator: a program of elementwise primitives becomes one cube kernel.

Every elementwise kernel is generated here: the fusion backend's fused programs, the Cube backend's
lone ops (a one-step program), and the library's `unary`, `binary`, `ternary` and `cast`. A step of a
`Program` is a primitive of the op table (`ember.ops.elementwise.TABLE`), computed by its row's cube
expression (`emit`), or `cast` or `where`. Operands are read through broadcast layouts inside the
kernel (`layout.merged_operands`): a dense input by its flat position, a one-element input at index 0,
a broadcast or strided one through its strides, so an op on operands of different shapes or strides
is one kernel, compiled once per (program, rank after merging dims, how each input is read).

A `Program` is the normalized elementwise part: value ids `0 .. len(inputs)-1` are the input arrays,
each later id is one step `(primitive name, static params, argument ids, dtype)`. `outputs` are the
ids written to memory, each to a new contiguous array. On GPU targets each unit computes `PER_UNIT`
positions. Why IR rather than a `@cube.kernel`, and the kernel shapes per target: docs/fusion.md,
"Generated kernels".

Example:
    >>> p = Program((f32,), (("exp", (), (0,), f32), ("neg", (), (1,), f32)), (2,))
    >>> run_elementwise(p, (3,), [np.zeros(3, np.float32)])[0]
    array([-1., -1., -1.], dtype=float32)
    >>> binary("add", np.ones((2, 1), np.float32), np.arange(3, dtype=np.float32))
    array([[1., 2., 3.],
           [1., 2., 3.]], dtype=float32)
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from .. import cube
from ..dtype import DType, bool_, i32
from ..errors import DTypeError
from ..ops.elementwise import TABLE
from ..ops.program import Program
from ..cube import ir
from ..cube.frontend import ArrayRef
from ..cube.kernel import launch_runtime
from ..cube.lang import Intrinsic
from .common import asarray, check_elements, check_size, cube_dtype, empty, grid, result_type
from .layout import broadcast_layout, element_strides, merged_operands, offset, view

UNITS = 256
MIN_ROW = 64  # a domain whose last dim is at least this long runs line by line (see elementwise_kernel)
# Positions per unit of an elementwise kernel, by target: on a GPU one position per unit of a large
# kernel launches so many cubes that it falls well short of the memory bandwidth (docs/fusion.md).
PER_UNIT = {"cuda": 4}
# Targets whose line-by-line kernel runs a whole line per cube of MIN_ROW units (see elementwise_kernel),
# when there are at least WALK_MIN_LINES lines (cubes enough for any core count; fewer, longer lines
# keep cubes of UNITS along the line, whose masked tail is then a small part of each line).
WALK_TARGETS, WALK_MIN_LINES = ("cpu",), 256
# Lines of WALK_MIN_ROW up to MIN_ROW positions (an attention head's 16 against (B, L, H, D)) walk too, in
# cubes of WALK_MIN_ROW units, where through the flat positions every element decoded its coordinates (a
# division per dim): one Zen 4 thread copied a (32, 4, 64, 16) head transpose in 0.89 ms flat, 0.08 walking.
WALK_MIN_ROW = 8
MAX_GRID = 65535  # cubes along a grid's y or z dimension (CUDA, WGSL)


# How an input is read: by flat position, its one element, its layout, or (line-by-line kernels
# only) one element per line, the same along the line (a (C, 1, 1) bias against (N, C, H*W)), or its
# line's elements in a row (UNIT: a (768,) LayerNorm weight against (N, L, 768), a (64, 64) mask
# against (B, H, 64, 64) scores): a vector load on the C target, where a runtime step is a gather.
DENSE, SCALAR, STRIDED, LINE, UNIT = 0, 1, 2, 3, 4


def read_modes(views: list, shape: tuple) -> tuple:
    return tuple(DENSE if v.flags.c_contiguous and v.shape == shape else SCALAR if v.size == 1 or not any(v.strides)
                 else STRIDED for v in views)


def _flat_modes(shape: tuple, arrays: list) -> tuple | None:
    """The read modes when every input is dense with `shape` (DENSE) or one value (SCALAR), else None."""
    modes = []
    for a in arrays:
        if a.size == 1:
            modes.append(SCALAR)
        elif a.shape == shape and a.flags.c_contiguous:
            modes.append(DENSE)
        else:
            return None
    return tuple(modes)


def line_modes(modes: tuple, views: list) -> tuple:
    """`modes` for a line-by-line kernel: a strided input that does not move along the last dim is LINE,
    one that moves by one element is UNIT."""
    return tuple(m if m != STRIDED else LINE if v.strides[-1] == 0 else UNIT if v.strides[-1] == v.itemsize else m
                 for m, v in zip(modes, views))


def uniform_loads(b: ir.Builder, arrays: list, modes: tuple, bases: dict | None = None) -> dict:
    """The inputs that are the same for every unit of a cube, loaded once before any branch (gcc will
    not vectorize a loop whose branch holds a load it cannot prove safe; a load per unit of a value
    that does not change would be a gather): the one-element inputs, and the LINE inputs at their
    line's offset (`bases`, from `_line`)."""
    return {j: b.load(arr, b.const(0, i32) if modes[j] == SCALAR else bases[j])
            for j, arr in enumerate(arrays) if modes[j] in (SCALAR, LINE)}


def program_values(b: ir.Builder, program: Program, arrays: list, index_of, scalars: dict) -> list:
    """Load every input (array `j` at `index_of(j)`) and compute every step; the values by id."""
    values = [scalars[j] if j in scalars else b.load(arr, index_of(j)) for j, arr in enumerate(arrays)]
    for name, params, args, dtype in program.steps:
        values.append(emit(b, name, [values[a] for a in args], dtype))
    return values


def input_params(b: ir.Builder, program: Program) -> list:
    return [b.array_param(f"in{j}", d) for j, d in enumerate(program.inputs)]


def line_reads(b: ir.Builder, layout, rank: int, modes: tuple, start) -> tuple:
    """For a line of the domain starting at flat position `start` and running along its last dim:
    each strided, LINE or UNIT input's offset at `start` and each strided one's step along the line
    (values the same for every unit of a cube, so the C target computes them once per cube, divisions
    included)."""
    bases, steps = {}, {}
    for j, mode in enumerate(modes):
        if mode in (STRIDED, LINE, UNIT):
            bases[j] = offset.__cube_inline__(b, [start, layout, rank, j], {})
        if mode == STRIDED:
            steps[j] = b.load(layout.array, b.const(rank * (j + 1) + rank - 1, i32))
    return bases, steps


def reader(b: ir.Builder, layout, rank: int, modes: tuple, position, line: tuple | None):
    """`index_of(j)`: where input `j` is read for flat `position`: the position itself when it is dense;
    on a line (`line = (along, bases, steps)` from `_line`) its base plus `along` steps; else through
    its layout."""
    def index_of(j: int):
        if modes[j] == DENSE:
            return position
        if line is not None:
            along, bases, steps = line
            return b.binary("add", bases[j], along if modes[j] == UNIT else b.binary("mul", along, steps[j]))
        return offset.__cube_inline__(b, [position, layout, rank, j], {})
    return index_of


def _guarded(b: ir.Builder, whole, positions: list, limit, body) -> None:
    """`body(p)` for each of `positions`: unguarded where `whole` (a condition the same for all units)
    holds, else each under `p < limit`: gcc vectorizes the unguarded copy (it gives up on long bodies
    under a per-unit guard), and only the last cube of a line pays for the checks. The unguarded copy
    sits in a uniform loop of one trip, so that the C target lifts the branch out of the unit loop
    (`targets/phases.py` lifts uniform branches around loops): left inside, gcc vectorized both copies
    with masked loads and stores, 6x slower on a (128, 768) LayerNorm's cubes along its lines."""
    zero, one = b.const(0, i32), b.const(1, i32)
    branch = b.branch(whole)
    with b.inside(branch.then), b.loop(zero, one, one):
        for p in positions:
            body(p)
    with b.inside(branch.orelse):
        for p in positions:
            tail = b.branch(b.binary("lt", p, limit))
            with b.inside(tail.then):
                body(p)


def elementwise_kernel(program: Program, rank: int, modes: tuple, rows: bool, per: int = 1,
                       walk: bool = False, tall: bool = False) -> ir.Kernel:
    """The IR of `program` over `rank`-dim layouts, each input read as `modes[j]` says (DENSE, SCALAR,
    STRIDED, LINE). With `rows`, cube (x, y) covers units x of line y of the domain's last dim, so strided
    inputs cost one multiply-add per element and LINE inputs one load per cube; otherwise cubes cover
    flat positions. Each unit computes `per` positions, CUBE_DIM apart (GPU targets: 4, so that a cube's
    index arithmetic is shared by more elements and the grid has 4x fewer cubes; the C target: 1).

    With `walk` (and `rows`; the C target), cube y runs all of line y, CUBE_DIM positions at a time, the
    last step shifted back inside the line (the host keeps lines at least CUBE_DIM long: MIN_ROW, or
    WALK_MIN_ROW for shorter lines): no unit is
    ever masked (gcc does not vectorize a masked tail, and a line shorter than a cube of 256 units was
    all tail: a (64, 32, 196) bias + relu ran 6x slower than memory allows), a few positions are
    computed twice (the outputs are new arrays, so no input changes under the second pass).

    With `tall` (and `rows`), line y + z * CUBE_COUNT_Y is cube (x, y, z)'s, and cubes past the last line
    do nothing: more lines than a grid dimension holds (CUDA and WGSL: 65535; the (batch * heads, L, S)
    matrices of attention have 98304 lines of 1024, which ran on flat positions at twice the bandwidth's
    time, decoding every element's coordinates)."""
    b = ir.Builder("fused")
    arrays = input_params(b, program)
    outs = [b.array_param(f"out{k}", program.dtype(v)) for k, v in enumerate(program.outputs)]
    layout = ArrayRef(b.array_param("layout", i32))
    n = b.scalar_param("n", i32)
    with contextlib.ExitStack() as guard:
        if rows:
            width = b.load(layout.array, b.const(rank - 1, i32))
            line = b.builtin("cube_pos" if walk else "cube_pos_y")
            if tall:
                line = b.binary("add", line, b.binary("mul", b.builtin("cube_pos_z"), b.builtin("cube_count_y")))
            start = b.binary("mul", line, width)
            if tall:  # the cubes past the last line: all that follows is inside this branch
                guard.enter_context(b.inside(b.branch(b.binary("lt", start, n)).then))
            bases, steps = line_reads(b, layout, rank, modes, start)
            scalars = uniform_loads(b, arrays, modes, bases)
        else:
            scalars = uniform_loads(b, arrays, modes)

        def body(position) -> None:
            i = b.binary("add", start, position) if rows else position
            index_of = reader(b, layout, rank, modes, i, (position, bases, steps) if rows else None)
            values = program_values(b, program, arrays, index_of, scalars)
            for out, v in zip(outs, program.outputs):
                b.store(out, i, values[v])

        if walk:
            units = b.builtin("cube_dim")
            with b.loop(b.const(0, i32), width, units) as step:
                body(b.binary("add", b.binary("min", step, b.binary("sub", width, units)), b.builtin("unit_pos")))
            return b.kernel
        one = b.const(1, i32)
        span = b.binary("mul", b.builtin("cube_dim"), b.const(per, i32))  # positions a cube covers
        cube_pos = b.builtin("cube_pos_x" if rows else "cube_pos")
        first = b.binary("add", b.binary("mul", cube_pos, span), b.builtin("unit_pos"))
        end = b.binary("mul", b.binary("add", cube_pos, one), span)
        positions = [first] + [b.binary("add", first, b.binary("mul", b.builtin("cube_dim"), b.const(k, i32)))
                               for k in range(1, per)]
        _guarded(b, b.binary("le", end, width if rows else n), positions, width if rows else n, body)
    return b.kernel




def emit(b: ir.Builder, name: str, args: list, out: DType) -> ir.Value:
    """IR computing step `name` (a row of the op table, `cast` or `where`) on kernel values `args` of
    one dtype (where's condition aside), giving a value of dtype `out`."""
    if name == "cast":
        return b.cast(args[0], out)
    if name == "where":
        return b.select(b.cast(args[0], bool_), args[1], args[2])
    kernel = TABLE[name].kernel
    if isinstance(kernel, Intrinsic):
        return b.unary(kernel.name, *args) if len(args) == 1 else b.binary(kernel.name, *args)
    return kernel.__cube_inline__(b, list(args), {})


COMPILED: dict = {}


def compiled_kernel(key: tuple, build, dim: cube.CubeDim, runtime):
    """Compile once per (program, layout rank, input modes, ..., runtime): later launches are a dict
    lookup. A kernel the runtime's target cannot express raises there (the fusion backend then runs
    the block op by op)."""
    key += (runtime,)
    compiled = COMPILED.get(key)
    if compiled is None:
        compiled = COMPILED[key] = runtime.compile_ir(build(), dim)
    return compiled


def run_elementwise(program: Program, shape: tuple, arrays: list, runtime=None, alike: bool = False) -> list:
    """Run `program` over the broadcast `shape` on input `arrays`; the output arrays.

    `runtime` is the cube runtime the kernel compiles for and runs on (`compile_ir` and `run`); None
    is the one a launch on `arrays` runs on (`launch_runtime`). The outputs are allocated beside the
    inputs (`common.empty`): on a device runtime they are its arrays. With `alike`, once one input is
    read through its layout every input of more than one value is (a dense one too): fewer compiled
    variants of the program (what a lone op, run for many operand layouts, wants). How to launch is
    worked out once per (program, shape, the inputs' shapes and strides, runtime) (`_Launch`): a lone
    op's launch costs its host time once, not at every call.
    """
    runtime = runtime or launch_runtime(*arrays)
    key = (program, shape, alike, runtime, *[(a.shape, a.strides) for a in arrays])
    launch = _LAUNCHES.get(key)
    if launch is None:
        if len(_LAUNCHES) >= MAX_LAUNCHES:
            _LAUNCHES.clear()
        launch = _LAUNCHES[key] = _Launch(program, shape, arrays, runtime, alike)
    outs = [empty(shape, dtype, *arrays) for dtype in launch.out_dtypes]
    if launch.compiled is None:  # nothing to compute
        return outs
    if launch.strides is None:
        views = [_flat(a, n) for a, n in zip(arrays, launch.sizes)]
    else:
        views = [view(a, launch.merged, st) for a, st in zip(arrays, launch.strides)]
    runtime.run(launch.compiled, launch.count, (*views, *(_flat(o, launch.size) for o in outs), launch.layout, launch.size))
    return outs


_LAUNCHES: dict = {}
MAX_LAUNCHES = 4096  # launch set-ups kept (a model's lone ops need a few hundred); past it, start over


class _Launch:
    """How `run_elementwise` launches a program on inputs of given shapes and strides: the compiled
    kernel, its cube count and layout argument, and how each input is viewed (flat: `sizes`; through
    its merged layout: `merged` and `strides`)."""

    __slots__ = ("out_dtypes", "size", "compiled", "count", "layout", "sizes", "merged", "strides")

    def __init__(self, program: Program, shape: tuple, arrays: list, runtime, alike: bool) -> None:
        self.out_dtypes = [program.dtype(v).np for v in program.outputs]
        self.size = size = math.prod(shape)
        self.compiled = self.strides = None
        if size == 0:
            return
        modes = _flat_modes(shape, arrays)
        if modes is not None:  # every input dense or one value: read flat (the common case, and cheaper)
            merged, self.sizes = (size,), [1 if m == SCALAR else size for m in modes]
            views = [_flat(a, n) for a, n in zip(arrays, self.sizes)]
            self.layout = np.asarray([size] + [int(m == DENSE) for m in modes], np.int32)
        else:
            merged, views = merged_operands(shape, *arrays)
            self.strides = [element_strides(v) for v in views]
            modes = read_modes(views, merged)
            if alike and STRIDED in modes:
                modes = tuple(SCALAR if m == SCALAR else STRIDED for m in modes)
            self.layout = broadcast_layout(merged, *views)
        self.merged = merged
        rank = max(len(merged), 1)
        target = runtime.target
        lines = size // merged[-1]
        walk = (rank > 1 and STRIDED in modes and merged[-1] >= WALK_MIN_ROW and target in WALK_TARGETS
                and lines >= WALK_MIN_LINES)
        rows = walk or rank > 1 and STRIDED in modes and merged[-1] >= MIN_ROW
        # line by line takes a cube row per line: more lines than a grid dimension holds (CUDA, WGSL:
        # 65535) fold into a third dimension (`tall`)
        tall = rows and not walk and lines > MAX_GRID
        modes = line_modes(modes, views) if rows else modes
        per = PER_UNIT.get(target, 1)
        dim = cube.CubeDim((MIN_ROW if merged[-1] >= MIN_ROW else WALK_MIN_ROW) if walk else UNITS)  # <= the line
        self.compiled = compiled_kernel(("ew", program, rank, modes, rows, per, walk, tall, dim.x),
                                        lambda: elementwise_kernel(program, rank, modes, rows, per, walk, tall),
                                        dim, runtime)
        if walk:
            self.count = cube.CubeCount(lines)
        elif rows:
            z = -(-lines // MAX_GRID)
            self.count = cube.CubeCount(-(-merged[-1] // (UNITS * per)), -(-lines // z), z)
        else:
            self.count, _ = grid(-(-size // per), UNITS)


def _flat(a, n: int):
    """`a` as a 1-D array of `n` elements: itself when it is one already (a device array's reshape costs
    microseconds of host time, a lone op's launch a few more)."""
    return a if a.ndim == 1 and a.shape[0] == n else a.reshape(n)


def sources(kind: str, of) -> list[str]:
    """The sources (C, WGSL, CUDA C) compiled so far for `of` (a `Program`: kind "ew"), one per layout
    variant and runtime."""
    return [c.source for key, c in COMPILED.items() if key[0] == kind and key[1] == of]



# ---- the library's host functions: one-step programs ------------------------------------------------

def _run(name: str, arrays: list, steps: tuple, shape: tuple) -> np.ndarray:
    check_size(name, *arrays)
    check_elements(name, shape)
    program = Program(tuple(cube_dtype(a.dtype) for a in arrays), steps, (len(arrays) + len(steps) - 1,))
    (out,) = run_elementwise(program, shape, arrays, alike=True)
    return out


def _casts(arrays: list, t: DType, first: int = 0) -> tuple[tuple, list]:
    """Steps converting each of `arrays[first:]` to `t` where it is not, and the ids of the values."""
    steps, ids = [], []
    for j in range(first, len(arrays)):
        if cube_dtype(arrays[j].dtype) is t:
            ids.append(j)
        else:
            ids.append(len(arrays) + len(steps))
            steps.append(("cast", (t,), (j,), t))
    return tuple(steps), ids


UNARY_OPS = tuple(name for name, row in TABLE.items() if row.arity == 1)
BINARY_OPS = tuple(name for name, row in TABLE.items() if row.arity == 2)


def _row(name: str, arity: int):
    row = TABLE.get(name)
    if row is None or row.arity != arity:
        known = ", ".join(n for n, r in TABLE.items() if r.arity == arity)
        raise ValueError(f"unknown {'unary' if arity == 1 else 'binary'} op {name!r}; known: {known}")
    return row


def unary(op: str, x: np.ndarray) -> np.ndarray:
    """`op(x)` elementwise, `op` a unary row of the op table; `x` may have any strides. Float-only ops
    refuse ints (cast first).

    Example:
        >>> unary("exp", np.zeros(3, np.float32))
        array([1., 1., 1.], dtype=float32)
    """
    row = _row(op, 1)
    x = asarray(x)
    t = cube_dtype(x.dtype)
    if row.float_only and not t.is_float:
        raise DTypeError(f"{op} needs a float input, got {t.name}")
    return _run(op, [x], ((op, (), (0,), bool_ if row.bool_out else t),), x.shape)


def binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`op(a, b)` with NumPy broadcasting, computed in the operands' common dtype.

    Example:
        >>> binary("lt", np.arange(3), np.array([1]))
        array([ True, False, False])
    """
    row = _row(op, 2)
    arrays = [asarray(a), asarray(b)]
    t = cube_dtype(result_type(*arrays))
    if not row.computes(t):
        raise DTypeError(f"{op}: the kernel does not compute {t.name} inputs")
    steps, ids = _casts(arrays, t)
    step = (op, (), tuple(ids), bool_ if row.bool_out else t)
    return _run(op, arrays, steps + (step,), np.broadcast_shapes(*(x.shape for x in arrays)))


def ternary(op: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """`where(a, b, c)` (a is the condition) or `clamp(a, b, c)` (NaN propagates), with broadcasting.

    Example:
        >>> ternary("where", np.array([True, False]), np.ones(2), np.zeros(2))
        array([1., 0.])
    """
    if op not in ("where", "clamp"):
        raise ValueError(f"unknown ternary op {op!r}; known: where, clamp")
    arrays = [asarray(a), asarray(b), asarray(c)]
    t = cube_dtype(result_type(*arrays[1:]) if op == "where" else result_type(*arrays))
    shape = np.broadcast_shapes(*(x.shape for x in arrays))
    if op == "where":
        steps, (yes, no) = _casts(arrays, t, 1)
        return _run(op, arrays, steps + (("where", (), (0, yes, no), t),), shape)
    steps, (x, lo, hi) = _casts(arrays, t)
    k = len(arrays) + len(steps)
    return _run(op, arrays, steps + (("maximum", (), (x, lo), t), ("minimum", (), (k, hi), t)), shape)


def cast(x: np.ndarray, dtype) -> np.ndarray:
    """`x` converted to `dtype` (floats to ints truncate toward zero; to bool is `!= 0`), a new
    C-contiguous array; `x` may have any strides.

    Example:
        >>> cast(np.arange(3).reshape(3, 1).T, np.float32)
        array([[0., 1., 2.]], dtype=float32)
    """
    x = asarray(x)
    t = cube_dtype(dtype)
    return _run("cast", [x], (("cast", (t,), (0,), t),), x.shape)
