"""The CUDA C target: render a kernel as one `extern "C" __global__` function, compiled by NVRTC.

A cube is a thread block, a unit a thread, a plane a warp, a plane group a warpgroup (`group_mma` is
`wgmma.mma_async`, sm_90a only); shared memory is one dynamic `extern __shared__` buffer; f16/bf16 are
16-bit words computed in `float`, converted by code written here (NVRTC needs no header). Math maps
onto CUDA's accurate functions; `fast_math=True` swaps in the hardware approximations for f32. The
whole mapping is in docs/cube.md, "The CUDA target".

Example:
    >>> source = render(kernel_ir, CubeDim(256))
    >>> 'extern "C" __global__ void __launch_bounds__(256) ember_axpy(' in source
    True
"""

from __future__ import annotations

import math

from ...dtype import bf16, bool_, f16, f32
from .. import ir
from ..ir import Instr
from ..lang import CubeDim
from .clike import CFamily, bf16_helpers
from .walker import Walker, builtin_table, identifier

PLANE_DIM = 32

PRELUDE = r"""typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
static __device__ __forceinline__ float ember_f16_load(uint16_t h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
static __device__ __forceinline__ uint16_t ember_f16_store(float f) {
  uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
static __device__ __forceinline__ float ember_f16_round(float f) { return ember_f16_load(ember_f16_store(f)); }
""" + bf16_helpers("static __device__ __forceinline__", "__uint_as_float(u)", "__float_as_uint(f)") + r"""/* Shuffles move 32- or 64-bit registers: narrower values (bool, 8/16-bit ints) travel as int. */
template <typename T> static __device__ __forceinline__ T ember_shfl_xor(unsigned m, T v, int o) {
  if constexpr (sizeof(T) < 4) return (T)__shfl_xor_sync(m, (int)v, o); else return __shfl_xor_sync(m, v, o); }
template <typename T> static __device__ __forceinline__ T ember_shfl(unsigned m, T v, int src) {
  if constexpr (sizeof(T) < 4) return (T)__shfl_sync(m, (int)v, src); else return __shfl_sync(m, v, src); }
/* A plane (warp) reduction whose result every active lane receives, in the same lane order. */
template <typename T, typename Op> static __device__ __forceinline__ T ember_plane(T v, Op op) {
  const unsigned mask = __activemask();
  if (mask == 0xffffffffu) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, ember_shfl_xor(mask, v, o));
    return v;
  }
  T r = v; bool first = true;
  for (int src = 0; src < 32; ++src)
    if ((mask >> src) & 1u) { T x = ember_shfl(mask, v, src); r = first ? x : op(r, x); first = false; }
  return r;
}
"""

# Added to the prelude only for kernels with float atomic max/min.
_CAS = r"""static __device__ __forceinline__ float ember_atomic_cas(float *p, float cmp, float v) {
  return __uint_as_float(atomicCAS((unsigned *)p, __float_as_uint(cmp), __float_as_uint(v))); }
static __device__ __forceinline__ double ember_atomic_cas(double *p, double cmp, double v) {
  return __longlong_as_double((long long)atomicCAS((unsigned long long *)p,
      (unsigned long long)__double_as_longlong(cmp), (unsigned long long)__double_as_longlong(v))); }
static __device__ __forceinline__ bool ember_same_bits(float a, float b) { return __float_as_uint(a) == __float_as_uint(b); }
static __device__ __forceinline__ bool ember_same_bits(double a, double b) {
  return __double_as_longlong(a) == __double_as_longlong(b); }
/* Float max/min: compare-and-swap until our value lost or landed (NaN never lands, as on the C target). */
template <typename T> static __device__ __forceinline__ T ember_atomic_max_float(T *p, T v) {
  T old = *p;
  while (v > old) {
    T seen = ember_atomic_cas(p, old, v);
    if (ember_same_bits(seen, old)) break;
    old = seen;
  }
  return old;
}
template <typename T> static __device__ __forceinline__ T ember_atomic_min_float(T *p, T v) {
  T old = *p;
  while (v < old) {
    T seen = ember_atomic_cas(p, old, v);
    if (ember_same_bits(seen, old)) break;
    old = seen;
  }
  return old;
}
"""


# Added to the prelude only for kernels with plane-group products: a wgmma shared-memory descriptor
# (start address, leading and stride byte offsets, all in 16-byte units; 128-byte swizzle).
_GROUP = r"""static __device__ __forceinline__ uint64_t ember_group_desc(const void *p, uint32_t lead, uint32_t stride) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)((lead >> 4) & 0x3FFF) << 16)
       | ((uint64_t)((stride >> 4) & 0x3FFF) << 32) | (1ull << 62); }
"""


class CudaTargetError(ValueError):
    """A kernel this target cannot render (atomics on 8/16-bit types, plane ops on vectors)."""


_STORAGE = dict(CFamily.STORAGE, f16="uint16_t")
_COMPUTE = dict(_STORAGE, f16="float", bf16="float", bool="bool")
# Scalar kernel parameters as the runtime packs them: f16/bf16 travel as f32, bool as one byte.
PARAM = dict(_COMPUTE, bool="uint8_t")
# Hardware approximations for f32 (a few ulp; special values differ), only under fast_math.
_FAST = {"exp": "__expf", "log": "__logf", "log2": "__log2f", "log10": "__log10f", "sin": "__sinf",
         "cos": "__cosf", "tan": "__tanf", "pow": "__powf"}
_PLANE_OP = {"plane_sum": "a + b", "plane_prod": "a * b", "plane_max": "a > b ? a : b",
             "plane_min": "a < b ? a : b"}
_ATOMIC_TYPES = ("f32", "f64", "i32", "u32", "i64", "u64")  # what CUDA's atomics (or a CAS loop) cover
_ATOMIC_FN = {"atomic_add": "atomicAdd", "atomic_max": "atomicMax", "atomic_min": "atomicMin"}
_INT64_ATOMIC = {"i64": "long long", "u64": "unsigned long long"}


def entry_name(kernel: ir.Kernel) -> str:
    """The name of the `__global__` function: `ember_` + the kernel's name (what profilers show)."""
    return "ember_" + identifier(kernel.name)


def uses_group_mma(kernel: ir.Kernel) -> bool:
    """Whether `kernel` has plane-group products (wgmma: compiled for sm_90a, run on sm_90 only)."""
    return any(isinstance(s, Instr) and s.op == "group_mma" for s in ir.walk(kernel.body))


def _group_operands(kernel: ir.Kernel) -> set:
    return {arr for s in ir.walk(kernel.body) if isinstance(s, Instr) and s.op == "group_mma" for arr in s.attr[1:3]}


def shared_layout(kernel: ir.Kernel) -> tuple[dict, int]:
    """(byte offset of each shared Array, total bytes) in the cube's dynamic shared memory."""
    offsets, total = {}, 0
    packed = packed_shared(kernel)
    swizzled = _group_operands(kernel)
    for s in ir.walk(kernel.body):
        if isinstance(s, Instr) and s.op == "shared":
            arr = s.attr
            size = arr.dtype.itemsize if arr in packed else 1 if arr.dtype is bool_ else _compute_size(arr.dtype)
            # wgmma's swizzle works on address bits: its operands start on a 1024-byte block; fragment
            # loads want 32 bytes; vector accesses 16
            align = ir.SWIZZLE_BLOCK_BYTES if arr in swizzled else 32 if arr in packed else 16
            total = -(-total // align) * align
            offsets[arr] = total
            total += size * arr.size
    return offsets, total


def packed_shared(kernel: ir.Kernel) -> set:
    """Shared arrays that fragment loads/stores or asynchronous copies touch: these hold their elements
    in the storage type (16-bit words for f16/bf16), as the tensor cores and the copy engine see them."""
    out = set()
    for s in ir.walk(kernel.body):
        if isinstance(s, Instr) and s.op in ("matrix_load", "matrix_store", "copy_async", "group_mma", "group_store"):
            arrays = s.attr[1:3] if s.op == "group_mma" else (s.attr[1] if s.op == "matrix_load" else s.attr[0],)
            out.update(arr for arr in arrays if arr.kind == "shared")
    return out


def shared_bytes(kernel: ir.Kernel) -> int:
    """Bytes of dynamic shared memory a launch of `kernel` needs."""
    return shared_layout(kernel)[1]


def _compute_size(dtype) -> int:
    return 4 if dtype in (f16, bf16) else dtype.itemsize


class Renderer(CFamily, Walker):
    """Walks the structured IR once, one line of CUDA C per instruction."""

    TARGET = "CUDA"
    Error = CudaTargetError
    STORAGE, COMPUTE = _STORAGE, _COMPUTE
    MATH = dict(CFamily.MATH, rsqrt="rsqrt")
    TRUE, FALSE = "true", "false"
    BARRIER = "__syncthreads();"

    def __init__(self, kernel: ir.Kernel, dim: CubeDim, fast_math: bool) -> None:
        super().__init__(kernel, dim)
        self.fast_math = fast_math
        self.vectors: dict[str, str] = {}
        self.shared_offsets, self.shared_total = shared_layout(kernel)
        self.packed = packed_shared(kernel)
        self.fragments: dict = {}
        self.float_atomics = False
        self.group = uses_group_mma(kernel)

    # -- names and types ------------------------------------------------------------------------
    def ctype(self, t: ir.Type) -> str:
        if t.lanes == 1:
            return _COMPUTE[t.dtype.name]
        name = f"ember_{t.dtype.name}x{t.lanes}"
        size = _compute_size(t.dtype) * t.lanes if t.dtype is not bool_ else t.lanes
        align = size if size & (size - 1) == 0 and size <= 16 else _compute_size(t.dtype)
        self.vectors[name] = f"struct __align__({align}) {name} {{ {_COMPUTE[t.dtype.name]} v[{t.lanes}]; }};"
        return name

    def local_name(self, var: ir.Local) -> str:
        if var not in self.locals:
            self.locals[var] = f"l{len(self.locals)}_" + identifier(var.name)
        return self.locals[var]

    # -- top ------------------------------------------------------------------------------------
    def render(self) -> str:
        params = []
        for p in self.k.params:
            if isinstance(p, ir.Array):
                params += [f"{_STORAGE[p.dtype.name]} *a_{p.name}", f"int32_t len_{p.name}"]
            else:
                params.append(f"{PARAM[p.value.type.dtype.name]} p{p.value.id}")
        self.emit(f'extern "C" __global__ void __launch_bounds__(NU) {entry_name(self.k)}({", ".join(params)}) {{', 0)
        for p in self.k.params:
            if isinstance(p, ir.ScalarParam):
                v = p.value
                conv = f"p{v.id} != 0" if v.type.dtype is bool_ else f"p{v.id}"
                self.emit(f"const {self.ctype(v.type)} v{v.id} = {conv};", 1)
        if self.shared_total:
            align = ir.SWIZZLE_BLOCK_BYTES if self.group else 16
            self.emit(f"extern __shared__ __align__({align}) unsigned char ember_smem[];", 1)
            for arr, off in self.shared_offsets.items():
                t = (_STORAGE if arr in self.packed else _COMPUTE)[arr.dtype.name]
                self.emit(f"{t} *s_{arr.name} = ({t} *)(ember_smem + {off});", 1)
        self.block(self.k.body, 1)
        self.emit("}", 0)
        d = self.dim
        head = [PRELUDE, _CAS if self.float_atomics else "", _GROUP if self.group else "", f"#define NU {d.total}",
                f"#define DX {d.x}",
                f"#define DY {d.y}", f"#define DZ {d.z}", *self.vectors.values(), ""]
        return "\n".join(head + self.lines) + "\n"

    def declare(self, var: ir.Local, depth: int) -> None:
        zero = "0" if var.type.lanes == 1 else "{}"
        self.emit(f"{self.ctype(var.type)} {self.local_name(var)} = {zero};", depth)

    def define(self, s: Instr, a: list, depth: int) -> None:
        if s.result.type.lanes > 1:
            self.vector(s, a, depth)
        else:
            self.emit(f"const {self.ctype(s.result.type)} v{s.result.id} = {self.expr(s, a)};", depth)

    def builtin(self, name: str) -> str:
        return _builtin(name, self.dim)

    def load(self, s: Instr, a: list) -> str:
        return self.element(s.attr, a[0])  # a scalar: vector loads are `vector_load`

    def compute(self, s: Instr, a: list) -> str:
        """A scalar op (vector results are filled lane by lane by `vector`)."""
        if s.op == "extract":
            return f"{a[0]}.v[{s.attr}]"
        return self.lane(s, a)

    # -- what CUDA C spells differently from C ---------------------------------------------------
    def float_literal(self, value: float, double: bool) -> str:
        """NaN and infinities from their bits: NVRTC has no math.h for NAN and INFINITY."""
        if math.isnan(value):
            return "__longlong_as_double(0x7ff8000000000000LL)" if double else "__uint_as_float(0x7fc00000u)"
        bits = "__longlong_as_double(0x7ff0000000000000LL)" if double else "__uint_as_float(0x7f800000u)"
        return f"(-{bits})" if value < 0 else bits

    def from_storage(self, x: str, dtype) -> str:
        return f"({x} != 0)" if dtype is bool_ else super().from_storage(x, dtype)

    def mulhi(self, a: list) -> str:
        return f"__umulhi({a[0]}, {a[1]})"

    def bitwise_not(self, x: str, out) -> str:
        return f"(({_COMPUTE[out.name]})~{x})"

    def math(self, op: str, a: list, src) -> str:
        if self.fast_math and src is f32 and op in _FAST:
            return f"{_FAST[op]}({', '.join(a)})"
        return super().math(op, a, src)

    def element(self, arr: ir.Array, index: str) -> str:
        if arr.kind == "shared" and arr not in self.packed:
            return f"s_{arr.name}[{index}]"
        if arr.kind == "shared":
            return self.from_storage(f"s_{arr.name}[{index}]", arr.dtype)
        return self.from_storage(f"a_{arr.name}[{index}]", arr.dtype)

    def plane(self, s: Instr, x: str) -> str:
        t = s.result.type
        if t.lanes > 1:
            raise CudaTargetError(f"line {s.line}: plane ops take scalars, got {t}")
        if s.op == "plane_all":
            return f"(__all_sync(__activemask(), {x}) != 0)"
        if s.op == "plane_any":
            return f"(__any_sync(__activemask(), {x}) != 0)"
        ct = self.ctype(t)
        combine = _PLANE_OP[s.op]
        if t.dtype is bool_:  # sum/prod of bools are or/and, as NumPy's bool arithmetic
            combine = {"plane_sum": "a || b", "plane_prod": "a && b"}.get(s.op, combine)
        return f"ember_plane({x}, []({ct} a, {ct} b) -> {ct} {{ return {combine}; }})"

    # -- vectors --------------------------------------------------------------------------------
    def vector(self, s: Instr, a: list, depth: int) -> None:
        """A vector result: declared, then filled lane by lane (or with one wide load)."""
        t = s.result.type
        r = f"v{s.result.id}"
        self.emit(f"{self.ctype(t)} {r};", depth)
        if s.op == "load":
            self.vector_load(s.attr, a[0], r, t, depth)
            return
        if s.op == "pack":
            self.emit(" ".join(f"{r}.v[{i}] = {x};" for i, x in enumerate(a)), depth)
            return
        self.emit("#pragma unroll", depth)
        self.emit(f"for (int l = 0; l < {t.lanes}; ++l) {r}.v[l] = {self.lane(s, a, '.v[l]')};", depth)

    def vector_load(self, arr: ir.Array, index: str, r: str, t: ir.Type, depth: int) -> None:
        loop = f"for (int l = 0; l < {t.lanes}; ++l) {r}.v[l] = {self.element(arr, index + ' + l')};"
        self.wide_or_lanes(arr, t, index, lambda ptr, vt: f"{r} = *(const {vt} *)({ptr});", loop, depth)

    def wide_or_lanes(self, arr: ir.Array, t: ir.Type, index: str, wide, loop: str, depth: int) -> None:
        """`wide(ptr, vector type)`, one wide access, when the address happens to be aligned (it usually
        is), else `loop`, lane by lane."""
        size = self._wide(arr, t)
        if not size:
            self.emit(loop, depth)
            return
        ptr = f"&{'s' if arr.kind == 'shared' else 'a'}_{arr.name}[{index}]"
        self.emit(f"if (((uint64_t)({ptr}) & {size - 1}) == 0) {wide(ptr, self.ctype(t))}", depth)
        self.emit(f"else {loop}", depth)

    def _wide(self, arr: ir.Array, t: ir.Type) -> int:
        """Bytes of one wide access for this vector of `arr`, or 0 when lanes must go one by one."""
        if arr.dtype in (f16, bf16, bool_):  # storage and compute types differ
            return 0
        if arr in self.packed and arr.dtype is not f32:
            return 0
        size = arr.dtype.itemsize * t.lanes
        return size if size & (size - 1) == 0 and 4 <= size <= 16 else 0

    def store(self, s: Instr, a: list, depth: int) -> None:
        arr, value = s.attr, s.args[1]
        dst = f"s_{arr.name}" if arr.kind == "shared" else f"a_{arr.name}"
        plain = arr.kind == "shared" and arr not in self.packed
        conv = (lambda x: x) if plain else (lambda x: self.to_storage(x, arr.dtype))
        if value.type.lanes == 1:
            self.emit(f"{dst}[{a[0]}] = {conv(a[1])};", depth)
            return
        loop = f"for (int l = 0; l < {value.type.lanes}; ++l) {dst}[{a[0]} + l] = {conv(a[1] + '.v[l]')};"
        self.wide_or_lanes(arr, value.type, a[0], lambda ptr, vt: f"*({vt} *)({ptr}) = {a[1]};", loop, depth)

    # -- matrix fragments (tensor cores, PTX wmma) and asynchronous copies (cp.async) ------------
    def instr(self, s: Instr, depth: int) -> None:
        if s.op in ir.MATRIX or s.op in ir.COPY:
            getattr(self, s.op)(s, [self.value(v) for v in s.args], depth)
        else:
            super().instr(s, depth)

    def frag(self, f: ir.Fragment) -> str:
        return self.fragments.setdefault(f, f"f{len(self.fragments)}")

    def fragment(self, s: Instr, a: list, depth: int) -> None:
        f = s.attr
        ctype = "float" if f.use == "accumulator" else "uint32_t"
        if f.scope == "group":
            self.emit("#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)", depth)
            self.emit('#error "plane-group products (wgmma) need sm_90a"', depth)
            self.emit("#endif", depth)
        self.emit(f"{ctype} {self.frag(f)}[{_fragment_regs(f)}];", depth)

    def matrix_fill(self, s: Instr, a: list, depth: int) -> None:
        f = s.attr
        self.emit(f"#pragma unroll", depth)
        self.emit(f"for (int e = 0; e < {_fragment_regs(f)}; ++e) {self.frag(f)}[e] = {a[0]};", depth)

    def _address(self, arr: ir.Array, index: str) -> tuple[str, str]:
        """(PTX state space suffix, asm operand) of the address of `arr[index]`."""
        ptr = f"&{'s' if arr.kind == 'shared' else 'a'}_{arr.name}[{index}]"
        if arr.kind == "shared":
            return ".shared", f'"r"((uint32_t)__cvta_generic_to_shared({ptr}))'
        return ".global", f'"l"({ptr})'

    def matrix_load(self, s: Instr, a: list, depth: int) -> None:
        f, arr = s.attr
        n = _fragment_regs(f)
        space, ptr = self._address(arr, a[0])
        which = {"a": "a", "b": "b", "accumulator": "c"}[f.use]
        kind = "tf32" if f.dtype is f32 and f.use != "accumulator" else f.dtype.name
        out = ", ".join(f'"={"f" if f.use == "accumulator" else "r"}"({self.frag(f)}[{i}])' for i in range(n))
        self.emit(f'asm volatile("wmma.load.{which}.sync.aligned.{f.layout}.{_shape(f)}{space}.{kind} '
                  f'{_regs(0, n)}, [%{n}], %{n + 1};" : {out} : {ptr}, "r"({a[1]}) : "memory");', depth)
        if kind == "tf32":  # round f32 to tf32 (to nearest, ties away), as cuBLAS's TF32 mode does
            self.emit(f"#pragma unroll", depth)
            self.emit(f'for (int e = 0; e < {n}; ++e) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"({self.frag(f)}[e]) '
                      f': "f"(__uint_as_float({self.frag(f)}[e])));', depth)

    def matrix_mma(self, s: Instr, a: list, depth: int) -> None:
        d, fa, fb, c = s.attr
        nd, na, nb = _fragment_regs(d), _fragment_regs(fa), _fragment_regs(fb)
        types = {"f16": "f32.f32", "bf16": "f32.bf16.bf16.f32", "f32": "f32.tf32.tf32.f32"}[fa.dtype.name]
        regs = f"{_regs(0, nd)}, {_regs(nd, na)}, {_regs(nd + na, nb)}, {_regs(nd + na + nb, nd)}"
        outs = ", ".join(f'"=f"({self.frag(d)}[{i}])' for i in range(nd))
        ins = ", ".join([f'"r"({self.frag(fa)}[{i}])' for i in range(na)] + [f'"r"({self.frag(fb)}[{i}])' for i in range(nb)]
                        + [f'"f"({self.frag(c)}[{i}])' for i in range(nd)])
        self.emit(f'asm("wmma.mma.sync.aligned.{fa.layout}.{fb.layout}.{_shape(d)}.{types} {regs};" '
                  f': {outs} : {ins});', depth)

    def matrix_store(self, s: Instr, a: list, depth: int) -> None:
        arr, f, layout = s.attr
        n = _fragment_regs(f)
        space, ptr = self._address(arr, a[0])
        ins = ", ".join(f'"f"({self.frag(f)}[{i}])' for i in range(n))
        self.emit(f'asm volatile("wmma.store.d.sync.aligned.{layout}.{_shape(f)}{space}.f32 [%0], {_regs(1, n)}, '
                  f'%{n + 1};" : : {ptr}, {ins}, "r"({a[1]}) : "memory");', depth)

    def copy_async(self, s: Instr, a: list, depth: int) -> None:
        dst, src, count = s.attr
        nbytes = count * src.dtype.itemsize
        cache = "cg" if nbytes == 16 else "ca"  # .cg (L2 only) takes 16-byte copies alone
        _, d = self._address(dst, a[0])
        self.emit(f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes}, %2;" : : {d}, '
                  f'"l"(&a_{src.name}[{a[2]} ? {a[1]} : 0]), "r"({a[2]} ? {nbytes} : 0) : "memory");', depth)

    def copy_commit(self, s: Instr, a: list, depth: int) -> None:
        self.emit('asm volatile("cp.async.commit_group;" : : : "memory");', depth)

    def copy_wait(self, s: Instr, a: list, depth: int) -> None:
        self.emit(f'asm volatile("cp.async.wait_group {int(s.attr)};" : : : "memory");', depth)
        if self.group:  # what landed must be visible to wgmma, which reads through the async proxy
            self.emit('asm volatile("fence.proxy.async.shared::cta;" : : : "memory");', depth)

    # -- plane groups (wgmma) -------------------------------------------------------------------
    def group_mma(self, s: Instr, a: list, depth: int) -> None:
        acc, arr_a, arr_b, panel = s.attr
        pairs = len(a) // 2
        regs = _fragment_regs(acc)
        kind = arr_a.dtype.name
        outs = ", ".join(f'"+f"({self.frag(acc)}[{i}])' for i in range(regs))
        self.emit('asm volatile("wgmma.fence.sync.aligned;" : : : "memory");', depth)
        for i in range(pairs):
            # A is K-major (rows of the swizzled blocks; the leading offset is unused); B is N-major
            # (panels, transposed in the instruction): leading offset = the panel stride, stride = 8 rows.
            da = f"ember_group_desc(&s_{arr_a.name}[{a[i]}], 16, {ir.SWIZZLE_BLOCK_BYTES})"
            lead = panel * arr_b.dtype.itemsize
            db = f"ember_group_desc(&s_{arr_b.name}[{a[pairs + i]}], {lead}, {ir.SWIZZLE_BLOCK_BYTES})"
            self.emit(f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n'
                      f'wgmma.mma_async.sync.aligned.m{acc.m}n{acc.n}k{acc.k}.f32.{kind}.{kind} '
                      f'{_regs(0, regs)}, %{regs}, %{regs + 1}, p, 1, 1, 0, 1;\\n}}" : {outs} : '
                      f'"l"({da}), "l"({db}), "r"(1) : "memory");', depth)
        self.emit('asm volatile("wgmma.commit_group.sync.aligned;" : : : "memory");', depth)

    def group_wait(self, s: Instr, a: list, depth: int) -> None:
        acc, pending = s.attr
        self.emit(f'asm volatile("wgmma.wait_group.sync.aligned {pending};" : : : "memory");', depth)
        # The accumulator's registers are written behind the compiler's back until the wait: pin them
        # here, so nothing reads or moves them earlier.
        regs = ", ".join(f'"+f"({self.frag(acc)}[{i}])' for i in range(_fragment_regs(acc)))
        self.emit(f'asm volatile("" : {regs} : : "memory");', depth)

    def group_store(self, s: Instr, a: list, depth: int) -> None:
        """The m64nNk16 accumulator: unit t of the group holds rows 16 * (t / 32) + (t % 32) / 4 (+ 8),
        columns 8 * i + 2 * (t % 4) (+ 1) in registers 4 * i (+ 1; + 2 for the row 8 below)."""
        arr, acc = s.attr
        index, stride, rows, cols = a
        f = self.frag(acc)
        dst = f"{'s' if arr.kind == 'shared' else 'a'}_{arr.name}"
        unit = self.builtin("unit_pos")
        conv = lambda x: x if arr.kind == "shared" and arr not in self.packed else self.to_storage(x, arr.dtype)
        self.emit("{", depth)
        self.emit(f"const int gt = {unit} & 127, gr = 16 * (gt >> 5) + ((gt & 31) >> 2), gc = 2 * (gt & 3);", depth + 1)
        self.emit("#pragma unroll", depth + 1)
        self.emit(f"for (int i = 0; i < {acc.n // 8}; ++i) {{", depth + 1)
        self.emit("#pragma unroll", depth + 2)
        self.emit("for (int h = 0; h < 2; ++h) {", depth + 2)
        offset = f"const int64_t o = (int64_t){index} + (int64_t)r * {stride} + c;"
        self.emit(f"const int r = gr + 8 * h, c = 8 * i + gc; {offset}", depth + 3)
        self.emit(f"if (r < {rows} && c < {cols}) {dst}[o] = {conv(f'{f}[4 * i + 2 * h]')};", depth + 3)
        self.emit(f"if (r < {rows} && c + 1 < {cols}) {dst}[o + 1] = {conv(f'{f}[4 * i + 2 * h + 1]')};", depth + 3)
        self.emit("}", depth + 2)
        self.emit("}", depth + 1)
        self.emit("}", depth)

    # -- atomics --------------------------------------------------------------------------------
    def atomic(self, s: Instr, a: list, depth: int) -> None:
        arr = s.attr
        if arr.dtype.name not in _ATOMIC_TYPES:
            raise CudaTargetError(f"line {s.line}: {s.op} on {arr.dtype.name} is not supported on the CUDA target")
        base = "s" if arr.kind == "shared" else "a"
        ptr = f"&{base}_{arr.name}[{a[0]}]"
        t = self.ctype(s.result.type)
        name = arr.dtype.name
        if arr.dtype.is_float and s.op != "atomic_add":
            self.float_atomics = True
            call = f"ember_{s.op}_float({ptr}, {a[1]})"
        elif name in _INT64_ATOMIC:
            # CUDA's 64-bit atomics take (unsigned) long long; int64_t is long long here, but u64
            # adds go through the unsigned overload, which two's complement makes right for i64 too.
            ll = "unsigned long long" if s.op == "atomic_add" else _INT64_ATOMIC[name]
            call = f"({t}){_ATOMIC_FN[s.op]}(({ll} *){ptr}, ({ll}){a[1]})"
        else:
            call = f"{_ATOMIC_FN[s.op]}({ptr}, {a[1]})"
        self.emit(f"const {t} v{s.result.id} = {call};", depth)


def _fragment_regs(f: ir.Fragment) -> int:
    """32-bit registers per unit of a PTX wmma fragment (m16n16k16 f16/bf16, m16n16k8 tf32), or of a
    plane group's wgmma accumulator (64 x n over 128 units)."""
    if f.scope == "group":
        return f.m * f.n // (ir.GROUP_PLANES * PLANE_DIM)
    if f.use == "accumulator":
        return 8
    return 8 if f.dtype is f16 else 4


def _shape(f: ir.Fragment) -> str:
    return f"m{f.m}n{f.n}k{f.k}"


def _regs(start: int, n: int) -> str:
    return "{" + ", ".join(f"%{i}" for i in range(start, start + n)) + "}"


def _builtin(name: str, dim: CubeDim) -> str:
    tx, ty, tz = "(int32_t)threadIdx.x", "(int32_t)threadIdx.y", "(int32_t)threadIdx.z"
    bx, by, bz = "(int32_t)blockIdx.x", "(int32_t)blockIdx.y", "(int32_t)blockIdx.z"
    gx, gy, gz = "(int32_t)gridDim.x", "(int32_t)gridDim.y", "(int32_t)gridDim.z"
    # The common one-dimensional cube needs no y/z arithmetic.
    unit = tx if dim.x == dim.total else f"(({tz} * DY + {ty}) * DX + {tx})"
    cube = f"(({bz} * {gy} + {by}) * {gx} + {bx})"
    # Warps are cut from the linear unit position, 32 units each.
    return builtin_table((tx, ty, tz), (bx, by, bz), (gx, gy, gz), (unit, cube, f"({gx} * {gy} * {gz})"),
                         (str(PLANE_DIM), f"({unit} & {PLANE_DIM - 1})"))[name]


def render(kernel: ir.Kernel, dim: CubeDim, fast_math: bool = False) -> str:
    """CUDA C source for `kernel` launched with cube shape `dim`; the entry is `entry_name(kernel)`."""
    return Renderer(kernel, dim, fast_math).render()
