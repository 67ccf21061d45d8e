"""The CPU runtime's compiler probe, disk cache and debug output."""

import numpy as np
import pytest

from ember import cube, settings
from ember.cube.compile_cache import CompileCache
from ember.cube.lang import CubeCount, CubeDim
from ember.cube.runtime import cpu
from ember.cube.runtime.cpu import CpuRuntime


@cube.kernel
def add_one(x: cube.Array[cube.f32]):
    i = cube.ABSOLUTE_POS
    if i < len(x):
        x[i] = x[i] + 1.0


def run(rt, n=10):
    x = np.arange(n, dtype=np.float32)
    rt.launch(add_one, CubeCount(1), CubeDim(16), (x,), {})
    return x


def test_cpu_available_here():
    ok, reason = cube.cpu_available()
    assert ok and reason == ""


def test_cpu_unavailable_without_a_compiler(monkeypatch):
    monkeypatch.setenv("EMBER_CC", "/nonexistent/ember-cc")
    monkeypatch.setattr(cpu, "_probe", None)
    settings.reload()
    try:
        ok, reason = cube.cpu_available()
        assert not ok and "compiler" in reason
    finally:
        monkeypatch.undo()
        settings.reload()


def test_disk_cache_hits_across_runtimes(tmp_path):
    first = CpuRuntime(CompileCache(tmp_path))
    np.testing.assert_array_equal(run(first), np.arange(10) + 1)
    assert first.cache.builds == 1 and len(list(tmp_path.glob("*.so"))) == 1
    second = CpuRuntime(CompileCache(tmp_path))
    np.testing.assert_array_equal(run(second), np.arange(10) + 1)
    assert second.cache.builds == 0 and second.cache.hits == 1


def test_corrupt_cache_entry_is_rebuilt(tmp_path):
    # Build in one directory to learn the entry's name, then plant garbage under that name in a
    # second directory (overwriting a library this process has loaded would crash it, not test it).
    CpuRuntime(CompileCache(tmp_path / "a")).compile(add_one.specialize((cube.f32,), {}), CubeDim(16))
    (built,) = (tmp_path / "a").glob("*.so")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / built.name).write_bytes(b"\x7fELF this is not a shared library")
    rt = CpuRuntime(CompileCache(tmp_path / "b"))
    with pytest.warns(RuntimeWarning, match=f"{tmp_path / 'b' / built.name} fails its checksum"):
        np.testing.assert_array_equal(run(rt), np.arange(10) + 1)
    assert rt.cache.builds == 1
    assert not list((tmp_path / "b").glob(".*"))  # no temporary files left behind


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "kernels"))
    settings.reload()
    try:
        assert CompileCache().directory == tmp_path / "kernels"
    finally:
        monkeypatch.undo()
        settings.reload()


def test_debug_kernels_prints_source(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EMBER_DEBUG_KERNELS", "1")
    settings.reload()
    try:
        CpuRuntime(CompileCache(tmp_path)).compile(add_one.specialize((cube.f32,), {}), CubeDim(8))
    finally:
        monkeypatch.undo()
        settings.reload()
    err = capsys.readouterr().err
    assert "void ember_kernel" in err and "#define NU 8" in err


def test_vector_math_probe_gives_flags_or_nothing():
    flags = cpu.vector_math_flags(cpu.find_compiler())
    assert flags in ((), ("-DEMBER_VECTOR_MATH", "-lmvec"))


def test_ir_built_directly_compiles_and_runs():
    """The path a fusion layer takes: build a kernel with ir.Builder, compile it, run it."""
    from ember.cube import ir
    from ember.cube.runtime.cpu import cpu_runtime

    b = ir.Builder("fused")
    xs = [b.array_param(name, cube.f32) for name in ("a", "b", "c", "out")]
    i = b.builtin("absolute_pos")
    inside = b.branch(b.binary("lt", i, b.length(xs[3])))
    with b.inside(inside.then):
        a, bb, c = (b.load(x, i) for x in xs[:3])
        b.store(xs[3], i, b.binary("add", b.unary("exp", b.binary("mul", a, bb)), c))
    rt = cpu_runtime()
    compiled = rt.compile_ir(b.kernel, CubeDim(64))
    assert rt.compile_ir(b.kernel, CubeDim(64)) is compiled
    arrays = [np.random.default_rng(0).standard_normal(100).astype(np.float32) for _ in range(3)]
    out = np.empty(100, np.float32)
    rt.run(compiled, CubeCount(2), (*arrays, out))
    np.testing.assert_allclose(out, np.exp(arrays[0] * arrays[1]) + arrays[2], rtol=1e-6)
    import pytest
    with pytest.raises(cube.KernelError, match="f32"):
        rt.run(compiled, CubeCount(2), (*arrays[:2], arrays[2].astype(np.float64), out))


def test_the_parallel_threshold_follows_the_measured_wake_cost_and_the_setting(tmp_path, monkeypatch):
    """A launch spreads its cubes over threads from `ember_parallel_min` elements in its largest array:
    the runtime measures what waking the threads costs and sets every loaded library's threshold to the
    size whose work pays for it (`parallel_min_for`), or to `[cpu] parallel_min`; either way each launch
    computes the same values."""
    assert cpu.parallel_min_for(60.0, 2) == 3000 * 2 * 60 * 2
    assert cpu.parallel_min_for(4.0, 16) == cpu.c_target.PARALLEL_MIN  # cheap wakes: the floor
    assert cpu.parallel_min_for(500.0, 1) == cpu.c_target.PARALLEL_MIN  # one thread: nothing to wake
    rt = CpuRuntime(CompileCache(tmp_path))
    source = rt.prepare(add_one, CubeDim(16), (np.zeros(1, np.float32),), {}).source
    assert "int64_t ember_parallel_min = 32768;" in source and "largest >= ember_parallel_min)" in source
    wake_us, threads = cpu._measured[0]
    assert wake_us >= 0 and threads >= 1 and cpu._parallel_min[0] == cpu.parallel_min_for(wake_us, threads)
    n = 1 << 17
    want = np.arange(n, dtype=np.float32) + 1
    previous = cpu._parallel_min[0]
    try:
        for threshold in (0, 1 << 40):  # every launch spread, none spread
            cpu.set_parallel_min(threshold)
            x = np.arange(n, dtype=np.float32)
            rt.launch(add_one, CubeCount(n // 16), CubeDim(16), (x,), {})
            np.testing.assert_array_equal(x, want)
            assert cpu._thresholds and all(t.value == threshold for t in cpu._thresholds)
        monkeypatch.setenv("EMBER_CPU_PARALLEL_MIN", "12345")
        settings.reload()
        CpuRuntime(CompileCache(tmp_path))
        assert cpu._parallel_min[0] == 12345 and all(t.value == 12345 for t in cpu._thresholds)
    finally:
        monkeypatch.undo()
        settings.reload()
        cpu.set_parallel_min(previous)


def test_launches_inside_unrecorded_are_left_out_of_the_enclosing_record():
    """What an autotuner runs to time its candidates inside a recorded step is not part of the step."""
    from ember.cube.runtime.cpu import cpu_runtime
    rt = cpu_runtime()
    with rt.record_launches() as launches:
        run(rt)
        with rt.unrecorded():
            run(rt)
            run(rt)
        x = run(rt)
    assert len(launches) == 2 and launches[1].args[0] is x
    with rt.unrecorded():  # outside any record: nothing to leave out, nothing breaks
        np.testing.assert_array_equal(run(rt), np.arange(10, dtype=np.float32) + 1)
