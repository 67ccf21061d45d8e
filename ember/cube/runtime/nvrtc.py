"""CUDA C to PTX or CUBIN with NVRTC (through `cuda-bindings`), cached on disk. No GPU needed.

`compile_cuda(source, name, arch)` returns a `Binary`: a CUBIN for `sm_XX` when this NVRTC can build
one for that architecture (the driver loads it as is), else PTX for `compute_XX` (the driver
compiles it when loading). Binaries live in the kernel cache directory (`EMBER_CACHE_DIR`, see
`compile_cache.py`) under a key made of the source's hash, the architecture, NVRTC's version and the
options, written to a temporary name and renamed, like the C target's libraries.

A compile error raises `CudaCompileError` naming the kernel, with NVRTC's log and, under each
message, the source line it points at.

Example:
    >>> binary = compile_cuda(render(kernel, CubeDim(256)), "ember_axpy", arch=90)
    >>> binary.kind, binary.data[:4]
    ('cubin', b'\\x7fELF')
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import DeviceError, DeviceUnavailableError
from ..compile_cache import FORMAT, cache_key, default_cache_dir, read_sealed, write_sealed

OPTIONS = ("--std=c++17", "-lineinfo")
INSTALL = "pip install 'ember[cuda]' (cuda-bindings and nvidia-cuda-nvrtc)"


class CudaCompileError(DeviceError):
    """NVRTC rejected a kernel's CUDA C: the message names the kernel and quotes the offending lines."""


@dataclass(frozen=True)
class Binary:
    """A compiled module: `kind` is "cubin" or "ptx"; `data` is what cuModuleLoadData takes."""

    kind: str
    data: bytes
    arch: int


def nvrtc_module():
    """`cuda.bindings.nvrtc`, or DeviceUnavailableError naming the extra that installs it."""
    try:
        from cuda.bindings import nvrtc
        _check(nvrtc, nvrtc.nvrtcVersion(), "nvrtcVersion")
    except ImportError:
        raise DeviceUnavailableError(f"compiling CUDA kernels needs cuda-bindings: {INSTALL}") from None
    except Exception as e:  # the bindings are there but libnvrtc is not
        raise DeviceUnavailableError(f"NVRTC cannot be loaded ({str(e).strip()[:200]}): {INSTALL}") from None
    return nvrtc


def nvrtc_available() -> tuple[bool, str]:
    """(True, "") when NVRTC can compile here, else (False, why)."""
    try:
        nvrtc_module()
    except DeviceUnavailableError as e:
        return False, str(e)
    return True, ""


def nvrtc_version() -> str:
    """NVRTC's version, e.g. "13.5"."""
    nvrtc = nvrtc_module()
    _, major, minor = _check(nvrtc, nvrtc.nvrtcVersion(), "nvrtcVersion")
    return f"{major}.{minor}"


def cubin_archs() -> tuple[int, ...]:
    """The `sm_XX` this NVRTC builds CUBINs for (e.g. 75, 80, ..., 90, 100, 120)."""
    nvrtc = nvrtc_module()
    _, archs = _check(nvrtc, nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs)


def compile_cuda(source: str, name: str, arch: int, kind: str = "auto", options: tuple = (),
                 cache_dir: Path | str | None = None, specific: bool = False) -> Binary:
    """Compile `source` (whose kernel is called `name`) for compute capability `arch` (90 = 9.0).

    `kind` is "cubin", "ptx", or "auto" (CUBIN where this NVRTC supports `arch`, else PTX). `specific`
    compiles for the architecture-specific features (`sm_90a`: wgmma), which run on that one only.
    """
    if kind == "auto":
        kind = "cubin" if arch in cubin_archs() else "ptx"
    if kind not in ("cubin", "ptx"):
        raise ValueError(f"kind must be 'cubin', 'ptx' or 'auto', got {kind!r}")
    options = OPTIONS + tuple(options)
    key = cache_key(hashlib.sha256(source.encode()).hexdigest(), "nvrtc", nvrtc_version(), kind,
                    f"{arch}{'a' if specific else ''}", " ".join(options))
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = directory / f"{key}.{FORMAT}.{kind}"
    data = read_sealed(path)
    if data:
        return Binary(kind, data, arch)
    data = _compile(source, name, f"{arch}{'a' if specific else ''}", kind, options)
    write_sealed(path, data)
    return Binary(kind, data, arch)


def _compile(source: str, name: str, arch: str, kind: str, options: tuple) -> bytes:
    nvrtc = nvrtc_module()
    target = f"--gpu-architecture={'sm' if kind == 'cubin' else 'compute'}_{arch}"
    opts = [o.encode() for o in (target, *options)]
    _, prog = _check(nvrtc, nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []),
                     "nvrtcCreateProgram")
    try:
        result = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if int(result) != 0:
            raise CudaCompileError(compile_error_message(name, source, _log(nvrtc, prog)))
        if kind == "cubin":
            _, size = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            data = b" " * size
            _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, data), "nvrtcGetCUBIN")
        else:
            _, size = _check(nvrtc, nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            data = b" " * size  # PTX comes NUL-terminated, as cuModuleLoadData wants it
            _check(nvrtc, nvrtc.nvrtcGetPTX(prog, data), "nvrtcGetPTX")
        return data
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(nvrtc, prog) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    return log.rstrip(b"\x00 ").decode(errors="replace")


def compile_error_message(name: str, source: str, log: str) -> str:
    """NVRTC's log with the source line quoted under every `name.cu(LINE): ...` message."""
    lines = source.splitlines()
    out = [f"NVRTC cannot compile kernel {name}:"]
    for entry in log.splitlines():
        out.append("  " + entry)
        m = re.match(rf"{re.escape(name)}\.cu\((\d+)\): ", entry)
        if m and 0 < int(m.group(1)) <= len(lines):
            out.append(f"    line {m.group(1)}: {lines[int(m.group(1)) - 1].strip()}")
    return "\n".join(out)


def _check(nvrtc, result: tuple, call: str) -> tuple:
    """`result` (an NVRTC call's tuple) when its status is success, else CudaCompileError."""
    status = result[0]
    if int(status) != 0:
        _, text = nvrtc.nvrtcGetErrorString(status)
        raise CudaCompileError(f"{call} failed: {text.decode() if isinstance(text, bytes) else text}")
    return result

