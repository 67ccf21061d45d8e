"""The fused kernels of the fusion tests rendered to CUDA C and compiled to PTX for sm_90 by NVRTC,
without a GPU (as tests/cube/test_cuda_compile.py does for the kernel library).

The kernels are collected by running the expressions of `test_equality` on the fused CPU device with
its Cube backend's runtime replaced by a recorder that keeps each IR kernel it is asked to compile
(a CPU runtime with CUDA's target name, so the blocks complete). Needs `cuda-bindings` and
`nvidia-cuda-nvrtc`; skipped (with the reason) without them.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember
from conformance.oracle import sample
from ember.cube.passes import optimize
from ember.cube.runtime.cpu import CpuRuntime
from ember.cube.runtime.nvrtc import CudaCompileError, compile_cuda, nvrtc_available
from ember.cube.targets import cuda as cuda_target

from .test_equality import EXPRS, SHAPES, run


class Recorder(CpuRuntime):
    """A CPU runtime that records every IR kernel it compiles.

    Its target is CUDA's, so the codegen chooses the kernel shapes it gives a CUDA runtime (a plane
    per reduced row, several elements per unit); their results on the CPU are not what CUDA computes
    (a plane is one unit there) and are not looked at: this test only compiles."""

    target = "cuda"
    records_launches = False  # no step replay captured here outlives the test (the device is shared)

    def __init__(self) -> None:
        super().__init__()
        self.kernels: dict = {}

    def compile_ir(self, kernel, dim):
        self.kernels[(kernel.hash(), dim)] = (kernel, dim)
        return super().compile_ir(kernel, dim)


def test_fused_kernels_compile_to_ptx_for_sm90(cpu, monkeypatch, tmp_path):
    ok, why = nvrtc_available()
    if not ok:
        pytest.skip(why)
    recorder = Recorder()
    monkeypatch.setattr(ember.debug.fusion_backend(cpu).inner, "runtime", recorder)
    rng = np.random.default_rng(0)
    for dtype, expr in EXPRS.items():
        for shapes in SHAPES[:2] + SHAPES[-2:]:  # flat and line-by-line kernels, broadcast and strided reads
            run(cpu, expr, [sample(s, dtype, rng) for s in shapes])
    kinds = {kernel.name for kernel, _ in recorder.kernels.values()}
    assert kinds == {"fused", "fused_reduce", "fused_columns"} and len(recorder.kernels) >= 20
    failures = []
    for kernel, dim in recorder.kernels.values():
        optimized = optimize(kernel)
        entry = cuda_target.entry_name(optimized)
        try:
            binary = compile_cuda(cuda_target.render(optimized, dim), entry, 90, kind="ptx", cache_dir=tmp_path)
        except CudaCompileError as e:
            failures.append(str(e))
            continue
        if f".entry {entry}(".encode() not in binary.data:
            failures.append(f"{entry}: not in the PTX")
    assert not failures, f"{len(failures)} of {len(recorder.kernels)} fused kernels do not compile:\n" + \
        "\n".join(failures[:3])
