"""What the device runtimes (CUDA, wgpu) share about launch arguments: the common part of their device
arrays, argument counts, the dtypes that pick a specialization, and what an array argument must be.

Example:
    >>> check_count(kfn, args)
    >>> key, dtypes, comptime = specialization(kfn, dim, args, comptime, CudaArray)
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import numpy as np

from ...dtype import NpTable
from ..ir import DTYPES
from ..lang import KernelError

NP_TO_CUBE = NpTable(DTYPES.values())


class HostCopyError(TypeError):
    """NumPy was asked to convert a device array (np.asarray and friends): copy it with `.numpy()`."""


class Flags:
    """The two NumPy flags the kernel library reads: `c_contiguous` and `writeable` (always True)."""

    __slots__ = ("c_contiguous",)
    writeable = True

    def __init__(self, c_contiguous: bool) -> None:
        self.c_contiguous = c_contiguous


_CONTIGUOUS, _STRIDED = Flags(True), Flags(False)  # shared by every array: nothing sets a flag


def c_strides(shape: tuple, itemsize: int) -> tuple:
    """The byte strides of a C-contiguous array of `shape`."""
    return _c_layout(tuple(shape), itemsize)[1]


def host_bounds(a: np.ndarray) -> tuple[int, int] | None:
    """(min, max) of an integer host array's values (what a device copy of it may note as its `bounds`);
    None for other dtypes and for empty arrays.

    Example:
        >>> host_bounds(np.array([3, -1, 2])), host_bounds(np.ones(2, np.float32))
        ((-1, 3), None)
    """
    if a.dtype.kind not in "iu" or a.size == 0:
        return None
    return int(a.min()), int(a.max())


def vouch_bounds(a, low: int, high: int) -> None:
    """Note that device array `a`'s values lie in [low, high] (a caller that knows it: the fusion backend
    running an index op whose index its records bound), unless it knows tighter ones; anything else (a
    NumPy array) is left alone."""
    if isinstance(a, DeviceArray) and a.bounds is None:
        a.bounds = (low, high)


@functools.lru_cache(maxsize=4096)
def _c_layout(shape: tuple, itemsize: int) -> tuple:
    """(element count, C-contiguous byte strides) of `shape`, remembered: a training step makes
    thousands of arrays and views of a few hundred shapes."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return math.prod(shape), tuple(reversed(strides))


class ArrayKernels(NamedTuple):
    """The kernel library's functions that a device array's copies and writes run (`copy`, `astype`,
    `a[key] = v`): `cast(x, dtype)`, a C-contiguous converted copy of any strides, and `assign(dst,
    value)`, `dst[...] = value` through `dst`'s strides. The library sits above the runtimes, so it
    installs them (`install_array_kernels`, when `ember.kernels` is imported) and this module
    imports nothing of it."""

    cast: Callable
    assign: Callable


_array_kernels: ArrayKernels | None = None


def install_array_kernels(kernels: ArrayKernels) -> None:
    """Make `kernels` the ones device arrays copy and write with (the kernel library calls this once).

    Example:
        >>> install_array_kernels(ArrayKernels(cast=elementwise.cast, assign=common.assign))
    """
    global _array_kernels
    _array_kernels = kernels


def array_kernels() -> ArrayKernels:
    """The installed `ArrayKernels`; KernelError when the kernel library was never imported."""
    if _array_kernels is None:
        raise KernelError("device array copies and writes run the cube kernel library: import ember.kernels")
    return _array_kernels


class DeviceArray:
    """An array on a device, with NumPy's metadata: a view over one allocation of its runtime.

    `shape`, `dtype`, `itemsize`, `size`, `ndim`, `nbytes`, `strides` (bytes, any sign, 0 where
    broadcast) and `flags.c_contiguous` mean what they mean in NumPy; `offset` is the byte offset of
    element 0 from the start of the allocation (`memory`), which every view shares with its owner
    (`owner` keeps it alive). reshape, transpose, permute, broadcast_to, indexing by ints, slices,
    None and Ellipsis are views: they change metadata only. A runtime's array type (CudaArray,
    WgpuArray) allocates `memory` and reads it back (`numpy()`).

    Example:
        >>> a = rt.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
        >>> a.T.strides, a[:, ::2].shape, a.T.flags.c_contiguous
        ((4, 12), (2, 2), False)
    """

    __array_priority__ = 100  # NumPy defers binary operators to us (which refuse: no host copies by accident)
    # Slots, not a __dict__: a training step keeps thousands of arrays alive across the garbage collector's
    # passes, and each tracked object is walked (a runtime's array type adds its own slots, or a __dict__).
    __slots__ = ("runtime", "_shape", "dtype", "itemsize", "ndim", "size", "nbytes", "strides", "offset", "flags",
                 "owner", "bounds", "__weakref__")

    def __init__(self, runtime, shape: tuple, dtype, strides: tuple | None = None, offset: int = 0) -> None:
        self.runtime = runtime
        self._set(tuple(map(int, shape)), np.dtype(dtype), strides, offset)
        self.owner = None  # the array that owns the memory, for views
        self.bounds: tuple[int, int] | None = None
        """(min, max) of the values, known on the host without reading the device, or None: set by a
        runtime's `to_device` for integer host data (`host_bounds`) and by callers that proved a range
        (`vouch_bounds`); a view keeps its parent's (its values are among them); a write through
        `__setitem__` forgets them. An index op checks an index against them instead of reading it
        back, which would wait for every launch queued before it."""

    def _set(self, shape: tuple, dtype: np.dtype, strides: tuple | None, offset: int) -> None:
        itemsize = dtype.itemsize
        size, dense = _c_layout(shape, itemsize)
        self._shape = shape
        self.dtype = dtype
        self.itemsize = itemsize
        self.ndim = len(shape)
        self.size = size
        self.nbytes = size * itemsize
        if strides is None:
            self.strides, contiguous = dense, True
        else:
            self.strides = strides = tuple(map(int, strides))
            contiguous = strides == dense or size <= 1 or all(
                s == c for s, c, n in zip(strides, dense, shape) if n != 1)
        self.offset = offset
        self.flags = _CONTIGUOUS if contiguous else _STRIDED

    # ---- views -----------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._shape

    @shape.setter
    def shape(self, shape) -> None:
        """In place, as NumPy: AttributeError when the strides cannot express the new shape."""
        strides = _reshape_strides(self, _shape_arg(shape, self.size))
        if strides is None:
            raise AttributeError(f"cannot reshape {self._shape} with strides {self.strides} to {shape} "
                                 f"without copying")
        self._set(_shape_arg(shape, self.size), self.dtype, strides, self.offset)

    def strided(self, shape: tuple, strides: tuple, offset: int | None = None, dtype=None) -> "DeviceArray":
        """A view of the same memory with `shape`, byte `strides` and byte `offset` (default: this one's),
        read as `dtype` (default: this one's; a complex array's pairs are its real parts: backend/cube/complex.py)."""
        v = object.__new__(type(self))
        v.runtime = self.runtime
        v.owner = self if self.owner is None else self.owner
        v.bounds = self.bounds
        self._share(v)
        v._set(tuple(map(int, shape)), self.dtype if dtype is None else np.dtype(dtype), strides,
               self.offset if offset is None else offset)
        return v

    def _share(self, view: "DeviceArray") -> None:
        """Give a new view of this array the runtime's own state (the memory it reads); a view never frees
        it. This default copies a __dict__ and clears its `_finalizer`."""
        state = getattr(self, "__dict__", None)
        if state is not None:
            view.__dict__.update(state)
            view._finalizer = None

    def view(self) -> "DeviceArray":
        """A new view of the same elements (its `shape` may then be set, as in NumPy)."""
        return self.strided(self._shape, self.strides)

    def reshape(self, *shape) -> "DeviceArray":
        """`shape` (one -1 allowed): a view when the strides allow it, else a C-contiguous copy."""
        shape = _shape_arg(shape[0] if len(shape) == 1 else shape, self.size)
        strides = _reshape_strides(self, shape)
        if strides is not None:
            return self.strided(shape, strides)
        return self.copy().strided(shape, c_strides(shape, self.itemsize))

    def transpose(self, *axes) -> "DeviceArray":
        """Dims permuted (reversed when `axes` is empty), as `np.transpose`."""
        axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        axes = tuple(reversed(range(self.ndim))) if not axes else tuple(a % max(self.ndim, 1) for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} do not permute the {self.ndim} dims of {self._shape}")
        return self.strided([self._shape[a] for a in axes], [self.strides[a] for a in axes])

    permute = transpose

    @property
    def T(self) -> "DeviceArray":
        return self.transpose()

    def broadcast_to(self, shape: tuple) -> "DeviceArray":
        """A read-through view broadcast to `shape` (NumPy's rules; stride 0 on broadcast dims)."""
        shape = tuple(int(n) for n in shape)
        pad = len(shape) - self.ndim
        if pad < 0:
            raise ValueError(f"cannot broadcast {self._shape} to {shape}")
        strides = [0] * pad
        for n, have, s in zip(shape[pad:], self._shape, self.strides):
            if have == n:
                strides.append(s)
            elif have == 1:
                strides.append(0)
            else:
                raise ValueError(f"cannot broadcast {self._shape} to {shape}")
        return self.strided(shape, strides)

    def __getitem__(self, key) -> "DeviceArray":
        """Basic indexing (ints, slices, None, Ellipsis) as a view; no fancy indexing on a device."""
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            i = next(j for j, k in enumerate(key) if k is Ellipsis)
            fill = self.ndim - sum(1 for k in key if k is not None and k is not Ellipsis)
            key = key[:i] + (slice(None),) * fill + key[i + 1:]
        shape, strides, offset, d = [], [], self.offset, 0
        for k in key:
            if k is None:
                shape.append(1)
                strides.append(0)
                continue
            if d >= self.ndim:
                raise IndexError(f"too many indices for an array of shape {self._shape}")
            n, s = self._shape[d], self.strides[d]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                count = len(range(start, stop, step))
                shape.append(count)
                strides.append(s * step)
                offset += start * s if count else 0
            elif isinstance(k, (int, np.integer)):
                i = int(k) + n if k < 0 else int(k)
                if not 0 <= i < n:
                    raise IndexError(f"index {int(k)} is out of bounds for dim {d} of size {n}")
                offset += i * s
            else:
                raise IndexError(f"a device array takes ints, slices, None and ... as indices, got "
                                 f"{type(k).__name__} (use the gather kernels)")
            d += 1
        shape += self._shape[d:]
        strides += self.strides[d:]
        return self.strided(shape, strides, offset)

    def __setitem__(self, key, value) -> None:
        """`self[key] = value` on the device (basic indexing; `value` broadcast and converted)."""
        self.bounds = None
        if self.owner is not None:
            self.owner.bounds = None
        array_kernels().assign(self[key], value)

    # ---- copies ------------------------------------------------------------------------------------
    def copy(self) -> "DeviceArray":
        """A C-contiguous copy on the same device (the library's cast kernel reads any strides)."""
        return array_kernels().cast(self, self.dtype)

    def astype(self, dtype, copy: bool = True) -> "DeviceArray":
        """The elements converted to `dtype` on the device (this array when it has it and copy=False)."""
        if np.dtype(dtype) == self.dtype and not copy:
            return self
        return array_kernels().cast(self, dtype)

    def numpy(self) -> np.ndarray:
        """A host copy with this array's shape (waits for the queued work that writes it); each runtime's
        array type reads its memory."""
        raise NotImplementedError(f"{type(self).__name__} has no host copy")

    def item(self):
        """The one element as a Python number (a host copy)."""
        return self.numpy().item()

    def min(self):
        """The smallest element (a host copy; for bounds checks of small index arrays)."""
        return self.numpy().min()

    def max(self):
        """The largest element (a host copy; for bounds checks of small index arrays)."""
        return self.numpy().max()

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def __array__(self, dtype=None, copy=None):
        raise HostCopyError(f"{type(self).__name__} lives on {self.runtime!r}: copy it to the host with .numpy() "
                        f"(NumPy does not convert device arrays implicitly)")

    def __array_function__(self, func, types, args, kwargs):
        impl = _ARRAY_FUNCTIONS.get(func)
        if impl is None:
            return NotImplemented
        return impl(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self._shape}, dtype={self.dtype}, runtime={self.runtime!r})"


def _shape_arg(shape, size: int) -> tuple:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"only one -1 in a shape, got {shape}")
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
        shape = tuple(size // known if n == -1 else n for n in shape)
    if math.prod(shape) != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
    return shape


def _reshape_strides(a: DeviceArray, shape: tuple) -> tuple | None:
    """Byte strides giving `a`'s elements in C order with `shape`, or None when a copy is needed
    (NumPy's no-copy reshape)."""
    if a.size <= 1 or a.flags.c_contiguous:
        return c_strides(shape, a.itemsize)
    old = [(n, s) for n, s in zip(a.shape, a.strides) if n != 1]
    new = [0] * len(shape)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(shape) and oi < len(old):
        np_, op = shape[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= shape[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        new[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            new[k - 1] = new[k] * shape[k]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    last = new[ni - 1] if ni >= 1 else a.itemsize
    for k in range(ni, len(shape)):
        new[k] = last
    return tuple(new)


def _moveaxis(a, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src, dst = [s % a.ndim for s in src], [d % a.ndim for d in dst]
    order = [n for n in range(a.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return a.transpose(order)


def _flip(a, axis=None):
    axes = range(a.ndim) if axis is None else [axis] if isinstance(axis, int) else axis
    axes = {d % a.ndim for d in axes}
    return a[tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(a.ndim))]


_ARRAY_FUNCTIONS = {
    np.moveaxis: _moveaxis,
    np.transpose: lambda a, axes=None: a.transpose(*(() if axes is None else (axes,))),
    np.reshape: lambda a, shape=None, *args, **kw: a.reshape(shape if shape is not None else kw["newshape"]),
    np.broadcast_to: lambda a, shape, subok=False: a.broadcast_to((shape,) if isinstance(shape, int) else shape),
    np.flip: lambda a, axis=None: _flip(a, axis),
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
}


def check_count(kfn, args: tuple) -> None:
    """KernelError naming the runtime parameters when `args` has too many or too few."""
    if len(args) != len(kfn.runtime_params):
        raise KernelError(f"{kfn.__name__} takes {len(kfn.runtime_params)} runtime arguments "
                          f"({', '.join(p.name for p in kfn.runtime_params)}), got {len(args)}")


def specialization(kfn, dim, args: tuple, comptime: dict, device_array: type) -> tuple:
    """(cache key, dtypes, comptime values) of `kfn` launched on `args` with cube shape `dim`.

    Array arguments must be `device_array`s or NumPy arrays of a dtype cube has.
    """
    comptime = kfn.comptime_values(comptime)
    arg_dtypes = []
    for p, a in zip(kfn.runtime_params, args):
        if p.kind != "array":
            arg_dtypes.append(None)
            continue
        if not isinstance(a, (np.ndarray, device_array)):
            raise KernelError(f"{kfn.__name__}: argument {p.name!r} must be a {device_array.__name__} or a NumPy "
                              f"array, got {type(a).__name__}")
        arg_dtypes.append(NP_TO_CUBE.get(a.dtype))
        if arg_dtypes[-1] is None:
            raise KernelError(f"{kfn.__name__}: arrays of {a.dtype} are not supported")
    dtypes = kfn.resolve_dtypes(tuple(arg_dtypes), comptime)
    return (kfn, dtypes, tuple(sorted(comptime.items())), dim), dtypes, comptime


def check_array(name: str, p, a, written: bool) -> None:
    """KernelError when array argument `a` of parameter `p` of kernel `name` cannot be passed: over 2**31
    elements (indices are 32-bit), or a read-only NumPy array the kernel writes."""
    if a.size >= 2**31:
        raise KernelError(f"{name}: arrays over 2**31 elements need 64-bit indices")
    if written and isinstance(a, np.ndarray) and not a.flags.writeable:
        raise KernelError(f"{name}: argument {p.name!r} is written by the kernel but the array is read-only")


class Specializing:
    """The part of a device runtime that compiles each specialization of a kernel once.

    A runtime sets `ARRAY` (its device array type) and has `compile(kernel, dim)`, a `_compiled` dict
    and a `_lock`.
    """

    ARRAY: type = DeviceArray

    def prepare(self, kfn, dim, args: tuple, comptime: dict):
        """The compiled kernel for these arguments, from memory when this key was seen before."""
        key, dtypes, comptime = specialization(kfn, dim, args, comptime, self.ARRAY)
        with self._lock:  # tracing is not thread-safe; compiles are short next to a launch's copies
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiled[key] = self.compile(kfn.specialize(dtypes, comptime), dim)
        return compiled
