"""The wgpu runtime: cube kernels rendered to WGSL and run through wgpu-py (Vulkan, Metal, DX12).

One `WgpuRuntime` per adapter. Adapters are listed best first (`adapters()`): discrete GPUs, then
integrated ones, then CPU/software ones (Mesa's lavapipe), native backends before OpenGL.
`wgpu_runtime(which)` picks one by index in that list or by a case-insensitive part of its name. The
device is requested with the adapter's own limits and the features that change rendering (`subgroup`,
`shader-f16`); buffers, launch shapes and workgroup memory beyond the limits are refused before
anything is queued, naming the kernel and the limit. A launch:

    bind arguments -> KernelFunction.specialize -> optimize -> targets/wgsl.render -> shader module and
    compute pipeline (one per kernel x CubeDim) -> bind group (arrays in order, then the info buffer)
    -> dispatch_workgroups(CubeCount) -> queue.submit

Arguments are `WgpuArray`s (device buffers, used in place), NumPy arrays (uploaded for the launch and
read back when the kernel writes them), or scalars. Work is queued; `synchronize()` waits by mapping a
small buffer that a copy queued after the work writes (docs/wgpu.md says why not
`on_submitted_work_done_sync`).

Example:
    >>> rt = wgpu_runtime()            # or wgpu_runtime("llvmpipe"), wgpu_runtime(1)
    >>> x = rt.to_device(np.arange(1000, dtype=np.float32)); y = rt.empty(1000, np.float32)
    >>> rt.launch(scale, CubeCount(4), CubeDim(256), (x, y, 2.0), {})
    >>> y.numpy()[:3]
    array([0., 2., 4.], dtype=float32)
"""

from __future__ import annotations

import sys
import threading
import weakref
from time import perf_counter
from dataclasses import dataclass

import numpy as np

from ...errors import DeviceError, DeviceUnavailableError
from ...settings import settings
from .. import ir
from ..ir import DTYPES
from ..lang import CubeCount, CubeDim, KernelError
from ..passes import optimize
from ..targets import wgsl as wgsl_target
from .arguments import NP_TO_CUBE, DeviceArray, Specializing, check_array, check_count, host_bounds
from .base import Runtime
from .host import host_span
from ..compile_cache import SourceCache, cache_key
from .memory_pool import MemoryStats, pool_from_settings

INSTALL = "pip install 'ember[wgpu]' (wgpu-py; on Linux without a GPU also apt-get install mesa-vulkan-drivers)"
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "CPU": 2}
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 1}
FEATURES = ("subgroup", "shader-f16", "shader-int64", "shader-f64")  # the optional features the WGSL target uses


class WgpuError(DeviceError):
    """A wgpu call failed: a shader the compiler refused, a validation error; names the kernel."""


class WgpuLimitError(WgpuError):
    """A buffer or launch beyond what the adapter allows; names the limit and the adapter."""


def wgpu_module():
    """The `wgpu` package, or DeviceUnavailableError naming the extra that installs it."""
    try:
        import wgpu
    except ImportError:
        raise DeviceUnavailableError(f"the wgpu runtime needs wgpu-py: {INSTALL}") from None
    return wgpu


@dataclass(frozen=True)
class AdapterInfo:
    """One adapter as `adapters()` lists it: its position, name, kind and backend."""

    index: int
    name: str
    kind: str       # DiscreteGPU, IntegratedGPU, CPU, Unknown
    backend: str    # Vulkan, Metal, D3D12, OpenGL
    adapter: object


def adapters() -> list[AdapterInfo]:
    """The adapters wgpu sees, best first: discrete, integrated, then CPU; native backends before GL.

    Example:
        >>> [a.name for a in adapters()]
        ['llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)', 'llvmpipe (LLVM 15.0.6, 256 bits) (OpenGL)']
    """
    wgpu = wgpu_module()
    found = []
    for a in wgpu.gpu.enumerate_adapters_sync():
        info = a.info
        kind, backend = info.get("adapter_type", "Unknown"), info.get("backend_type", "")
        found.append((_TYPE_RANK.get(kind, 3), _BACKEND_RANK.get(backend, 2), f"{info.get('device', '?')} ({backend})",
                      kind, backend, a))
    found.sort(key=lambda f: f[:2])  # a stable sort keeps wgpu's order within a rank
    return [AdapterInfo(i, name, kind, backend, a) for i, (_, _, name, kind, backend, a) in enumerate(found)]


_listed: list[AdapterInfo] | None = None


def listed_adapters() -> list[AdapterInfo]:
    """`adapters()` listed once per process (listing takes seconds on lavapipe).

    Example:
        >>> [(a.index, a.kind, a.backend) for a in listed_adapters()]
        [(0, 'CPU', 'Vulkan'), (1, 'CPU', 'OpenGL')]
    """
    global _listed
    if _listed is None:
        _listed = adapters()
    return _listed


def choose_adapter(which: int | str | None = None) -> AdapterInfo:
    """The adapter at index `which`, the first whose name contains `which`, or the best (None), of the
    adapters listed once per process (`listed_adapters`): the same indices as `Device.wgpu(i)`."""
    listed = listed_adapters()
    if not listed:
        raise DeviceUnavailableError("wgpu sees no adapter (no GPU driver, and no software Vulkan such as "
                                     "Mesa's lavapipe: apt-get install mesa-vulkan-drivers)")
    if which is None:
        return listed[0]
    if isinstance(which, int):
        if not 0 <= which < len(listed):
            raise DeviceUnavailableError(f"no wgpu adapter {which}; there are {len(listed)}: "
                                         f"{', '.join(a.name for a in listed)}")
        return listed[which]
    for a in listed:
        if which.lower() in a.name.lower():
            return a
    raise DeviceUnavailableError(f"no wgpu adapter named like {which!r}; found {', '.join(a.name for a in listed)}")


_availability: tuple | None = None


def wgpu_available() -> tuple[bool, str]:
    """(True, "") when wgpu-py and at least one adapter are here, else (False, why); found once per
    process (listing adapters takes seconds on lavapipe)."""
    global _availability
    if _availability is None:
        _availability = _probe()
    return _availability


def _probe() -> tuple[bool, str]:
    try:
        choose_adapter()
    except DeviceUnavailableError as e:
        return False, str(e)
    except Exception as e:  # wgpu-native missing or broken (no libvulkan, a bad driver)
        return False, f"wgpu cannot list adapters: {str(e).strip()[:300]}"
    return True, ""


# ----------------------------------------------------------------------------------------------
# Device arrays

class WgpuArray(DeviceArray):
    """An array in a slice of the runtime's memory pool (storage buffers), given back when the array and
    all its views are dropped. NumPy's metadata (see `DeviceArray`); bools are stored as u32 words.

    Example:
        >>> a = rt.to_device(np.ones((2, 3), np.float32))
        >>> a.shape, a.T.numpy().sum()
        ((2, 3), 6.0)
    """

    def __init__(self, runtime: "WgpuRuntime", shape: tuple, dtype) -> None:
        super().__init__(runtime, shape, dtype)
        word = storage_dtype(self.dtype).itemsize
        self.memory = runtime.reserve(self.size * word, f"an array of {self.shape} {self.dtype}")
        self._finalizer = weakref.finalize(self, runtime.retire, self.memory)

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the queued work that writes it)."""
        lo, n = host_span(self)
        if n == 0:
            return np.empty(self.shape, self.dtype)
        word = storage_dtype(self.dtype)
        scale = word.itemsize // self.itemsize
        raw = self.runtime.read(self.memory.buffer, self.memory.offset + (self.offset + lo) * scale, n * scale)
        flat = np.frombuffer(raw, word).astype(self.dtype) if word != self.dtype else np.frombuffer(raw, self.dtype)
        return np.lib.stride_tricks.as_strided(flat[-lo // self.itemsize:], self.shape, self.strides).copy()

    def __repr__(self) -> str:
        return f"WgpuArray(shape={self.shape}, dtype={self.dtype}, adapter={self.runtime.adapter_name!r})"


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """How elements of `dtype` sit in a buffer: bools, u8 as u32 words, i8, i16 as i32 words (emulated,
    see targets/wgsl.py), the rest as themselves."""
    return _WORDS.get(dtype, dtype)


_WORDS = {np.dtype(np.bool_): np.dtype(np.uint32), np.dtype(np.uint8): np.dtype(np.uint32),
          np.dtype(np.int8): np.dtype(np.int32), np.dtype(np.int16): np.dtype(np.int32)}


@dataclass
class CompiledWgslKernel:
    """A compute pipeline and what a launch needs to bind its arguments."""

    pipeline: object
    layout: object       # the bind group layout: arrays in parameter order, then the info buffer
    name: str
    params: list
    info: wgsl_target.InfoLayout
    written: list        # per parameter: does the kernel store to (or atomically update) it?
    source: str


# ----------------------------------------------------------------------------------------------
# The runtime

class WgpuRuntime(Specializing, Runtime):
    """Compiles cube kernels to WGSL and runs them on one wgpu adapter (see the module docstring)."""

    ARRAY = WgpuArray
    target = "wgsl"
    TARGET_ERRORS = (wgsl_target.WgslTargetError,)  # kernels WGSL cannot express (the backend runs them on the host)
    LIMIT_ERRORS = (WgpuLimitError,)  # kernels this adapter cannot run (the fusion backend runs such blocks op by op)
    # Emulated in 32-bit words and wrapped to their width only at casts and stores (targets/wgsl.py): a
    # fused chain, which keeps intermediates in registers, would skip the wraps. Fusion runs such ops at once.
    UNFUSED_DTYPES = frozenset({"i8", "u8", "i16"})

    def __init__(self, which: int | str | None = None, features: tuple = FEATURES) -> None:
        """`which` as in `choose_adapter`; `features`: the optional ones to use where the adapter has them."""
        self.wgpu = wgpu = wgpu_module()
        chosen = choose_adapter(which)
        self.adapter_name = chosen.name
        adapter = chosen.adapter
        features = [f for f in features if f in adapter.features]
        limits = dict(adapter.limits)
        wanted = {k: limits[k] for k in (
            "max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
            "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
            "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
            "max-compute-workgroups-per-dimension", "max-uniform-buffer-binding-size") if k in limits}
        self.device = adapter.request_device_sync(required_features=features, required_limits=wanted)
        self.features = set(self.device.features)
        self.limits = dict(self.device.limits)  # what the device granted, which is what binds
        self.dtypes = frozenset(("f32", "i32", "u32", "bool", "i8", "u8", "i16") + (("f16",) if "shader-f16" in self.features else ())
                                + (("i64", "u64") if "shader-int64" in self.features else ())
                                + (("f64",) if "shader-f64" in self.features else ()))
        """The dtypes its kernels hold (names): what the WGSL target renders on this adapter."""
        self.caps = wgsl_target.Capabilities(subgroups="subgroup" in self.features,
                                             f16="shader-f16" in self.features, adapter=self.adapter_name,
                                             int64="shader-int64" in self.features, f64="shader-f64" in self.features)
        self.queue = self.device.queue
        self._fence = self.device.create_buffer(size=4, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        self._fence_source = self.device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_SRC)
        self._compiled: dict = {}
        self._lock = threading.RLock()
        self._encoder, self._recorded, self._retired = None, 0, []
        self._source_cache = SourceCache("wgsl")
        self.pool = pool_from_settings(self._allocate, lambda buffer: buffer.destroy())
        self.pool.max_page = min(self.pool.max_page, self.limits.get("max-buffer-size", 1 << 28))

    # -- memory ---------------------------------------------------------------------------------
    def _allocate(self, nbytes: int):
        u = self.wgpu.BufferUsage
        return self.device.create_buffer(size=nbytes, usage=u.STORAGE | u.COPY_SRC | u.COPY_DST)

    def reserve(self, nbytes: int, what: str = "an array"):
        """A pool slice of at least `nbytes` (at least 4: a binding must not be empty)."""
        most = self.limits["max-storage-buffer-binding-size"]
        if nbytes > most:
            raise WgpuLimitError(f"{what} of {nbytes} bytes exceeds the adapter's max_storage_buffer_binding_size "
                                 f"of {most} bytes ({self.adapter_name})")
        return self.pool.reserve(max(4, nbytes))

    def empty(self, shape, dtype) -> WgpuArray:
        """An uninitialized device array."""
        return WgpuArray(self, (shape,) if isinstance(shape, (int, np.integer)) else shape, dtype)

    def to_device(self, a: np.ndarray) -> WgpuArray:
        """A device copy of `a` (C-contiguous, of `a`'s shape: a 0-d array stays 0-d), noting the bounds
        of integer data (`DeviceArray.bounds`)."""
        shape, a = np.shape(a), np.ascontiguousarray(a)  # ascontiguousarray makes 0-d arrays 1-d
        out = self.empty(shape, a.dtype)
        self.write(out.memory.buffer, a.astype(storage_dtype(a.dtype), copy=False), out.memory.offset)
        out.bounds = host_bounds(a)
        return out

    def write_zeros(self, a: WgpuArray) -> None:
        """Queue zeros over the elements of `a` (a C-contiguous array this runtime made)."""
        with self._lock:
            self._pending_encoder().clear_buffer(a.memory.buffer, a.memory.offset, a.memory.size)

    # -- batching -------------------------------------------------------------------------------
    # Launches are recorded into one command encoder and submitted together (a submit costs
    # milliseconds on lavapipe): at a readback, a wait, or every BATCH launches. `queue.write_buffer`
    # runs before the commands of the next submit, so a pool slice is not reused while a recorded
    # command may still read it: freed slices are `retire`d and go back to the pool at the flush.
    BATCH = 64

    def _pending_encoder(self):
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        return self._encoder

    def retire(self, memory) -> None:
        """Give a pool slice back once the work recorded so far is submitted (safe from finalizers)."""
        self._retired.append(memory)  # list.append is atomic

    def flush(self) -> None:
        """Submit the recorded launches, then give the slices retired before them back to the pool."""
        with self._lock:
            retired, self._retired = self._retired, []
            if self._encoder is not None:
                encoder, self._encoder, self._recorded = self._encoder, None, 0
                self.queue.submit([encoder.finish()])
            for memory in retired:
                self.pool.free_later(memory)

    def write(self, buffer, data: np.ndarray, offset: int = 0) -> None:
        """Queue a copy of the bytes of `data` to `buffer` at `offset` (padded to 4 bytes)."""
        if data.nbytes % 4:
            data = np.concatenate([data.view(np.uint8).reshape(-1), np.zeros(4 - data.nbytes % 4, np.uint8)])
        if data.nbytes:
            self.queue.write_buffer(buffer, offset, data)

    def read(self, buffer, offset: int, nbytes: int) -> bytes:
        """`nbytes` of `buffer` from `offset`, after the work queued before this call (a readback map)."""
        if nbytes == 0:
            return b""
        self.flush()
        start = offset // 4 * 4
        stop = -(-(offset + nbytes) // 4) * 4
        return bytes(self.queue.read_buffer(buffer, start, stop - start))[offset - start:offset - start + nbytes]

    def memory_stats(self, reset_peaks: bool = False) -> MemoryStats:
        """The pool's reserved and in-use bytes and their peaks (after submitting what is recorded)."""
        self.flush()
        return self.pool.stats(reset_peaks)

    def memory_cleanup(self) -> int:
        """Give every empty pool page back to the device; returns the bytes released."""
        self.flush()
        return self.pool.cleanup()

    def synchronize(self) -> None:
        """Wait for everything queued so far.

        A copy into a small MAP_READ buffer is queued after the work and the buffer is mapped: the map
        completes only once the queue has run everything before the copy.
        """
        with self._lock:
            self._pending_encoder().copy_buffer_to_buffer(self._fence_source, 0, self._fence, 0, 4)
            self.flush()
            self._fence.map_sync(self.wgpu.MapMode.READ)
            self._fence.unmap()

    def time(self, fn, repeat: int = 20, warmup: int = 3) -> float:
        """Milliseconds per call of `fn()` (which queues work on this runtime), between two waits.

        Example:
            >>> rt.time(lambda: rt.launch(axpy, CubeCount(4), CubeDim(256), (x, y, 2.0), {}))
        """
        for _ in range(warmup):
            fn()
        self.synchronize()
        start = perf_counter()
        for _ in range(repeat):
            fn()
        self.synchronize()
        return (perf_counter() - start) * 1000 / repeat

    # -- compiling ------------------------------------------------------------------------------
    def compile(self, kernel: ir.Kernel, dim: CubeDim) -> CompiledWgslKernel:
        """Optimize, render and build the pipeline of one specialized kernel for cube shape `dim`.

        The WGSL of a kernel is cached on disk (`[compilation] cache_dir`/wgsl) by the hash of its IR,
        the cube shape, the target version and the adapter's capabilities, so a new process skips the
        optimizer; the bindings and info words follow from the parameters, which optimizing keeps.
        """
        self.check_cube(kernel.name, dim, wgsl_target.shared_bytes(kernel))
        key = cache_key(kernel.hash(), "wgsl", wgsl_target.VERSION, f"{dim.x},{dim.y},{dim.z}",
                        repr((self.caps.subgroups, self.caps.f16, self.caps.int64, self.caps.f64)))
        source = cached = self._source_cache.read(key)
        if source is None:
            source = wgsl_target.render(optimize(kernel), dim, self.caps)
        if settings().get("logging", "debug_kernels"):
            print(f"// ---- cube kernel {kernel.name} (cube dim {dim}) ----\n{source}", file=sys.stderr)
        wgpu = self.wgpu
        arrays = [p for p in kernel.params if isinstance(p, ir.Array)]
        written = wgsl_target.written_arrays(kernel)
        most = self.limits["max-storage-buffers-per-shader-stage"]
        if len(arrays) > most:
            raise WgpuLimitError(f"kernel {kernel.name} binds {len(arrays)} arrays, the adapter allows {most} "
                                 f"storage buffers per shader ({self.adapter_name})")
        entries = [{"binding": i, "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": "storage"}}  # all read_write, as targets/wgsl.py declares them
                   for i, p in enumerate(arrays)]
        entries.append({"binding": len(arrays), "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": "uniform"}})
        try:
            module = self.device.create_shader_module(label=kernel.name, code=source)
            layout = self.device.create_bind_group_layout(entries=entries)
            pipeline = self.device.create_compute_pipeline(
                layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                compute={"module": module, "entry_point": wgsl_target.ENTRY})
        except Exception as e:  # wgpu-py raises its own GPUValidationError and friends
            raise WgpuError(f"wgpu refused kernel {kernel.name} (cube dim {dim.x}x{dim.y}x{dim.z}) on "
                            f"{self.adapter_name}: {e}\n---- WGSL ----\n{source}") from None
        if cached is None:
            self._source_cache.write(key, source)  # only source that built a pipeline
        return CompiledWgslKernel(pipeline, layout, kernel.name, kernel.params, wgsl_target.info_layout(kernel),
                                  [p in written for p in kernel.params], source)

    def compile_ir(self, kernel: ir.Kernel, dim: CubeDim) -> CompiledWgslKernel:
        """Compile IR built directly (a fused kernel from `ir.Builder`), remembered by its hash."""
        key = ("ir", kernel.hash(), dim)
        with self._lock:
            if key not in self._compiled:
                self._compiled[key] = self.compile(kernel, dim)
            return self._compiled[key]

    # -- launching ------------------------------------------------------------------------------
    def check_cube(self, name: str, dim: CubeDim, shared: int) -> None:
        """WgpuLimitError naming the kernel when a cube of shape `dim` with `shared` bytes cannot run."""
        lim, problems = self.limits, []
        if dim.total > lim["max-compute-invocations-per-workgroup"]:
            problems.append(f"a cube has {dim.total} units, the adapter allows "
                            f"{lim['max-compute-invocations-per-workgroup']}")
        for axis, size in zip("xyz", (dim.x, dim.y, dim.z)):
            if size > lim[f"max-compute-workgroup-size-{axis}"]:
                problems.append(f"CubeDim.{axis} = {size} exceeds {lim[f'max-compute-workgroup-size-{axis}']}")
        if shared > lim["max-compute-workgroup-storage-size"]:
            problems.append(f"it needs {shared} bytes of workgroup memory, the adapter has "
                            f"{lim['max-compute-workgroup-storage-size']}")
        if problems:
            raise WgpuLimitError(f"cannot run kernel {name} with CubeDim({dim.x}, {dim.y}, {dim.z}) on "
                                 f"{self.adapter_name}: {'; '.join(problems)}")

    def dispatch_shape(self, name: str, count: CubeCount) -> tuple:
        """The workgroups to dispatch for `count` cubes: `count` itself when each dim is within the
        adapter's max_compute_workgroups_per_dimension, else the total folded over x, y, z (the kernel
        recovers its logical position, see targets/wgsl.py); WgpuLimitError naming the kernel when even
        that does not fit."""
        most = self.limits["max-compute-workgroups-per-dimension"]
        if max(count.x, count.y, count.z) <= most:
            return count.x, count.y, count.z
        total = count.x * count.y * count.z
        x = min(total, most)
        y = -(-total // x)
        z = -(-y // most) if y > most else 1
        y = min(y, most)
        if z > most:
            raise WgpuLimitError(f"cannot launch kernel {name} with CubeCount({count.x}, {count.y}, {count.z}) on "
                                 f"{self.adapter_name}: {total} cubes exceed {most}**3")
        return x, y, z

    def launch(self, kfn, count: CubeCount, dim: CubeDim, args: tuple, comptime: dict) -> None:
        """Queue `kfn` over `count` cubes of shape `dim`.

        WgpuArrays are used in place; NumPy arrays are uploaded and, when the kernel writes them,
        read back (this call then waits for the kernel).
        """
        check_count(kfn, args)
        if count.total == 0:
            return
        self.run(self.prepare(kfn, dim, args, comptime), count, args)

    def run(self, compiled: CompiledWgslKernel, count: CubeCount, args: tuple) -> None:
        """Queue a compiled kernel on WgpuArrays, NumPy arrays and scalars, in parameter order."""
        if len(args) != len(compiled.params):
            raise KernelError(f"{compiled.name} takes {len(compiled.params)} arguments, got {len(args)}")
        if count.total == 0:
            return
        shape = self.dispatch_shape(compiled.name, count)
        words = np.zeros(max(4, -(-compiled.info.words // 4) * 4), np.uint32)
        bindings, staged = [], []  # staged: (host array, its pool slice, whether the kernel writes it)
        for i, (p, a) in enumerate(zip(compiled.params, args)):
            if isinstance(p, ir.Array):
                memory, base = self._argument(compiled, i, a, staged)
                bindings.append(memory)
                n, b = compiled.info.arrays[p]
                words[n], words[b] = a.size, base
            else:
                k = compiled.info.scalars[p]
                bits = _bits(a, p.value.type.dtype)
                words[k:k + len(bits)] = bits
        c = compiled.info.count
        words[c:c + 3] = count.x, count.y, count.z
        info = self.device.create_buffer_with_data(data=words, usage=self.wgpu.BufferUsage.UNIFORM)
        # Every array is bound read_write (see targets/wgsl.py), so arguments may share a pool page.
        entries = [{"binding": i, "resource": {"buffer": m.buffer, "offset": m.offset, "size": m.size}}
                   for i, m in enumerate(bindings)]
        entries.append({"binding": len(bindings), "resource": {"buffer": info, "offset": 0, "size": info.size}})
        with self._lock:
            group = self.device.create_bind_group(layout=compiled.layout, entries=entries)
            compute = self._pending_encoder().begin_compute_pass()
            compute.set_pipeline(compiled.pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(*shape)
            compute.end()
            self._recorded += 1
            if self._recorded >= self.BATCH or any(written for _, _, written in staged):
                self.flush()  # a staged NumPy output is read back right below
        for a, memory, written in staged:
            if written:
                lo, n = host_span(a)
                word = storage_dtype(a.dtype)
                raw = np.frombuffer(self.read(memory.buffer, memory.offset, n // a.itemsize * word.itemsize), word)
                _host_bytes(a, lo, n)[...] = raw.astype(a.dtype, copy=False).view(np.uint8)
            self.retire(memory)

    def _argument(self, compiled: CompiledWgslKernel, i: int, a, staged: list) -> tuple:
        """(pool slice to bind, element offset of the first element) for array argument `i`; NumPy
        arrays are uploaded to a temporary slice (read back after the launch when the kernel writes them)."""
        p = compiled.params[i]
        if isinstance(a, WgpuArray) and a.runtime is self and NP_TO_CUBE.get(a.dtype) is p.dtype:
            return a.memory, a.offset // a.itemsize
        if not isinstance(a, np.ndarray) or NP_TO_CUBE.get(a.dtype) is not p.dtype:
            raise KernelError(f"{compiled.name}: argument {p.name!r} must be an array of {p.dtype.name}, got "
                              f"{getattr(a, 'dtype', type(a).__name__)} (a WgpuArray of this adapter or a NumPy array)")
        check_array(compiled.name, p, a, compiled.written[i])
        lo, n = host_span(a)
        word = storage_dtype(a.dtype)
        memory = self.reserve(n // a.itemsize * word.itemsize, f"argument {p.name!r} of kernel {compiled.name}")
        if n:
            self.write(memory.buffer, _host_bytes(a, lo, n).view(a.dtype).astype(word, copy=False), memory.offset)
        staged.append((a, memory, compiled.written[i]))
        return memory, -lo // a.itemsize


def _host_bytes(a: np.ndarray, lo: int, n: int) -> np.ndarray:
    """The `n` bytes of memory under `a` starting `lo` bytes from its first element, as a uint8 view."""
    base = a.__array_interface__["data"][0] + lo
    return np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * n).from_address(base)) if n else np.empty(0, np.uint8)


def _bits(value, dtype) -> tuple:
    """The 32-bit words a scalar parameter travels in, as targets/wgsl.py reads them: one (f16 as f32,
    bools as 0/1), or the low and high words of a 64-bit scalar."""
    if dtype.itemsize == 8:
        bits = int(np.array(value, dtype.np).view(np.uint64)) if dtype.is_float else int(value) & (2**64 - 1)
        return bits & 0xFFFFFFFF, bits >> 32
    if dtype.is_float:
        return (int(np.float32(value).view(np.uint32)),)
    if dtype is DTYPES["bool"]:
        return (int(bool(value)),)
    return (int(np.array(value).astype(np.int64)) & 0xFFFFFFFF,)


_runtimes: dict = {}
_runtimes_lock = threading.Lock()


def wgpu_runtime(which: int | str | None = None) -> WgpuRuntime:
    """The process-wide runtime of an adapter (see `choose_adapter`), created on first use."""
    with _runtimes_lock:
        if which not in _runtimes:
            ok, why = wgpu_available()
            if not ok:
                raise DeviceUnavailableError(f"the wgpu cube runtime is unavailable: {why}")
            _runtimes[which] = WgpuRuntime(which)
        return _runtimes[which]
