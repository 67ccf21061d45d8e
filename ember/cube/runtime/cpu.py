"""The CPU runtime: specialize, optimize, render to C, compile with gcc/clang, launch on NumPy buffers.

A launch passes each array as a pointer to its first element plus its element count (what `len()`
returns in the kernel); the array's layout is the kernel's business, so views with any strides can be
passed along with their strides as kernel arguments. Scalars are passed by address in the compute type
(f16/bf16 scalars as float32).

The C entry point has one signature for every kernel:
    void ember_kernel(const int64_t *launch, void **args)
where launch = [cube_count.x, cube_count.y, cube_count.z, len(array_0), len(array_1), ...] and
args[i] is the i-th parameter: a data pointer for an array, a pointer to the value for a scalar.

A launch spreads its cubes over OpenMP's threads only when its largest array has at least
`ember_parallel_min` elements (a global of each kernel library): a parallel region costs its threads'
wake-up, little while they still spin after the last one (`SPIN_ROUNDS`), far more once they sleep,
most on a virtual machine. The runtime measures that cost once per process, back to back
(`wake_cost`), and sets every library's threshold to the size whose work it saves (`parallel_min_for`);
`[cpu] parallel_min` (`EMBER_CPU_PARALLEL_MIN`) sets it instead.

Example:
    >>> rt = cpu_runtime()
    >>> rt.launch(my_kernel, CubeCount(4), CubeDim(256), (x, y), {})
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from ...settings import settings
from ..compile_cache import CompileCache, SourceCache, cache_key, source_stamp
from .. import ir
from ...dtype import NpTable
from ..ir import DTYPES
from ..lang import CubeCount, CubeDim, KernelError
from ..passes import optimize
from ..targets import c as c_target
from .base import Runtime
from .host import empty as host_empty, host_pool
from .launches import Launch, LaunchRecorder
from .memory_pool import MemoryStats

FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-shared", "-fPIC", "-std=gnu11",
         "-fno-math-errno", "-ffp-contract=off")
"""`-ffp-contract=off`: no multiply-add contracted into one FMA (gcc's default in gnu modes). A fused
chain then rounds each op as the op's own kernel does, so a value's bits do not depend on where the
fusion layer cut its blocks, which depends on the ops since the last sync point (`fusion/ops.py`): an
optimizer's state saved and resumed replays the same bits as the run that went on (Muon's updates
differed in the last bit with contraction; `tests/optim/test_state.py`). Elementwise kernels are
bound by memory, not by the FMA's saved instruction. NVRTC still contracts (its `--fmad=true`), so on
CUDA the last bit may depend on the blocks."""

SPIN_ROUNDS = 30_000
"""How long an idle OpenMP thread spins before it sleeps (`GOMP_SPINCOUNT` rounds): long enough that the
threads stay awake between the kernels of a training step and sleep between steps, short enough not to
take a core from whatever runs after the last kernel. One libgomp serves the process (torch's wheel
ships its own `libgomp.so.1`, which a kernel library loaded after torch links), so this setting is
torch's as well when ember starts first. Why not passive threads or libgomp's default, with figures:
docs/cube.md, "The CPU runtime's threads"."""

ELEMENTS_PER_US = 3000
"""Elements of a contiguous elementwise kernel one thread does per microsecond (f32 adds): the work that
waking the threads must save (`parallel_min_for`)."""
WORK_WAKES = 2
"""A region that does work costs about twice what an empty one (`wake_cost`) does: the woken thread starts
cold."""
WAKE_PROBE = r"""#include <stdint.h>
int64_t ember_wake(void) {  /* one parallel region: the threads it woke */
  int64_t n = 0;
  #pragma omp parallel reduction(+:n)
  n += 1;
  return n;
}
int64_t ember_still(void) { return 1; }
"""

_NP_TO_CUBE = NpTable(DTYPES.values())
_SCALAR_CTYPES = {"f64": ctypes.c_double, "f32": ctypes.c_float, "f16": ctypes.c_float,
                  "bf16": ctypes.c_float, "i64": ctypes.c_int64, "i32": ctypes.c_int32,
                  "i16": ctypes.c_int16, "i8": ctypes.c_int8, "u8": ctypes.c_uint8,
                  "u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "bool": ctypes.c_uint8}


def find_compiler() -> str | None:
    """`[compilation] compiler` (`EMBER_CC`) when set, else the first of cc, gcc, clang on PATH."""
    configured = settings().get("compilation", "compiler")
    if settings().source("compilation", "compiler") != "default":
        candidates = [configured]
    else:
        candidates = [configured, "gcc", "clang"]
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


_probe: tuple | None = None


def cpu_available() -> tuple:
    """(True, "") if a C compiler with OpenMP builds and loads a test kernel here, else (False, why)."""
    global _probe
    if _probe is None:
        # How OpenMP's idle threads wait (see `SPIN_ROUNDS`). libgomp reads this once, when the first
        # library linking it loads, which the OpenMP probe below can be: so it is set here, before the
        # probe (set in the runtime, after the probe, it was ignored). A policy the user set is kept.
        if not any(name in os.environ for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")):
            os.environ["GOMP_SPINCOUNT"] = str(SPIN_ROUNDS)
            os.environ["KMP_BLOCKTIME"] = "1"  # LLVM's libomp (a clang build): spin 1 ms, then sleep
        _probe = _check_compiler()
    return _probe


def _check_compiler() -> tuple:
    cc = find_compiler()
    if cc is None:
        return False, "no C compiler found (install gcc or clang, or set EMBER_CC)"
    outcome = remembered_probe(cc, "openmp", lambda: _openmp_probe(cc), keep=lambda text: text == "ok")
    return (True, "") if outcome == "ok" else (False, outcome)


def _openmp_probe(cc: str) -> str:
    """"ok" if `cc` builds and loads an OpenMP shared library, else why not."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("#include <omp.h>\nint ember_probe(void) { return omp_get_max_threads(); }\n")
        try:
            _compile(cc, src, Path(tmp) / "probe.so")
            ctypes.CDLL(str(Path(tmp) / "probe.so")).ember_probe()
        except (OSError, subprocess.SubprocessError, RuntimeError) as e:
            return f"{cc} cannot build OpenMP shared libraries: {str(e).strip()[:300]}"
    return "ok"


def remembered_probe(cc: str, name: str, probe, keep=lambda text: True) -> str:
    """`probe()`'s text, remembered in the disk cache (`<cache_dir>/cpu-probes`) for this compiler: its
    resolved path, size, modification time and `--version` line, and the flags (a changed or
    replaced compiler probes again). Outcomes for which `keep` is False are not remembered.

    Example:
        >>> remembered_probe(cc, "vector-math", lambda: " ".join(vector_math_flags(cc)))
        '-DEMBER_VECTOR_MATH -lmvec'
    """
    try:
        st = os.stat(cc)
    except OSError:
        return probe()
    key = cache_key("probe-1", name, os.path.realpath(cc), str(st.st_size), str(st.st_mtime_ns),
                    _compiler_version(cc), " ".join(FLAGS))
    cache = SourceCache("cpu-probes")
    text = cache.read(key)
    if text is None:
        text = probe()
        if keep(text):
            cache.write(key, text)
    return text


def _compile(cc: str, source: Path, output: Path, extra: tuple = ()) -> None:
    flags, libs = [f for f in extra if not f.startswith("-l")], [f for f in extra if f.startswith("-l")]
    proc = subprocess.run([cc, *FLAGS, *flags, str(source), "-o", str(output), *libs, "-lm"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"C compilation failed:\n{proc.stderr}")


_VECTOR_MATH_PROBE = """#define __FAST_MATH__ 1
#include <math.h>
#undef __FAST_MATH__
void ember_probe(float *x, int n) {
  #pragma omp simd
  for (int i = 0; i < n; ++i) x[i] = tanhf(expf(x[i]));
}
"""


def vector_math_flags(cc: str) -> tuple:
    """Flags that let gcc call glibc's SIMD math (libmvec) from vectorized loops, or () if unusable.

    glibc declares the vector variants of expf, tanhf, erff, ... only under __FAST_MATH__; the C
    target defines that macro around <math.h> alone (the code is still compiled without fast-math,
    so NaN and infinity keep their meaning; libmvec is accurate to 4 ulp).
    """
    extra = ("-DEMBER_VECTOR_MATH", "-lmvec")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "vmath.c"
        src.write_text(_VECTOR_MATH_PROBE)
        try:
            _compile(cc, src, Path(tmp) / "vmath.so", extra)
            ctypes.CDLL(str(Path(tmp) / "vmath.so"))
        except (OSError, subprocess.SubprocessError, RuntimeError):
            return ()
    return extra


@functools.lru_cache(maxsize=None)
def _compiler_version(cc: str) -> str:
    proc = subprocess.run([cc, "--version"], capture_output=True, text=True)
    return proc.stdout.splitlines()[0] if proc.stdout else cc


class KernelParam(NamedTuple):
    """What a launch needs to know of one parameter of a compiled kernel."""

    name: str
    kind: str  # "array" or "scalar"
    dtype: object  # a cube DType
    written: bool  # an array the kernel stores to


def describe_params(kernel) -> list:
    """The `KernelParam`s of a specialized (optimized) kernel, in call order."""
    stored = {s.attr for s in ir.walk(kernel.body) if isinstance(s, ir.Instr)
              and (s.op == "store" or s.op in ir.ATOMIC)}
    return [KernelParam(p.name, "array", p.dtype, p in stored) if hasattr(p, "kind")
            else KernelParam(p.name, "scalar", p.value.type.dtype, False) for p in kernel.params]


class CompiledKernel:
    """A loaded `ember_kernel` plus what a launch needs to marshal arguments; `library` is its key in
    the disk cache."""

    def __init__(self, fn, params: list, source: str, library: str) -> None:
        self.fn = fn
        self.source = source
        self.library = library
        self.params = params
        self.kinds = [p.kind for p in params]
        self.scalar_ctypes = [None if p.kind == "array" else _SCALAR_CTYPES[p.dtype.name] for p in params]
        # Writing through a read-only view (a memory-mapped file, a broadcast) would crash the process.
        self.written = [p.written for p in params]
        # The NumPy dtype each array parameter takes (NumPy's builtin dtypes are singletons, so a
        # launch checks an argument by identity and looks the dtype up only when that fails).
        self.np_dtypes = [np.dtype(p.dtype.np) if p.kind == "array" else None for p in params]

    def manifest(self) -> str:
        """What `from_manifest` needs to rebuild this without the IR: the library key, parameters, source."""
        return json.dumps({"library": self.library, "source": self.source,
                           "params": [[p.name, p.kind, p.dtype.name, p.written] for p in self.params]})

    @staticmethod
    def from_manifest(text: str, cache: CompileCache) -> "CompiledKernel | None":
        """The kernel a `manifest()` describes, its library loaded from `cache`; None if either is
        unusable (malformed text, a library missing or that does not load)."""
        try:
            entry = json.loads(text)
            params = [KernelParam(name, kind, DTYPES[dtype], bool(written))
                      for name, kind, dtype, written in entry["params"]]
            library, source = str(entry["library"]), str(entry["source"])
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        lib = cache.load(library, c_target.ENTRY)
        return None if lib is None else CompiledKernel(_entry(lib), params, source, library)


def _entry(lib) -> object:
    fn = getattr(lib, c_target.ENTRY)
    fn.restype = None
    fn.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_void_p)]
    threshold = ctypes.c_int64.in_dll(lib, "ember_parallel_min")
    threshold.value = _parallel_min[0]
    _thresholds.append(threshold)
    return fn


_parallel_min = [c_target.PARALLEL_MIN]  # what every kernel library loaded from now on is given
_measured: list = []  # [(wake cost in us, threads)] once measured in this process
_thresholds: list = []  # each loaded kernel library's `ember_parallel_min`


def parallel_min_for(wake_us: float, threads: int) -> int:
    """The elements from which a launch's cubes pay for waking `threads` threads whose empty parallel
    region costs `wake_us` (`WORK_WAKES` times that with work): spread, the work saved is (1 - 1/threads)
    of it at `ELEMENTS_PER_US`; never below `c_target.PARALLEL_MIN`.

    Example:
        >>> parallel_min_for(60.0, 2), parallel_min_for(4.0, 16)
        (720000, 32768)
    """
    if threads < 2:
        return c_target.PARALLEL_MIN
    return max(c_target.PARALLEL_MIN, int(ELEMENTS_PER_US * WORK_WAKES * wake_us * threads / (threads - 1)))


def set_parallel_min(elements: int) -> None:
    """Run launches whose largest array has fewer than `elements` elements on the calling thread, in
    every kernel library loaded and to be loaded.

    Example:
        >>> set_parallel_min(1 << 20)
    """
    _parallel_min[0] = int(elements)
    for threshold in _thresholds:
        threshold.value = _parallel_min[0]


def _built(cache: CompileCache, cc: str, source: str, key: str, symbol: str, extra: tuple = ()) -> ctypes.CDLL:
    """The shared library built from C `source` with `cc` (plus `extra` flags), from `cache` under `key`
    when it is there and exports `symbol`."""
    def build(path: Path) -> None:
        src = path.with_suffix(".c")
        src.write_text(source)
        try:
            _compile(cc, src, path, extra)
        finally:
            src.unlink(missing_ok=True)

    return cache.load_or_build(key, build, symbol)


def _wake_probe(cc: str, cc_version: str) -> ctypes.CDLL:
    """`WAKE_PROBE` built with `cc` (in the default kernel cache, not a runtime's own: its builds are
    the runtime's kernels)."""
    return _built(CompileCache(), cc, WAKE_PROBE, cache_key("wake-probe", cc_version, " ".join(FLAGS)), "ember_wake")


def wake_cost(lib, rounds: int = 25) -> tuple[float, int]:
    """(median microseconds one OpenMP parallel region costs over a plain call, the threads it runs on),
    timed on `WAKE_PROBE`'s library `lib`, back to back (as the kernels of a step come: the threads
    still spinning)."""
    wake, still = lib.ember_wake, lib.ember_still
    wake.restype = still.restype = ctypes.c_int64
    threads = wake()
    costs = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        wake()
        t1 = time.perf_counter()
        still()
        costs.append((t1 - t0) - (time.perf_counter() - t1))
    costs.sort()
    return max(0.0, costs[len(costs) // 2] * 1e6), int(threads)


def _debug_print(name: str, dim: CubeDim, source: str) -> None:
    if settings().get("logging", "debug_kernels"):
        print(f"// ---- cube kernel {name} (cube dim {dim}) ----\n{source}", file=sys.stderr)


class CpuRuntime(LaunchRecorder, Runtime):
    """Compiles cube kernels to C and runs them on NumPy arrays (see the module docstring): the host's
    `Runtime`, whose arrays are NumPy's (outputs from the host pool) and whose queue is the caller."""

    target = "cpu"
    ARRAY = np.ndarray
    dtypes = frozenset(DTYPES)
    """Every dtype cube has (f16/bf16 computed in f32)."""
    records_launches = True

    def __init__(self, cache: CompileCache | None = None) -> None:
        ok, why = cpu_available()
        if not ok:
            raise RuntimeError(f"the CPU cube runtime is unavailable: {why}")
        self.cc = find_compiler()
        self.cc_version = _compiler_version(self.cc)
        self.adapter_name = f"the CPU ({self.cc_version})"
        self.extra_flags = tuple(remembered_probe(self.cc, "vector-math",
                                                  lambda: " ".join(vector_math_flags(self.cc))).split())
        self.cache = cache or CompileCache()
        self._set_parallel_min()
        # Keys made before tracing (kernel source, dtypes, comptime values, ...) -> manifests naming
        # the library and holding what a launch needs: a warm process loads kernels without tracing.
        self.manifests = SourceCache("cpu-manifests", self.cache.directory)
        self._compiled: dict = {}
        self._lock = threading.Lock()
        self._key_locks: dict = {}
        LaunchRecorder.__init__(self)
        self._sites: dict = {}  # (kernel, dim, comptime as given, argument dtypes) -> compiled kernel

    def _set_parallel_min(self) -> None:
        """`[cpu] parallel_min` when set, else the threshold for this machine's measured wake cost (once
        per process; see the module docstring)."""
        configured = settings().get("cpu", "parallel_min")
        if configured > 0:
            set_parallel_min(configured)
        elif not _measured:
            _measured.append(wake_cost(_wake_probe(self.cc, self.cc_version)))
            set_parallel_min(parallel_min_for(*_measured[0]))

    def compile(self, kernel, dim: CubeDim) -> CompiledKernel:
        """Optimize, render and build (or load from the disk cache) one specialized kernel."""
        optimized = optimize(kernel)
        source = c_target.render(optimized, dim)
        _debug_print(kernel.name, dim, source)
        key = cache_key(optimized.hash(), *self._target_parts(dim))
        lib = self.build_library(source, key, c_target.ENTRY, self.extra_flags)
        return CompiledKernel(_entry(lib), describe_params(optimized), source, key)

    def build_library(self, source: str, key: str, symbol: str, extra: tuple = ()) -> ctypes.CDLL:
        """The shared library built from C `source` with this runtime's compiler and flags (plus
        `extra`), from the disk cache under `key` when it is there and exports `symbol`.

        Example:
            >>> lib = rt.build_library("void f(void) {}", cache_key("f", rt.cc_version), "f")
        """
        return _built(self.cache, self.cc, source, key, symbol, extra)

    def _target_parts(self, dim: CubeDim) -> tuple:
        """Everything besides the kernel that determines its binary."""
        return ("c", c_target.VERSION, self.cc_version, " ".join(FLAGS + self.extra_flags),
                f"{dim.x},{dim.y},{dim.z}")

    def compile_keyed(self, early_key: str | None, name: str, make, dim: CubeDim) -> CompiledKernel:
        """The compiled kernel for a key made before building its IR (`early_key`, None: no such
        key): its manifest names the library, so a hit neither traces, optimizes nor renders;
        a miss calls `make()` for the IR, compiles it, and writes the manifest. The key must
        change whenever the IR `make()` returns could (fold `source_stamp` of the building code in).

        Example:
            >>> key = cache_key("my-fused", program_text, source_stamp(__name__))
            >>> compiled = rt.compile_keyed(key, "my_fused", lambda: build_ir(program), CubeDim(256))
        """
        if early_key is not None:
            key = cache_key("manifest", early_key, *self._target_parts(dim))
            text = self.manifests.read(key)
            compiled = None if text is None else CompiledKernel.from_manifest(text, self.cache)
            if compiled is not None:
                _debug_print(name, dim, compiled.source)
                return compiled
        compiled = self.compile(make(), dim)
        if early_key is not None:
            self.manifests.write(key, compiled.manifest())
        return compiled

    def compile_ir(self, kernel, dim: CubeDim) -> CompiledKernel:
        """Compile IR built directly (e.g. a fused kernel from `ir.Builder`), remembered by its hash.

        Example:
            >>> compiled = rt.compile_ir(builder.kernel, CubeDim(256))
            >>> rt.run(compiled, CubeCount(4), (x, y))
        """
        ir_hash = kernel.hash()
        key = ("ir", ir_hash, dim)
        compiled = self._compiled.get(key)
        if compiled is None:
            # The IR's hash with the compiler's own source (passes, C target) keys the manifest.
            early = source_stamp(__name__)
            early = None if early is None else cache_key("ir", ir_hash, early)
            compiled = self._compiled[key] = self.compile_keyed(early, kernel.name, lambda: kernel, dim)
        return compiled

    def prepare(self, kfn, dim: CubeDim, args: tuple, comptime: dict) -> CompiledKernel:
        """The compiled kernel for these arguments, from memory when this key was seen before.

        A call site repeats itself: the kernel, the cube dim, the comptime values as given and the
        arguments' dtypes find the kernel in one lookup (`_sites`); a new combination goes through
        the full resolution (defaults, dtype rules, checks) once.
        """
        try:
            site = (kfn, dim, *comptime.items(), *[getattr(a, "dtype", None) for a in args])
            compiled = self._sites.get(site)
        except TypeError:  # an unhashable comptime value: the full path names the problem
            site = compiled = None
        if compiled is None:
            compiled = self._resolve(kfn, dim, args, comptime)
            if site is not None:
                self._sites[site] = compiled
        return compiled

    def _resolve(self, kfn, dim: CubeDim, args: tuple, comptime: dict) -> CompiledKernel:
        comptime = kfn.comptime_values(comptime)
        arg_dtypes = []
        for p, a in zip(kfn.runtime_params, args):
            if p.kind == "array":
                if not isinstance(a, np.ndarray):
                    raise KernelError(f"{kfn.__name__}: argument {p.name!r} must be a NumPy array, "
                                      f"got {type(a).__name__}")
                arg_dtypes.append(_NP_TO_CUBE.get(a.dtype))
                if arg_dtypes[-1] is None:
                    raise KernelError(f"{kfn.__name__}: arrays of {a.dtype} are not supported")
            else:
                arg_dtypes.append(None)
        dtypes = kfn.resolve_dtypes(tuple(arg_dtypes) + (None,) * (len(kfn.runtime_params) - len(args)),
                                    comptime)
        key = (kfn, dtypes, tuple(sorted(comptime.items())), dim)
        compiled = self._compiled.get(key)
        if compiled is None:
            # One lock per key: different kernels compile concurrently from different threads.
            with self._lock:
                key_lock = self._key_locks.setdefault(key, threading.Lock())
            with key_lock:
                compiled = self._compiled.get(key)
                if compiled is None:
                    def trace():
                        with self._lock:  # tracing is not thread-safe
                            return kfn.specialize(dtypes, comptime)
                    compiled = self.compile_keyed(kfn.disk_key(dtypes, comptime), kfn.__name__, trace, dim)
                    self._compiled[key] = compiled
        return compiled

    def launch(self, kfn, count: CubeCount, dim: CubeDim, args: tuple, comptime: dict) -> None:
        """Run `kfn` over `count` cubes of shape `dim` on NumPy arrays (written in place)."""
        if len(args) != len(kfn.runtime_params):
            raise KernelError(f"{kfn.__name__} takes {len(kfn.runtime_params)} runtime arguments "
                              f"({', '.join(p.name for p in kfn.runtime_params)}), got {len(args)}")
        if count.total == 0:  # nothing runs: not even worth compiling
            return
        self.run(self.prepare(kfn, dim, args, comptime), count, args)

    def run(self, compiled: CompiledKernel, count: CubeCount, args: tuple) -> None:
        """Call a compiled kernel on NumPy arrays and scalars, in parameter order."""
        if len(args) != len(compiled.params):
            raise KernelError(f"the kernel takes {len(compiled.params)} arguments, got {len(args)}")
        if count.total == 0:
            return
        launch, pointers, _ = _marshal(compiled, count, args)
        self.recorded(compiled, count, args)
        compiled.fn(launch, (ctypes.c_void_p * len(pointers))(*pointers))

    def bind(self, launch: Launch, open_slots: Sequence[int]) -> "BoundLaunch":
        """`launch` marshalled once, its arrays at `open_slots` left to fill in at each replay (the
        other arguments are kept as they were: constants such as a layout array or a size)."""
        return BoundLaunch(launch, open_slots)

    @staticmethod
    def empty(shape: tuple, dtype) -> np.ndarray:
        """An uninitialized array for a kernel's output (from the host pool, as the kernel library's)."""
        return host_empty((shape,) if isinstance(shape, int) else shape, np.dtype(dtype))

    @staticmethod
    def to_device(host: np.ndarray) -> np.ndarray:
        """`host` itself: the CPU's kernels read NumPy arrays where they are."""
        return host

    @staticmethod
    def to_host(array: np.ndarray) -> np.ndarray:
        """`array` itself (nothing is queued: a launch returns when its kernel has run)."""
        return array

    @staticmethod
    def write_zeros(array: np.ndarray) -> None:
        """Zeros over every element of `array`."""
        array[...] = 0

    @staticmethod
    def bounds(array: np.ndarray) -> None:
        """None: reading a host array's values costs no wait, so an index check reads them."""
        return None

    def synchronize(self) -> None:
        """Nothing to wait for: launches run on the calling thread."""

    def memory_stats(self, reset_peaks: bool = False) -> MemoryStats:
        """The host pool's reserved and in-use bytes and their peaks (the library's outputs)."""
        return host_pool().stats(reset_peaks)

    def memory_cleanup(self) -> int:
        """Give the host pool's empty pages back to the allocator; the bytes released."""
        return host_pool().cleanup()

    @staticmethod
    def address(a) -> int | None:
        """The data pointer of `a` when it is an array this runtime's kernels take, else None."""
        return data_pointer(a) if isinstance(a, np.ndarray) else None

    @staticmethod
    def shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
        """Whether `a` and `b` may overlap in memory."""
        return np.may_share_memory(a, b)


def _marshal(compiled: CompiledKernel, count: CubeCount, args: tuple) -> tuple:
    """(launch sizes as a C array, each argument's pointer, the scalar boxes that must outlive the call),
    checking each array against its parameter."""
    launch = [count.x, count.y, count.z]
    pointers = []
    keep = []  # scalar boxes must outlive the call
    for i, (kind, a) in enumerate(zip(compiled.kinds, args)):
        if kind == "array":
            param = compiled.params[i]
            if not isinstance(a, np.ndarray) or a.dtype is not compiled.np_dtypes[i] and \
                    _NP_TO_CUBE.get(a.dtype) is not param.dtype:
                raise KernelError(f"argument {param.name!r} must be a NumPy array of {param.dtype.name}")
            size = a.size
            if size >= 2**31:
                raise KernelError(f"argument {param.name!r}: arrays over 2**31 elements need 64-bit "
                                  f"indices")
            if compiled.written[i] and not a.flags.writeable:
                raise KernelError(f"argument {param.name!r} is written by the kernel but the array is "
                                  f"read-only")
            pointers.append(data_pointer(a))
            launch.append(size)
        else:
            box = compiled.scalar_ctypes[i](a)
            keep.append(box)
            pointers.append(ctypes.addressof(box))
    return (ctypes.c_int64 * len(launch))(*launch), pointers, keep


class BoundLaunch:
    """A launch marshalled once (`CpuRuntime.bind`): a replay only fills in the data pointers of its
    open slots, so the arrays given there must have the dtypes, shapes and strides of the captured ones.

    Example:
        >>> bound = rt.bind(launch, open_slots=(0, 1))
        >>> bound.replay((x2, y2))          # same layouts as the captured x, y
    """

    __slots__ = ("fn", "launch", "pointers", "open", "keep")

    def __init__(self, launch: Launch, open_slots: Sequence[int]) -> None:
        self.fn = launch.compiled.fn
        self.launch, self.pointers, boxes = _marshal(launch.compiled, launch.count, launch.args)
        self.open = tuple(open_slots)
        # The constant arguments stay alive with the launch (their pointers are baked in); the open
        # ones are not kept (they are the caller's data).
        self.keep = (boxes, [a for i, a in enumerate(launch.args) if i not in self.open])

    def replay(self, arrays: Sequence[np.ndarray]) -> None:
        """Run the kernel with `arrays[k]` in open slot `k`."""
        pointers = self.pointers.copy()
        for slot, a in zip(self.open, arrays):
            pointers[slot] = data_pointer(a)
        self.fn(self.launch, (ctypes.c_void_p * len(pointers))(*pointers))


# A NumPy array's data pointer is the first field after the object header (`PyArrayObject_fields.data`):
# reading it there is several times cheaper than `a.ctypes.data`. Checked once at import; where it
# does not hold (another interpreter), `a.ctypes.data` is used.
_HEADER = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
_word_at = ctypes.c_void_p.from_address


def _header_pointer(a: np.ndarray) -> int:
    return _word_at(id(a) + _HEADER).value or 0


def _ctypes_pointer(a: np.ndarray) -> int:
    return a.ctypes.data


def _pick_data_pointer():
    probe = np.arange(6, dtype=np.float64)[2::2]
    return _header_pointer if _header_pointer(probe) == probe.ctypes.data else _ctypes_pointer


data_pointer = _pick_data_pointer()
"""`data_pointer(a)`: the address of NumPy array `a`'s first element (what `a.ctypes.data` gives)."""

_default: CpuRuntime | None = None


def cpu_runtime() -> CpuRuntime:
    """The process-wide CPU runtime (created on first use, with the default disk cache)."""
    global _default
    if _default is None:
        _default = CpuRuntime()
    return _default
