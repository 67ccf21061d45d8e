"""Disk-cache hits without tracing (manifests keyed before tracing), and that they never go stale."""

import contextlib
import importlib
import sys
import time

import numpy as np
import pytest

from ember import cube
from ember.cube import compile_cache, ir
from ember.cube.compile_cache import CompileCache
from ember.cube.kernel import KernelFunction
from ember.cube.lang import CubeCount, CubeDim
from ember.cube.runtime import cpu
from ember.cube.runtime.cpu import CpuRuntime

KERNEL = """
from ember import cube
from {helpers} import bump

@cube.kernel
def shift(x: cube.Array[cube.f32], y: cube.Array[cube.f32], scale: cube.Comptime[float]):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        y[i] = bump(x[i]) * scale
"""

HELPERS = """
from ember import cube

@cube.function
def bump(v):
    return v + {amount}
"""


def new_process(monkeypatch, *modules):
    """What a fresh interpreter started now would see: no remembered source hashes, modules imported
    anew (files written before now are older than the process)."""
    monkeypatch.setattr(compile_cache, "_stamps", {})
    monkeypatch.setattr(compile_cache, "_file_digests", {})
    monkeypatch.setattr(compile_cache, "_STARTED", time.time() + 0.01)
    for name in modules:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


@pytest.fixture
def kernel_modules(tmp_path, monkeypatch, request):
    """Write a kernel module and its helper module (outside the ember package) and import them."""
    tag = request.node.name.replace("[", "_").replace("]", "_")
    names = (f"ck_kernel_{tag}", f"ck_helpers_{tag}")
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.syspath_prepend(str(src))

    def write(amount: float):
        (src / f"{names[1]}.py").write_text(HELPERS.format(amount=amount))
        (src / f"{names[0]}.py").write_text(KERNEL.format(helpers=names[1]))
        new_process(monkeypatch, *names)
        return importlib.import_module(names[0]).shift

    yield write
    for name in names:
        sys.modules.pop(name, None)


def launch(rt, shift, x, scale=2.0):
    y = np.empty_like(x)
    rt.launch(shift, CubeCount(2), CubeDim(32), (x, y), {"scale": scale})
    return y


def test_warm_process_loads_without_tracing(tmp_path, kernel_modules, monkeypatch):
    x = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    shift = kernel_modules(1.0)
    first = CpuRuntime(CompileCache(tmp_path / "cache"))
    np.testing.assert_allclose(launch(first, shift, x), (x + 1) * 2, rtol=1e-6)
    assert first.cache.builds == 1

    shift = kernel_modules(1.0)  # the same source in a new process
    monkeypatch.setattr(KernelFunction, "_trace", lambda *a: pytest.fail("traced on a disk-cache hit"))
    monkeypatch.setattr(cpu, "optimize", lambda *a: pytest.fail("optimized on a disk-cache hit"))
    second = CpuRuntime(CompileCache(tmp_path / "cache"))
    np.testing.assert_allclose(launch(second, shift, x), (x + 1) * 2, rtol=1e-6)
    assert second.cache.builds == 0 and second.cache.hits == 1
    # Another comptime value is another kernel: it misses (and would trace).
    with pytest.raises(pytest.fail.Exception, match="traced"):
        launch(second, shift, x, scale=3.0)


def test_changed_helper_never_loads_the_old_binary(tmp_path, kernel_modules):
    x = np.random.default_rng(1).standard_normal(50).astype(np.float32)
    cache = tmp_path / "cache"
    shift = kernel_modules(1.0)
    np.testing.assert_allclose(launch(CpuRuntime(CompileCache(cache)), shift, x), (x + 1) * 2, rtol=1e-6)
    shift = kernel_modules(5.0)  # only the helper module changed, in another module than the kernel
    rt = CpuRuntime(CompileCache(cache))
    np.testing.assert_allclose(launch(rt, shift, x), (x + 5) * 2, rtol=1e-6)
    assert rt.cache.builds == 1 and len(list(cache.glob("*.so"))) == 2


@pytest.mark.parametrize("damage", ["garbage", "no_library", "bad_json", "deep_json"])
def test_damaged_manifest_is_rebuilt(tmp_path, kernel_modules, damage):
    x = np.random.default_rng(2).standard_normal(50).astype(np.float32)
    cache = tmp_path / "cache"
    shift = kernel_modules(1.0)
    launch(CpuRuntime(CompileCache(cache)), shift, x)
    (manifest,) = (cache / "cpu-manifests").glob("*.txt")
    if damage == "garbage":  # fails its checksum
        manifest.write_text(manifest.read_text()[:-20])
    elif damage == "no_library":  # a valid entry whose library is gone
        (so,) = cache.glob("*.so")
        so.unlink()
    else:  # a valid checksum over text that is not a manifest (or nests too deep to parse)
        text = "{not json" if damage == "bad_json" else "[" * 100_000 + "]" * 100_000
        manifest.write_text(compile_cache._checksum(text) + "\n" + text)
    shift = kernel_modules(1.0)
    rt = CpuRuntime(CompileCache(cache))
    warns = pytest.warns(RuntimeWarning, match=f"{manifest} fails its checksum") if damage == "garbage" \
        else contextlib.nullcontext()
    with warns:
        np.testing.assert_allclose(launch(rt, shift, x), (x + 1) * 2, rtol=1e-6)
    assert rt.cache.builds == (1 if damage == "no_library" else 0)
    # The entry was rewritten: the next process hits it.
    shift = kernel_modules(1.0)
    rt = CpuRuntime(CompileCache(cache))
    launch(rt, shift, x)
    assert rt.cache.builds == 0 and rt.manifests.hits == 1


def test_keys_before_tracing_cover_what_tracing_reads(kernel_modules):
    shift = kernel_modules(1.0)
    base = shift.disk_key((cube.f32, cube.f32), {"scale": 2.0})
    assert base == shift.disk_key((cube.f32, cube.f32), {"scale": 2.0})
    assert base != shift.disk_key((cube.f64, cube.f64), {"scale": 2.0})
    assert base != shift.disk_key((cube.f32, cube.f32), {"scale": 3.0})
    assert base != shift.disk_key((cube.f32, cube.f32), {"scale": 2})  # 2 and 2.0 trace differently
    assert shift.disk_key((cube.f32, cube.f32), {"scale": object()}) is None  # no exact name

    def factory(amount):
        @cube.kernel
        def closed(x: cube.Array[cube.f32]):
            x[0] = x[0] + amount
        return closed
    assert factory(1.0).disk_key((cube.f32,), {}) is None  # closure values are not in the key


def test_fused_ir_loads_without_optimizing(tmp_path, monkeypatch):
    def build():
        b = ir.Builder("fused_cc")
        x, y = b.array_param("x", cube.f32), b.array_param("y", cube.f32)
        i = b.builtin("absolute_pos")
        inside = b.branch(b.binary("lt", i, b.length(y)))
        with b.inside(inside.then):
            b.store(y, i, b.unary("exp", b.load(x, i)))
        return b.kernel

    new_process(monkeypatch)  # (ember files edited since pytest started would disable early keys)
    x = np.random.default_rng(3).standard_normal(40).astype(np.float32)
    y = np.empty_like(x)
    first = CpuRuntime(CompileCache(tmp_path))
    first.run(first.compile_ir(build(), CubeDim(64)), CubeCount(1), (x, y))
    monkeypatch.setattr(cpu, "optimize", lambda *a: pytest.fail("optimized on a disk-cache hit"))
    second = CpuRuntime(CompileCache(tmp_path))
    y2 = np.empty_like(x)
    compiled = second.compile_ir(build(), CubeDim(64))
    second.run(compiled, CubeCount(1), (x, y2))
    np.testing.assert_allclose(y2, np.exp(x), rtol=1e-6)
    assert second.cache.builds == 0 and "expf" in compiled.source
    with pytest.raises(cube.KernelError, match="f32"):  # the parameters came back from the manifest
        second.run(compiled, CubeCount(1), (x.astype(np.float64), y2))


def test_compiler_probes_are_remembered_per_compiler(tmp_path, monkeypatch):
    from ember import settings
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    settings.reload()
    try:
        cc, calls = cpu.find_compiler(), []

        def probe(text):
            calls.append(text)
            return text
        assert cpu.remembered_probe(cc, "p", lambda: probe("one")) == "one"
        assert cpu.remembered_probe(cc, "p", lambda: probe("two")) == "one"  # from disk
        assert cpu.remembered_probe(cc, "q", lambda: probe("three")) == "three"  # another probe
        assert cpu.remembered_probe(cc, "r", lambda: probe("no"), keep=lambda t: False) == "no"
        assert cpu.remembered_probe(cc, "r", lambda: probe("yes")) == "yes"  # "no" was not kept
        assert calls == ["one", "three", "no", "yes"]
        # The same compiler through another path (a copy: another size/time or path) probes anew.
        import shutil
        other = tmp_path / "cc-copy"
        shutil.copy(cc, other)
        assert cpu.remembered_probe(str(other), "p", lambda: probe("four")) == "four"
    finally:
        monkeypatch.undo()
        settings.reload()


def test_openmp_spin_is_bounded_even_when_the_probe_loads_it_first(tmp_path):
    """libgomp reads its wait policy once, when a library linking it first loads: with a cold probe cache
    that is the OpenMP probe, so `SPIN_ROUNDS` must be set before it; a policy the user set is kept."""
    import os
    import subprocess
    from ember.cube.runtime.cpu import SPIN_ROUNDS
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    env.update(EMBER_CACHE_DIR=str(tmp_path), OMP_DISPLAY_ENV="verbose")
    script = "from ember.cube.runtime import cpu; cpu.cpu_runtime()"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    if "GOMP_SPINCOUNT" not in out.stderr:
        pytest.skip("the compiler's OpenMP runtime is not libgomp (no GOMP_SPINCOUNT to read)")
    assert f"GOMP_SPINCOUNT = '{SPIN_ROUNDS}'" in out.stderr, out.stderr
    env["OMP_WAIT_POLICY"] = "passive"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert "GOMP_SPINCOUNT = '0'" in out.stderr, out.stderr


def test_source_edited_after_start_gives_no_early_key(kernel_modules, monkeypatch):
    """A file modified after the process started may differ from what it imported: no key from it."""
    shift = kernel_modules(1.0)
    assert shift.disk_key((cube.f32, cube.f32), {"scale": 2.0}) is not None
    new_process(monkeypatch)
    monkeypatch.setattr(compile_cache, "_STARTED", 0.0)  # every file is newer than the process
    assert compile_cache.source_stamp(shift.fn.__module__) is None
    assert shift.disk_key((cube.f32, cube.f32), {"scale": 2.0}) is None


def test_a_library_built_by_another_processor_is_not_loaded(tmp_path, kernel_modules, monkeypatch):
    """Libraries are built with -march=native: a cache folder shared with another processor must not
    hand this one its binaries (they could stop on an illegal instruction)."""
    x = np.random.default_rng(4).standard_normal(45).astype(np.float32)
    cache = tmp_path / "cache"
    shift = kernel_modules(1.0)
    with monkeypatch.context() as other:
        other.setattr(compile_cache, "machine_stamp", lambda: "0ther0ne")
        np.testing.assert_allclose(launch(CpuRuntime(CompileCache(cache)), shift, x), (x + 1) * 2, rtol=1e-6)
    shift = kernel_modules(1.0)  # this processor, a new process: the manifest is found, its library not
    rt = CpuRuntime(CompileCache(cache))
    np.testing.assert_allclose(launch(rt, shift, x), (x + 1) * 2, rtol=1e-6)
    assert rt.cache.builds == 1 and rt.manifests.hits == 1
    assert sorted(p.name.split(".")[1] for p in cache.glob("*.so")) == sorted(["0ther0ne", compile_cache.machine_stamp()])
