"""Every cube runtime here against the runtime protocol (`ember/cube/runtime/base.py`), and a few ops
through `CubeBackend(runtime)` on each against the NumPy backend.

The runtimes: the CPU one always (with a C compiler), wgpu where an adapter is (lavapipe in CI), CUDA
where a GPU, its driver and NVRTC are (scripts/gpu_check.sh runs this with -k cuda). `HostSubset`, a
minimal runtime written against the protocol alone (the CPU's kernels, a subset of its dtypes), shows
what a port writes and that the backend needs nothing else.
"""

from __future__ import annotations

import numpy as np
import pytest

from ember import cube
from ember.backend.cube import CubeBackend
from ember.backend.cube.backend import UnsupportedDTypeError
from ember.backend.numpy import NumpyBackend
from ember.kernels.common import grid
from ember.cube.runtime.base import Runtime
from ember.cube.runtime.cpu import cpu_runtime
from ember.cube.runtime.memory_pool import MemoryStats
from ember.dtype import bool_, c64, f32, f64, i32
from ember.errors import DTypeError
from ember.ops import registry
from ember.ops.primitive import Aval
from tolerances import forward

pytestmark = pytest.mark.skipif(not cube.cpu_available()[0], reason=f"no cube C compiler: {cube.cpu_available()[1]}")

NUMPY = NumpyBackend()


class HostSubset(Runtime):
    """A minimal runtime written against the protocol: the CPU runtime's kernels on NumPy arrays, holding
    f32, i32 and bool only (as a port with fewer dtypes would)."""

    target = "cpu"
    ARRAY = np.ndarray
    dtypes = frozenset(("f32", "i32", "bool"))
    adapter_name = "Fake adapter"

    def __init__(self) -> None:
        self.cpu = cpu_runtime()

    def compile(self, kernel, dim):
        return self.cpu.compile(kernel, dim)

    def compile_ir(self, kernel, dim):
        return self.cpu.compile_ir(kernel, dim)

    def launch(self, kfn, count, dim, args, comptime):
        self.cpu.launch(kfn, count, dim, args, comptime)

    def run(self, compiled, count, args):
        self.cpu.run(compiled, count, args)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def to_device(self, host):
        return np.array(host)

    def to_host(self, array):
        return np.array(array)

    def write_zeros(self, array):
        array[...] = 0

    def bounds(self, array):
        return None

    def synchronize(self):
        pass

    def memory_stats(self):
        return MemoryStats(0, 0, 0, 0, 0, 0)

    def memory_cleanup(self):
        return 0


def _runtimes() -> list:
    found = [pytest.param(cpu_runtime, id="cpu"), pytest.param(HostSubset, id="host-subset")]
    from ember.cube.runtime.wgpu import wgpu_available
    if wgpu_available()[0]:
        from ember.cube.runtime.wgpu import wgpu_runtime
        found.append(pytest.param(wgpu_runtime, id="wgpu"))
    from ember.cube.runtime.cuda import cuda_available
    from ember.cube.runtime.nvrtc import nvrtc_available
    if cuda_available()[0] and nvrtc_available()[0]:
        from ember.cube.runtime.cuda import cuda_runtime
        found.append(pytest.param(cuda_runtime, id="cuda"))
    return found


@pytest.fixture(params=_runtimes())
def runtime(request) -> Runtime:
    return request.param()


@cube.kernel
def axpy(x: cube.Array["T"], y: cube.Array["T"], out: cube.Array["T"], a: cube.Scalar["T"], T: cube.Comptime):
    i = cube.ABSOLUTE_POS
    if i < len(out):
        out[i] = a * x[i] + y[i]


def test_a_runtime_without_every_abstract_member_cannot_be_made():
    class Partial(Runtime):
        target = "partial"
        ARRAY = np.ndarray

        def compile(self, kernel, dim):
            return None

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def test_each_runtime_has_the_protocol(runtime, rng):
    assert isinstance(runtime, Runtime) and not type(runtime).__abstractmethods__
    assert runtime.target in ("cpu", "wgsl", "cuda") and isinstance(runtime.adapter_name, str)
    assert {"f32", "i32", "bool"} <= runtime.dtypes <= {"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8",
                                                        "u8", "u32", "u64", "bool"}
    for error in (*runtime.TARGET_ERRORS, *runtime.LIMIT_ERRORS):
        assert issubclass(error, Exception)
    host = rng.standard_normal((3, 5)).astype(np.float32)
    a = runtime.to_device(host)
    assert isinstance(a, runtime.ARRAY) and a.shape == (3, 5) and a.dtype == np.float32
    np.testing.assert_array_equal(runtime.to_host(a), host)
    e = runtime.empty((7,), np.dtype(np.int32))
    assert isinstance(e, runtime.ARRAY) and e.shape == (7,) and e.dtype == np.int32
    runtime.write_zeros(e)
    np.testing.assert_array_equal(runtime.to_host(e), np.zeros(7, np.int32))
    runtime.synchronize()
    assert isinstance(runtime.memory_stats(), MemoryStats) and runtime.memory_cleanup() >= 0
    ints = runtime.to_device(np.array([4, -2, 9], np.int32))
    assert runtime.bounds(ints) in (None, (-2, 9))


@pytest.mark.parametrize("n", [1, 7, 300])
def test_each_runtime_launches_and_runs_a_kernel(runtime, rng, n):
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    dx, dy, out = runtime.to_device(x), runtime.to_device(y), runtime.empty((n,), np.dtype(np.float32))
    count, dim = grid(n)
    runtime.launch(axpy, count, dim, (dx, dy, out, 2.0), {"T": cube.f32})
    np.testing.assert_allclose(runtime.to_host(out), 2 * x + y, rtol=1e-6)
    compiled = runtime.compile_ir(axpy.specialize((cube.f32,) * 4, {"T": cube.f32}), dim)
    again = runtime.empty((n,), np.dtype(np.float32))
    runtime.run(compiled, count, (dx, dy, again, -1.0))
    np.testing.assert_allclose(runtime.to_host(again), y - x, rtol=1e-6)


def test_a_recorded_launch_replays_on_new_arrays(runtime, rng):
    """Where the runtime records launches: the recorded one, bound with its three arrays open, computes
    on arrays given at the replay; `address` finds its arrays."""
    if not runtime.records_launches:
        assert runtime.bind(None, ()) is None and runtime.address(runtime.empty((1,), np.float32)) is None
        return
    n = 45
    x, y = (runtime.to_device(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
    out = runtime.empty((n,), np.dtype(np.float32))
    count, dim = grid(n)
    with runtime.record_launches() as launches:
        runtime.launch(axpy, count, dim, (x, y, out, 3.0), {"T": cube.f32})
    assert len(launches) == 1 and [runtime.address(a) for a in launches[0].args[:3]] == \
        [runtime.address(a) for a in (x, y, out)]
    bound = runtime.bind(launches[0], (0, 1, 2))
    hx, hy = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out2 = runtime.empty((n,), np.dtype(np.float32))
    bound.replay([runtime.to_device(hx), runtime.to_device(hy), out2])
    np.testing.assert_allclose(runtime.to_host(out2), 3 * hx + hy, rtol=1e-6)
    assert runtime.shares_memory(out2, out2[1:]) and not runtime.shares_memory(out, out2)


def _same(backend: CubeBackend, name: str, arrays: list, params: dict, out: Aval) -> None:
    got = backend.execute(registry[name], [backend.from_host(a) for a in arrays], params, out)
    assert isinstance(got, backend.runtime.ARRAY), (name, type(got))
    want = NUMPY.execute(registry[name], arrays, params, out)
    got = backend.to_host(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, got.dtype)
    rtol, atol = forward(out.dtype) if out.dtype.is_float else (0, 0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (2, 3, 17)])
def test_ops_through_each_runtime_match_numpy(runtime, rng, shape):
    """Elementwise (broadcast), a reduction, a matmul, and the creation rows (made on the runtime)."""
    backend = CubeBackend(runtime)
    x = rng.standard_normal(shape).astype(np.float32)
    row = rng.standard_normal(shape[-1:]).astype(np.float32)
    _same(backend, "exp", [x], {}, Aval(shape, f32))
    _same(backend, "add", [x, row], {}, Aval(shape, f32))
    _same(backend, "sum", [x], {"dims": (len(shape) - 1,), "keepdim": False}, Aval(shape[:-1], f32))
    m = rng.standard_normal((shape[-1], 3)).astype(np.float32)
    _same(backend, "matmul", [x, m], {}, Aval(shape[:-1] + (3,), f32))
    _same(backend, "full", [], {"shape": shape, "value": 2.5, "dtype": f32}, Aval(shape, f32))
    _same(backend, "randint", [], {"shape": shape, "dtype": i32, "low": -4, "high": 9, "seed": 3, "offset": 1},
          Aval(shape, i32))
    _same(backend, "uniform", [], {"shape": shape, "dtype": f32, "low": -1.0, "high": 2.0, "seed": 5, "offset": 0},
          Aval(shape, f32))
    assert not backend.fallbacks & {"exp", "add", "sum", "matmul", "full", "randint", "uniform"}


def test_creation_rows_and_functions_make_their_arrays_on_the_runtime(runtime, monkeypatch):
    """`runtime=` reaches the kernels: nothing is made on the host and copied over (`to_device`)."""
    from ember.backend.cube.fill import fill
    from ember.kernels import random

    def no_copy(host):
        raise AssertionError("a creation op made its array on the host")
    backend = CubeBackend(runtime)
    monkeypatch.setattr(runtime, "to_device", no_copy)
    rows = {"full": {"value": -1.5}, "uniform": {"low": 0.0, "high": 1.0, "seed": 1, "offset": 0},
            "normal": {"mean": 0.0, "std": 1.0, "seed": 2, "offset": 0},
            "randint": {"low": 0, "high": 5, "seed": 3, "offset": 0}}
    for name, params in rows.items():
        dtype = i32 if name == "randint" else f32
        got = backend.execute(registry[name], [], {"shape": (5, 3), "dtype": dtype, **params}, Aval((5, 3), dtype))
        assert isinstance(got, runtime.ARRAY) and got.shape == (5, 3), name
    assert isinstance(random.uniform((4,), 0, runtime=runtime), runtime.ARRAY)
    made = fill((2, 3), 7, np.dtype(np.int32), runtime=runtime)
    assert isinstance(made, runtime.ARRAY)
    np.testing.assert_array_equal(runtime.to_host(made), np.full((2, 3), 7, np.int32))


def test_a_dtype_the_runtime_cannot_hold_is_named_with_the_op_and_the_device():
    """Checked before any kernel runs, for the inputs and the output (a runtime that holds f32, i32, bool)."""
    backend = CubeBackend(HostSubset())
    assert backend.name == "cube-cpu" and set(backend.dtypes) == {f32, i32, bool_, c64}  # c64: f32 pairs
    x = np.ones(3, np.float64)
    with pytest.raises(UnsupportedDTypeError, match=r"add: f64 cannot be held by the cube kernels of Fake "
                                                     r"adapter \(they hold f32, i32, bool, c64\)"):
        backend.execute(registry["add"], [x, x], {}, Aval((3,), f64))
    y = np.ones(3, np.float32)
    with pytest.raises(UnsupportedDTypeError, match="cast: f64 cannot be held"):  # the output's dtype too
        backend.execute(registry["cast"], [y], {"dtype": f64}, Aval((3,), f64))
    with pytest.raises(UnsupportedDTypeError, match="a tensor of f64 cannot be held"):
        backend.from_host(x)
    assert issubclass(UnsupportedDTypeError, DTypeError)
