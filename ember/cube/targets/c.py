"""The C target: render a kernel as one C function that runs every cube of a launch.

How the launch model maps onto a CPU:

- **Cubes** are the iterations of an OpenMP `parallel for`; each core takes a share of the cubes.
- **Units** of a cube run as an inner loop `for (u = 0; u < NU; ++u)` marked `omp simd`, so gcc
  vectorizes across units (unit u in lane u); a cube of one unit has no `omp simd`, so gcc vectorizes
  the uniform loop around it instead (a reduction, `mad8` dot products). The cube shape is baked in (`NU`, `DX`, `DY`, `DZ`
  constants), which makes each CubeDim its own compiled kernel.
- **Phases** (`phases.py`). The body is cut into phases at barriers (`sync_units`). Each phase is its own unit loop,
  so every unit finishes phase k before any starts phase k+1: that *is* the barrier. Loops and
  branches whose bounds and conditions are uniform (the same for every unit of the cube) are lifted
  out of the unit loops ("cube level"), with the unit loops inside them; this lets a barrier sit inside
  a uniform loop (tiled matmul), and keeps the unit loop innermost so it vectorizes. A value or
  variable used in more than one phase lives in a per-unit array `name[NU]`.
- **Restriction:** a barrier must not be under divergent control flow (a branch on a varying value, or
  a loop with varying bounds); rendering raises PhaseError. This is also undefined behaviour on GPUs.
- **Shared memory** is a local array of the cube (its size is comptime).
- **Planes** have one unit on this target (PLANE_DIM == 1), so plane reductions are the identity.
- **f16/bf16** are computed in `float`: converted on load, rounded on store and on casts.
- A `return` clears the unit's `alive` flag; later phases skip units that returned.
- A table look-up (`lut16`) that `phases.py` cut out runs between the phases as gcc vector shuffles of the
  units' indices (`vpermps` on AVX-512: the table is one register), where a load inside the unit loop
  would be a gather; under divergent control flow it stays a load.

Example:
    >>> source = render(kernel_ir, CubeDim(256))
    >>> "void ember_kernel(const int64_t *launch, void **args)" in source
    True
"""

from __future__ import annotations

from ...dtype import bool_, bf16, f16
from .. import ir
from ..ir import Instr
from ..lang import CubeDim
from .clike import CFamily, bf16_helpers
from .phases import LUT, Phase, PhaseError, Schedule
from .walker import Walker, builtin_table

ENTRY = "ember_kernel"
PARALLEL_MIN = 32768
"""Elements in a launch's largest array below which its cubes run on the calling thread: the initial value
of each library's `ember_parallel_min`, which the CPU runtime sets for the machine (`runtime/cpu.py`)."""
VERSION = "c-17"  # bump when the rendering changes, so cached binaries are rebuilt

PRELUDE = r"""#include <stdint.h>
#include <string.h>
#ifdef EMBER_VECTOR_MATH  /* declare glibc's SIMD math (libmvec), see runtime/cpu.py */
#define __FAST_MATH__ 1
#include <math.h>
#undef __FAST_MATH__
#else
#include <math.h>
#endif
static inline float ember_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t ember_as_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
""" + bf16_helpers("static inline", "ember_as_float(u)", "ember_as_bits(f)") + r"""static inline int64_t ember_max64(int64_t a, int64_t b) { return a > b ? a : b; }
typedef _Float16 ember_f16;
static inline float ember_f16_load(ember_f16 h) { return (float)h; }
static inline ember_f16 ember_f16_store(float f) { return (ember_f16)f; }
static inline float ember_f16_round(float f) { return (float)(ember_f16)f; }
/* exp with -inf (a masked score) given to libmvec as +0 and its result masked back to +0: a vector holding
   -inf takes libmvec's path for special inputs, a scalar call per lane (a causal softmax's exp ran 6x
   slower). The mask is applied to the bits, which gcc does not fold away as it folds a select. */
static inline float ember_expf(float x) {
  uint32_t keep; memcpy(&keep, &x, 4); keep = keep == 0xff800000u ? 0u : 0xffffffffu;
  return ember_as_float(ember_as_bits(expf(ember_as_float(ember_as_bits(x) & keep))) & keep);
}
static inline double ember_exp(double x) {
  uint64_t bits, keep; memcpy(&bits, &x, 8); keep = bits == 0xfff0000000000000ull ? 0ull : ~0ull;
  bits &= keep; double y; memcpy(&y, &bits, 8); y = exp(y);
  memcpy(&bits, &y, 8); bits &= keep; memcpy(&y, &bits, 8); return y;
}
"""


class CTargetError(PhaseError):
    """A kernel this target cannot run (atomics on 16-bit types; barriers it cannot phase)."""


# ----------------------------------------------------------------------------------------------
# Emission

class Renderer(CFamily, Walker):
    MATH = dict(CFamily.MATH, exp="ember_exp")  # `ember_expf` / `ember_exp` of the prelude

    def __init__(self, kernel: ir.Kernel, dim: CubeDim) -> None:
        super().__init__(kernel, dim)
        self.sched = Schedule(kernel)
        self.current = None  # the phase being rendered; None at cube level
        self.vectors: dict = {}
        self.has_return = any(isinstance(s, Instr) and s.op == "return" for s in ir.walk(kernel.body))
        # Constants, launch coordinates and lengths are recomputed wherever they are used rather
        # than carried across phases in per-unit arrays.
        self.remat = {s.result: self.expr(s, []) for s in ir.walk(kernel.body)
                      if isinstance(s, Instr) and s.op in ("const", "builtin", "len")}
        # Uniform work (the same for every unit) is done once per cube, outside the unit loops.
        for phase in self.sched.phases:
            for s in list(phase.stmts):
                if isinstance(s, Instr) and s.result is not None and s.result not in self.remat:
                    self.sched.hoist((s.result,))
        self.chain: dict = {}  # cheap varying values recomputed in each phase that uses them
        self.lut_indices = {s.args[0] for s in self.sched.luts}  # read whole by a shuffle: kept in arrays
        self._find_crossings()

    def _find_crossings(self) -> None:
        """Values used in more than one phase are computed once per cube when they are uniform,
        recomputed when they are a short pure chain over cube-level values and launch coordinates,
        and kept in per-unit arrays otherwise; so are locals used in more than one phase."""
        while True:
            self._scan_crossings()
            changed = False
            for v in sorted(self.crossing, key=lambda v: v.id):
                if self.sched.hoist((v,)) or self._chain(v, 3):
                    changed = True
            if not changed:
                return

    def _chain(self, v: ir.Value, depth: int) -> bool:
        if v in self.chain or v in self.remat or self.sched.site.get(v) == "cube":
            return True
        if v in self.lut_indices:
            return False
        instr = self._def(v)
        if depth == 0 or instr is None or not ir.is_pure(instr) or instr.op == "read":
            return False
        if not all(self._chain(a, depth - 1) for a in instr.args):
            return False
        self.chain[v] = instr
        return True

    def _def(self, v: ir.Value):
        site = self.sched.site.get(v)
        if isinstance(site, Phase):
            return next((s for s in site.stmts if isinstance(s, Instr) and s.result is v), None)
        return None

    def _scan_crossings(self) -> None:
        self.crossing: set = set()
        self.phase_chains: dict = {}
        local_phases: dict = {}

        def visit(block, phase):
            for s in ir.walk(block):
                for v in ir.operands(s):
                    site = self.sched.site.get(v)
                    if isinstance(site, Phase) and site is not phase and v not in self.remat:
                        if v in self.chain:
                            self.phase_chains.setdefault(phase.index, set()).add(v)
                        else:
                            self.crossing.add(v)
                if isinstance(s, Instr) and isinstance(s.attr, ir.Local):
                    local_phases.setdefault(s.attr, set()).add(phase.index)

        for phase in self.sched.phases:
            visit(phase.stmts, phase)
            for instr in phase.hoisted:
                for v in instr.args:  # cube-level code only reads cube-level values
                    assert self.sched.site.get(v) == "cube"
        for instr in self.sched.luts:  # a look-up's result fills a per-unit array, from one of indices
            self.crossing.add(instr.result)
            if isinstance(self.sched.site.get(instr.args[0]), Phase) and instr.args[0] not in self.remat:
                self.crossing.add(instr.args[0])
        self.array_locals = {var for var, ps in local_phases.items() if len(ps) > 1}

        def visit_tree(nodes):
            for node in nodes:
                if isinstance(node, tuple) and node[0] != "lut":
                    for v in ir.operands(node[1]):
                        assert self.sched.site.get(v) == "cube"
                    for children in node[2:]:
                        visit_tree(children)
        visit_tree(self.sched.tree)

    # -- names ----------------------------------------------------------------------------------
    def ref(self, v: ir.Value, phase) -> str:
        site = self.sched.site.get(v)
        if v in self.remat and site is not phase and site != "cube":
            return self.remat[v]
        if v in self.crossing and site is not phase:
            return f"v{v.id}_u[u]"
        return f"v{v.id}"

    def value(self, v: ir.Value) -> str:
        return self.ref(v, self.current)

    def local_name(self, var: ir.Local) -> str:
        name = f"l{id(var) % 100000}_{var.name}"
        return f"{name}[u]" if var in self.array_locals else name

    def ctype(self, t: ir.Type) -> str:
        if t.lanes > 1:
            scalar = self.COMPUTE[t.dtype.name] if t.dtype is not bool_ else "uint8_t"
            size = {"double": 8, "float": 4}.get(scalar) or t.dtype.itemsize
            self.vectors[self.compute_type(t)] = (f"typedef {scalar} {self.compute_type(t)} "
                                                  f"__attribute__((vector_size({size * t.lanes})));")
        return self.compute_type(t)

    # -- top ------------------------------------------------------------------------------------
    def render(self) -> str:
        d = self.dim
        body_start = len(self.lines)
        self.emit(f"void {ENTRY}(const int64_t *launch, void **args) {{", 0)
        self.emit("const int32_t cx = (int32_t)launch[0], cy = (int32_t)launch[1], cz = (int32_t)launch[2];", 1)
        n_arrays = 0
        for i, p in enumerate(self.k.params):
            if isinstance(p, ir.Array):
                self.emit(f"{self.storage_type(p.dtype)} *a_{p.name} = ({self.storage_type(p.dtype)} *)args[{i}];", 1)
                self.emit(f"const int32_t len_{p.name} = (int32_t)launch[{3 + n_arrays}];", 1)
                n_arrays += 1
            else:
                t = self.ctype(p.value.type)
                self.emit(f"const {t} v{p.value.id} = *(const {t} *)args[{i}];", 1)
        self.emit("const int64_t ncubes = (int64_t)cx * cy * cz;", 1)
        # Threads only pay off on enough data: waking them costs microseconds (on a virtual machine, ~100
        # once they sleep), so a launch whose largest array is under `ember_parallel_min` elements
        # (set by the runtime from the measured cost) runs its cubes on the calling thread.
        sizes = [f"launch[{3 + k}]" for k in range(n_arrays)]
        largest = "0" if not sizes else sizes[0] if len(sizes) == 1 else \
            "ember_max64(" + ", ember_max64(".join(sizes[:-1]) + ", " + sizes[-1] + ")" * (len(sizes) - 1)
        self.emit(f"const int64_t largest = {largest};", 1)
        self.emit("#pragma omp parallel for schedule(static) if(ncubes > 1 && largest >= ember_parallel_min)", 1)
        self.emit("for (int64_t cube_l = 0; cube_l < ncubes; ++cube_l) {", 1)
        self.emit("const int32_t cube = (int32_t)cube_l;", 2)
        for arr in self.sched.shared:
            self.emit(f"{self.COMPUTE[arr.dtype.name]} s_{arr.name}[{arr.size}];", 2)
        for v in sorted(self.crossing, key=lambda v: v.id):
            self.emit(f"{self.ctype(v.type)} v{v.id}_u[NU];", 2)
        for var in self.array_locals:
            self.emit(f"{self.ctype(var.type)} {self.local_name(var)[:-3]}[NU];", 2)
        if self.has_return:
            self.emit("uint8_t alive[NU]; memset(alive, 1, sizeof alive);", 2)
        self.tree(self.sched.tree, 2)
        self.emit("}", 1)
        self.emit("}", 0)
        body = self.lines[body_start:]
        head = [PRELUDE, f"#define NU {d.total}", f"#define DX {d.x}", f"#define DY {d.y}",
                f"#define DZ {d.z}", f"int64_t ember_parallel_min = {PARALLEL_MIN};", *self.vectors.values(), ""]
        return "\n".join(head + body) + "\n"

    def tree(self, nodes: list, depth: int) -> None:
        for node in nodes:
            if isinstance(node, Phase):
                self.phase(node, depth)
            elif node[0] == "lut":
                self.lut(node[1], depth)
            elif node[0] == "for":
                self.emit(self.for_header(node[1]), depth)
                self.tree(node[2], depth + 1)
                self.emit("}", depth)
            else:
                self.emit(f"if ({self.value(node[1].cond)}) {{", depth)
                self.tree(node[2], depth + 1)
                self.emit("} else {", depth)
                self.tree(node[3], depth + 1)
                self.emit("}", depth)

    def phase(self, phase: Phase, depth: int) -> None:
        for instr in phase.hoisted:
            self.instr(instr, depth)
        if not phase.stmts:
            return
        self.current = phase
        special = any(isinstance(s, Instr) and (s.op in ir.ATOMIC or s.op == "return")
                      for s in ir.walk(phase.stmts))
        if not special and self.dim.total > 1:  # one unit: the loop it sits in vectorizes instead
            self.emit("#pragma omp simd", depth)
        self.emit("for (int32_t u = 0; u < NU; ++u) {", depth)
        if self.has_return:
            self.emit("if (!alive[u]) continue;", depth + 1)
        for instr in self._chains_for(phase):
            self.emit(f"const {self.ctype(instr.result.type)} v{instr.result.id} = "
                      f"{self.expr(instr, [self.ref(a, phase) for a in instr.args])};", depth + 1)
        self.block(phase.stmts, depth + 1)
        if any(isinstance(s, Instr) and s.op == "return" for s in ir.walk(phase.stmts)):
            self.emit(f"end_{phase.index}: ;", depth + 1)
        self.emit("}", depth)
        self.current = None

    def lut(self, s: Instr, depth: int) -> None:
        """A cut look-up: every unit's `table[index]` into the result's per-unit array, 16 units a gcc
        vector shuffle where the indices are in an array (a loop of loads under another compiler)."""
        index, arr, out = s.args[0], s.attr, f"v{s.result.id}_u"
        table = f"a_{arr.name}" if arr.kind != "shared" else f"s_{arr.name}"
        element = lambda i: self.from_storage(f"{table}[{i}]", arr.dtype) if arr.kind != "shared" else f"{table}[{i}]"
        loads = f"for (int32_t u = 0; u < NU; ++u) {out}[u] = {element(self.ref(index, None))};"
        if index not in self.crossing or self.dim.total % 16:
            self.emit(loads, depth)
            return
        vt, it = self.ctype(ir.Type(arr.dtype, 16)), self.ctype(ir.Type(ir.i32, 16))
        self.emit("#if defined(__GNUC__) && !defined(__clang__)", 0)
        self.emit(f"{{ {vt} tab; memcpy(&tab, {table}, 64);", depth)
        self.emit(f"for (int32_t u = 0; u < NU; u += 16) {{ {it} i; memcpy(&i, &v{index.id}_u[u], 64); "
                  f"{vt} r = __builtin_shuffle(tab, i); memcpy(&{out}[u], &r, 64); }} }}", depth)
        self.emit("#else", 0)
        self.emit(loads, depth)
        self.emit("#endif", 0)

    def _chains_for(self, phase: Phase) -> list:
        """The chain instructions (with their chain operands) this phase recomputes, in order."""
        todo, found = list(self.phase_chains.get(phase.index, ())), {}
        while todo:
            v = todo.pop()
            if v in self.chain and v not in found:
                found[v] = self.chain[v]
                todo.extend(found[v].args)
        return [found[v] for v in sorted(found, key=lambda v: v.id)]

    # -- instructions ---------------------------------------------------------------------------
    def leave(self) -> str:
        return f"{{ {'alive[u] = 0; ' if self.has_return else ''}goto end_{self.current.index}; }}"

    def declare(self, var: ir.Local, depth: int) -> None:
        self.emit(f"{'' if var in self.array_locals else self.ctype(var.type) + ' '}"
                  f"{self.local_name(var)} = {self.zero(var.type)};", depth)

    def define(self, s: Instr, a: list, depth: int) -> None:
        self.emit(f"const {self.ctype(s.result.type)} v{s.result.id} = {self.expr(s, a)};", depth)
        if s.result in self.crossing:
            self.emit(f"v{s.result.id}_u[u] = v{s.result.id};", depth)

    def mad8(self, a: list) -> str:
        """C's signed add, so that gcc matches its dot-product pattern (VNNI `vpdpbusd` for u8 x i8 sums in a
        loop it vectorizes); gcc's vector and scalar code wrap at 32 bits, as the op does (an i32 sum of
        8-bit products leaves range only past 2^16 of them)."""
        return f"({a[0]} + (int32_t){a[1]} * (int32_t){a[2]})"

    def zero(self, t: ir.Type) -> str:
        return "0" if t.lanes == 1 else f"({self.ctype(t)}){{0}}"

    def builtin(self, name: str) -> str:
        return _builtin(name, self.dim)

    def plane(self, s: Instr, x: str) -> str:
        return x  # a plane is one unit on this target

    def compute(self, s: Instr, a: list) -> str:
        op, t = s.op, s.result.type
        if op == "extract":
            return f"{a[0]}[{s.attr}]"
        if op == "pack":
            return f"({self.ctype(t)}){{{', '.join(a)}}}"
        if t.lanes == 1 and all(v.type.lanes == 1 for v in s.args):
            return self.lane(s, a)
        # Vector op: lane by lane (gcc turns the fixed-count loop into vector instructions).
        return f"({{ {self.ctype(t)} r; for (int l = 0; l < {t.lanes}; ++l) r[l] = {self.lane(s, a, '[l]')}; r; }})"

    def load(self, s: Instr, a: list) -> str:
        arr, t = s.attr, s.result.type
        if arr.kind == "shared":
            src = lambda i: f"s_{arr.name}[{i}]"
        else:
            src = lambda i: self.from_storage(f"a_{arr.name}[{i}]", arr.dtype)
        if t.lanes == 1:
            return src(a[0])
        return f"({{ {self.ctype(t)} r; for (int l = 0; l < {t.lanes}; ++l) r[l] = {src(a[0] + ' + l')}; r; }})"

    def store(self, s: Instr, a: list, depth: int) -> None:
        arr, value = s.attr, s.args[1]
        if arr.kind == "shared":
            dst, conv = f"s_{arr.name}", lambda x: x
        else:
            dst, conv = f"a_{arr.name}", lambda x: self.to_storage(x, arr.dtype)
        if value.type.lanes == 1:
            self.emit(f"{dst}[{a[0]}] = {conv(a[1])};", depth)
        else:
            self.emit(f"for (int l = 0; l < {value.type.lanes}; ++l) {dst}[{a[0]} + l] = {conv(a[1] + '[l]')};",
                      depth)

    def atomic(self, s: Instr, a: list, depth: int) -> None:
        arr = s.attr
        if arr.dtype in (f16, bf16, bool_):
            raise CTargetError(f"line {s.line}: atomics on {arr.dtype.name} are not supported on the C target")
        dst = f"{'s' if arr.kind == 'shared' else 'a'}_{arr.name}[{a[0]}]"
        t = self.ctype(s.result.type)
        v = f"v{s.result.id}"
        self.emit(f"{t} {v};", depth)
        if s.op == "atomic_add":
            self.emit("#pragma omp atomic capture", depth)
            self.emit(f"{{ {v} = {dst}; {dst} += {a[1]}; }}", depth)
        else:
            better = "<" if s.op == "atomic_min" else ">"
            self.emit("#pragma omp critical(ember_atomic)", depth)
            self.emit(f"{{ {v} = {dst}; if ({a[1]} {better} {v}) {dst} = {a[1]}; }}", depth)
        if s.result in self.crossing:
            self.emit(f"v{s.result.id}_u[u] = {v};", depth)


def _builtin(name: str, dim: CubeDim) -> str:
    cube_x, cube_y, cube_z = "(cube % cx)", "((cube / cx) % cy)", "(cube / (cx * cy))"
    # Plain `u` where the cube is one-dimensional keeps addresses affine in u for the vectorizer.
    unit_x = "u" if dim.x == dim.total else "(u % DX)"
    unit_y = "0" if dim.y == 1 else "((u / DX) % DY)"
    unit_z = "0" if dim.z == 1 else "(u / (DX * DY))"
    return builtin_table((unit_x, unit_y, unit_z), (cube_x, cube_y, cube_z), ("cx", "cy", "cz"),
                         ("u", "cube", "(cx * cy * cz)"), ("1", "0"))[name]


def render(kernel: ir.Kernel, dim: CubeDim) -> str:
    """C source for `kernel` launched with cube shape `dim`; the entry point is `ember_kernel`."""
    for s in ir.walk(kernel.body):
        if isinstance(s, ir.Instr) and (s.op in ir.MATRIX or s.op in ir.COPY):
            raise CTargetError(f"kernel {kernel.name}: line {s.line}: {s.op} (matrix fragments and asynchronous "
                               f"copies) has no C rendering; it runs on the CUDA target")
    return Renderer(kernel, dim).render()
