"""Damaged disk caches cost a rebuild and a warning, never a crash or a wrong result.

Each damaged cache is used by a fresh interpreter (a crash inside `dlopen` is then a failed test, not
a dead pytest worker), with its own `EMBER_CACHE_DIR` / `EMBER_AUTOTUNE_DIR` under `tmp_path`, so the
shared cache is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember import settings
from ember.cube import compile_cache
from ember.cube.compile_cache import CompileCache, SourceCache, seal, unseal
from ember.cube.runtime.autotune import device_cache
from ember.cube.runtime.wgpu import wgpu_available
from ember.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

# Prints x * 2 + 1 for x = standard normals (seed, size from argv) computed on the given device.
SCRIPT = """
import sys, numpy as np, ember
device = getattr(ember.Device, sys.argv[1])()
x = np.random.default_rng(int(sys.argv[2])).standard_normal(int(sys.argv[3])).astype(np.float32)
print((ember.tensor(x, device=device) * 2 + 1).numpy().tolist())
"""


def run_fresh(script: str, *args: str, cache: Path, autotune: Path | None = None) -> subprocess.CompletedProcess:
    """`script` in a new interpreter importing this checkout's ember, with its own cache folders."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), EMBER_CACHE_DIR=str(cache),
               EMBER_AUTOTUNE_DIR=str(autotune or cache.parent / "autotune"), PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=300)


def expect_result(proc: subprocess.CompletedProcess, seed: int, n: int) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stderr[-3000:]}"
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    np.testing.assert_allclose(np.array(json.loads(proc.stdout)), x * 2 + 1, rtol=1e-6)


def text_section(blob: bytes) -> tuple[int, int]:
    """(offset, size) of the `.text` section of a little-endian ELF64 file."""
    assert blob[:6] == b"\x7fELF\x02\x01", "not a little-endian ELF64 file"
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name, _, _, _, offset, size in headers:
        if blob[names + name:blob.index(b"\x00", names + name)] == b".text":
            return offset, size
    raise AssertionError("no .text section")


def damage(path: Path, how: str, rng: np.random.Generator) -> None:
    """Truncate `path` to a fraction of its size ("truncate-30") or flip bits in its code ("flip")."""
    blob = bytearray(path.read_bytes())
    if how.startswith("truncate-"):
        path.write_bytes(blob[:len(blob) * int(how.split("-")[1]) // 100])
        return
    offset, size = text_section(bytes(blob)) if blob[:4] == b"\x7fELF" else (0, len(blob))
    for at in rng.integers(offset, offset + size, 16):
        blob[at] ^= 1 << int(rng.integers(8))
    path.write_bytes(blob)


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory) -> Path:
    """A kernel cache filled by one process running `SCRIPT` on the CPU device."""
    cache = tmp_path_factory.mktemp("pristine") / "kernels"
    expect_result(run_fresh(SCRIPT, "cpu", "0", "37", cache=cache), 0, 37)
    assert list(cache.glob("*.so")), "the run built no kernel library"
    return cache


@pytest.mark.parametrize("how", ["truncate-10", "truncate-30", "truncate-50", "flip"])
def test_a_damaged_kernel_library_is_rebuilt_with_a_warning(built_cache, tmp_path, how):
    cache = tmp_path / "kernels"
    shutil.copytree(built_cache, cache)
    libraries = sorted(cache.glob("*.so"))
    rng = np.random.default_rng(len(how))
    for path in libraries:
        damage(path, how, rng)
    proc = run_fresh(SCRIPT, "cpu", "0", "37", cache=cache)
    expect_result(proc, 0, 37)
    for path in libraries:
        assert f"kernel cache entry {path} fails its checksum" in proc.stderr, proc.stderr
        assert unseal(path.read_bytes()) is not None, "the rebuilt entry is sealed"
    proc = run_fresh(SCRIPT, "cpu", "0", "37", cache=cache)  # the rebuilt entries load quietly
    expect_result(proc, 0, 37)
    assert "RuntimeWarning" not in proc.stderr, proc.stderr


@pytest.mark.skipif(not wgpu_available()[0], reason="no wgpu adapter here")
def test_a_damaged_wgsl_entry_is_rebuilt_with_a_warning(tmp_path):
    cache = tmp_path / "kernels"
    expect_result(run_fresh(SCRIPT, "wgpu", "1", "29", cache=cache), 1, 29)
    entries = sorted((cache / "wgsl").glob("*.txt"))
    assert entries, "the run cached no WGSL"
    rng = np.random.default_rng(5)
    for i, path in enumerate(entries):
        damage(path, "truncate-50" if i % 2 else "flip", rng)
    proc = run_fresh(SCRIPT, "wgpu", "1", "29", cache=cache)
    expect_result(proc, 1, 29)
    for path in entries:
        assert f"kernel cache entry {path} fails its checksum" in proc.stderr, proc.stderr


@pytest.mark.parametrize("data", [b"", b"x", b"\x7fELF" + bytes(range(256)) * 3])
def test_seal_detects_every_truncation_and_bit_flip(data):
    blob = seal(data)
    assert unseal(blob) == data
    for cut in range(len(blob)):
        assert unseal(blob[:cut]) is None
    for at in range(0, len(blob), 7):
        flipped = bytearray(blob)
        flipped[at] ^= 0x10
        assert unseal(bytes(flipped)) is None


def test_a_library_is_checked_once_per_process(tmp_path, monkeypatch):
    source = "int ember_seven(void) { return 7; }\n"
    from ember.cube.runtime.cpu import cpu_runtime
    rt = cpu_runtime()
    key = compile_cache.cache_key("seven", rt.cc_version, str(tmp_path))

    def build(path: Path) -> None:
        from ember.cube.runtime.cpu import _compile
        path.with_suffix(".c").write_text(source)
        _compile(rt.cc, path.with_suffix(".c"), path)

    assert CompileCache(tmp_path).load_or_build(key, build, "ember_seven").ember_seven() == 7
    checks = []
    real = compile_cache.read_sealed
    monkeypatch.setattr(compile_cache, "read_sealed", lambda path: checks.append(path) or real(path))
    for _ in range(3):
        assert CompileCache(tmp_path).load(key, "ember_seven").ember_seven() == 7
    assert checks == []  # loaded by this process already, the file unchanged
    path = CompileCache(tmp_path).path(key)
    compile_cache.write_atomic(path, path.read_bytes())  # the same bytes in another file: checked again
    assert CompileCache(tmp_path).load(key, "ember_seven").ember_seven() == 7
    assert checks == [path]


def test_a_damaged_cubin_is_compiled_again_with_a_warning(tmp_path):
    from ember.cube.runtime.nvrtc import compile_cuda, nvrtc_available
    if not nvrtc_available()[0]:
        pytest.skip(nvrtc_available()[1])
    source = 'extern "C" __global__ void ember_twice(float *a) { a[threadIdx.x] *= 2.0f; }\n'
    first = compile_cuda(source, "ember_twice", 90, kind="ptx", cache_dir=tmp_path)
    (path,) = tmp_path.glob("*.ptx")
    damage(path, "truncate-50", np.random.default_rng(0))
    with pytest.warns(RuntimeWarning, match=f"kernel cache entry {path} fails its checksum"):
        again = compile_cuda(source, "ember_twice", 90, kind="ptx", cache_dir=tmp_path)
    assert again == first and unseal(path.read_bytes()) == first.data


MATMUL = """
import numpy as np, ember
rng = np.random.default_rng(3)
a, b = rng.standard_normal((130, 140)), rng.standard_normal((140, 150))
out = (ember.tensor(a, device=ember.Device.cpu()) @ ember.tensor(b, device=ember.Device.cpu())).numpy()
np.testing.assert_allclose(out, a @ b, rtol=1e-9, atol=1e-9)
print("ok")
"""


def test_a_deeply_nested_autotune_cache_is_set_aside_and_matmul_works(tmp_path, monkeypatch, built_cache):
    autotune = tmp_path / "autotune"
    monkeypatch.setenv("EMBER_AUTOTUNE_DIR", str(autotune))
    settings.reload()
    try:
        path = device_cache("cpu").path  # the file a CPU matmul tunes into
    finally:
        monkeypatch.undo()
        settings.reload()
    autotune.mkdir()
    path.write_text("[" * 100_000 + "]" * 100_000)
    shutil.copytree(built_cache, tmp_path / "kernels")
    proc = run_fresh(MATMUL, cache=tmp_path / "kernels", autotune=autotune)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    assert f"autotune cache {path} is unreadable (maximum recursion depth" in proc.stderr, proc.stderr
    assert path.with_suffix(".corrupt").exists()
    assert all(isinstance(v, str) for v in json.loads(path.read_text()).values())  # rebuilt, and valid


@pytest.mark.parametrize("variable, section, make", [
    ("EMBER_CACHE_DIR", "compilation", lambda: CompileCache()),
    ("EMBER_CACHE_DIR", "compilation", lambda: SourceCache("wgsl")),
    ("EMBER_AUTOTUNE_DIR", "autotune", lambda: device_cache("cpu"))])
@pytest.mark.parametrize("below", [False, True])
def test_a_cache_setting_naming_a_file_is_a_config_error(tmp_path, monkeypatch, variable, section, make, below):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    target = blocker / "kernels" if below else blocker
    monkeypatch.setenv(variable, str(target))
    settings.reload()
    try:
        with pytest.raises(ConfigError, match=rf"\[{section}\] cache_dir \(from environment variable "
                                              rf"{variable}\) must name a folder, but {target} is"):
            make()
    finally:
        monkeypatch.undo()
        settings.reload()


def test_a_cache_setting_from_a_file_names_that_file(tmp_path, monkeypatch):
    (tmp_path / "ember.toml").write_text(f'[compilation]\ncache_dir = "{tmp_path / "ember.toml"}"\n')
    monkeypatch.delenv("EMBER_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    settings.reload()
    try:
        with pytest.raises(ConfigError, match=rf"from {tmp_path / 'ember.toml'}\) must name a folder"):
            CompileCache()
    finally:
        monkeypatch.undo()
        settings.reload()
