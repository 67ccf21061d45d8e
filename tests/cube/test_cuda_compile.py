"""The CUDA target without a GPU: every kernel of the library rendered to CUDA C and compiled by NVRTC.

The kernel variants are collected by calling the library's host functions (and the cube backend's)
with the dtypes, layouts and comptime options the kernel tests use, with `KernelFunction.launch`
replaced by a recorder (so nothing runs; outputs are garbage). Each distinct specialization is then
optimized, rendered and compiled to PTX for sm_90. The tensor-core matmul's tile variants, which only
the CUDA runtime launches, and the slice-assignment kernel of device arrays, are specialized directly;
the tensor-core ones are compiled to CUBIN, so that ptxas checks their inline PTX (wmma, cp.async) too. Every `@cube.kernel` of those modules must be covered. Needs
`cuda-bindings` and `nvidia-cuda-nvrtc`; skipped without them.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pkgutil
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from ember import cube
from ember.cube.kernel import KernelFunction, host_runtime
from ember.kernels import elementwise as ew
from ember.kernels.conv import conv2d
from ember.kernels.indexing import gather, index_add, index_select, scatter
from ember.kernels.matmul import matmul
from ember.kernels import attention, common, fft, matmul_tc, optim, quant_matmul as qm
from ember.kernels.conv_gemm import conv2d_gemm, conv_transpose2d
try:  # unfold/fold are being added to the library as this is written
    from ember.kernels.unfold import fold, unfold
except ImportError:
    fold = unfold = None
from ember.kernels.scan import scan
from ember.kernels.random import randint
from ember.backend.cube.fill import fill
from ember.kernels.norm import layer_norm, norm_grad, rms_norm
from ember.kernels.pool import avg_pool2d, max_pool2d, max_pool2d_grad, max_pool2d_indices
from ember.kernels.random import bits, normal, uniform
from ember.kernels.reduce import OPS as REDUCE_OPS, reduce
from ember.kernels.cross_entropy import cross_entropy
from ember.kernels.softmax import softmax, softmax_grad
from ember.kernels.sort import sort, topk
from ember.cube.passes import optimize
from ember.cube.runtime.cpu import cpu_runtime
from ember.cube.runtime.nvrtc import CudaCompileError, compile_cuda, compile_error_message, nvrtc_available
from ember.cube.targets import cuda as cuda_target

ok, why = nvrtc_available()
if not ok:
    print(f"skipping the CUDA compile tests: {why}")
    pytest.skip(why, allow_module_level=True)

rng = np.random.default_rng(0)
F32, F16, BF16, F64 = np.float32, np.float16, ml_dtypes.bfloat16, np.float64
MAX = next(op for op in REDUCE_OPS if op in ("max", "amax"))


def library_calls() -> list:
    """Host-function calls covering the kernel library's variants (ops x dtypes x layouts)."""
    x = rng.standard_normal((5, 7)).astype(F32)
    ints = rng.integers(0, 9, (5, 7)).astype(np.int32)
    calls = [lambda op=op: ew.unary(op, ints if op == "bitwise_not" else x.T) for op in ew.UNARY_OPS]
    calls += [lambda op=op, t=t: ew.unary(op, x.astype(t)) for op in ("exp", "tanh", "abs", "neg", "sigmoid")
              for t in (F16, BF16, F64)]
    calls += [lambda t=t: ew.cast(x, t) for t in (np.int32, np.int8, np.bool_, F16, BF16, F64, np.int64, np.uint8)]
    calls += [lambda t=t: ew.cast(x.astype(t), F32) for t in (np.int64, np.uint8, np.bool_, F16, BF16, F64)]
    calls += [lambda: ew.cast(np.ones((3, 4, 32), F32).transpose(1, 0, 2), F32)]  # a strided copy of long rows
    a, b = x[:, None, :4], x[:5, :1]
    for op in ew.BINARY_OPS:
        int_op = op.startswith(("bitwise", "left", "right"))
        calls.append(lambda op=op, i=int_op: ew.binary(op, ints[:, None, :4] if i else a, ints[:5, :1] if i else b))
    calls += [lambda op=op: ew.binary(op, ints.astype(np.int64), ints.astype(np.int64))
              for op in ("floor_divide", "remainder", "add", "maximum")]
    calls += [lambda op=op: ew.binary(op, x > 0, x.T.T < 0) for op in ("logical_and", "logical_xor", "add", "mul")]
    calls += [lambda t=t: ew.binary("maximum", x.astype(t), x.astype(t)) for t in (F16, BF16)]
    calls += [lambda: ew.ternary("where", x > 0, x[:1], x[::-1]),
              lambda: ew.ternary("clamp", x, F32(-0.5), F32(0.5))]
    x3 = rng.standard_normal((4, 5, 6)).astype(F32)
    for op in REDUCE_OPS:
        calls += [lambda op=op: reduce(op, x3, 2), lambda op=op: reduce(op, x3.transpose(2, 0, 1), 0)]
        if not op.startswith("arg"):
            calls += [lambda op=op: reduce(op, x3, (0, 2), keepdim=True), lambda op=op: reduce(op, x3)]
    for t in (np.int32, F16, BF16, F64, np.bool_):
        calls += [lambda t=t, op=op: reduce(op, x.astype(t), 1) for op in ("sum", MAX, "argmax", "prod")]
    calls += [lambda t=t: reduce("mean", x.astype(t), 1) for t in (F16, BF16, F64)]
    calls += [lambda: reduce("sum", rng.standard_normal((3, 1000)).astype(F32), 1),
              lambda: reduce("amax", rng.standard_normal((3, 64)).astype(F32), 0)]  # whole cubes of columns
    calls += [lambda op=op, target=target: on_target(target, reduce, op, rng.standard_normal((3, 64)).astype(F32), 1)
              for op in REDUCE_OPS for target in ("cpu", "cuda")]  # rows of at least SHORT_ROW
    calls += [lambda op=op: on_target("cuda", reduce, op, rng.standard_normal((3, 4, 64)).astype(F32), (0, 2))
              for op in ("sum", "var")]  # rows of several runs
    calls += [lambda op=op, t=t, dims=dims: on_target("cuda", reduce, op, x3.astype(t), dims)  # GPU shapes
              for op in REDUCE_OPS for t in (F32, F16) for dims in (2, 0)]
    calls += [lambda log=log, t=t: softmax(x.astype(t), log) for log in (False, True) for t in (F32, F16, F64)]
    calls += [lambda: softmax(rng.standard_normal((8, 5)).astype(F16).T)]
    qkv = [rng.standard_normal((2, n, 8)).astype(F32) for n in (20, 9, 9)]  # fused attention, with its backward
    packed = attention.attention_forward(*qkv, scale=0.3, causal=True, offset=0)
    calls += [lambda t=t, c=c: attention.attention_forward(*(a.astype(t) for a in qkv), scale=0.3, causal=c, offset=1)
              for t, c in ((F32, True), (F16, False), (BF16, True))]
    calls += [lambda fn=fn: fn(*qkv, packed, packed, scale=0.3, causal=True, offset=0)
              for fn in (attention.attention_grad_q, attention.attention_grad_kv)]
    calls += [lambda: attention.columns(packed, 8, F16)]
    # the forward through the scores (CUDA, long sequences): rows of S scores a plane each (S <= 1024), a cube each
    calls += [lambda n=n, c=c, t=t: on_target("cuda", partial(attention.attention_forward_scores, scale=0.3, causal=c,
                                                              offset=0),
                                              *(rng.standard_normal((2, m, 8)).astype(t) for m in (5, n, n)))
              for n in (40, 1500) for c in (False, True) for t in (F32, F64)]
    adam = dict(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, decoupled=True, step=2)  # the optimizer
    calls += [lambda t=t, ams=ams, first=first: optim.adam_update(
        x.astype(t), x.astype(t), np.concatenate([x.astype(t)] * optim.rows(ams)), optim.scalars(t, **adam),
        amsgrad=ams, first=first)
        for t, ams, first in ((F32, False, False), (F32, True, True), (F16, False, False), (BF16, True, False),
                              (F64, False, True))]
    x3d = rng.standard_normal((5, 3, 33)).astype(F64)
    w, bias = np.ones(33, F64), np.zeros(33, F64)
    calls += [lambda: layer_norm(x3d, w, bias), lambda: layer_norm(x3d), lambda: rms_norm(x3d, w),
              lambda: rms_norm(x3d), lambda: layer_norm(x.astype(F16))]
    calls += [lambda t=t, log=log: on_target("cuda", softmax, rng.standard_normal((3, 40)).astype(t), log)
              for t in (F32, F16) for log in (False, True)]  # GPU targets' unit classes (C: one vector)
    calls += [lambda n=n: on_target("cuda", softmax, rng.standard_normal((3, n)).astype(F32)) for n in (3, 7)]
    # rows held in registers (8192: every slot used; 300: masked) and a row past them (three passes)
    calls += [lambda n=n, f=f: on_target("cuda", f, rng.standard_normal((2, n)).astype(F32)) for n in (300, 8192, 9000)
              for f in (softmax, layer_norm)]
    calls += [lambda: on_target("cuda", rms_norm, rng.standard_normal((2, 8192)).astype(BF16), np.ones(8192, BF16))]
    calls += [lambda n=n, log=log: on_target("cuda", softmax_grad, *rng.standard_normal((2, 2, n)).astype(F32), log)
              for n in (300, 8192) for log in (False, True)]  # the GPU ops' backward: a plane, a cube per row
    calls += [lambda x=rng.standard_normal((3, n)).astype(F32), rms=rms:
              on_target("cuda", norm_grad, x, x[0], x, 1e-5, rms) for n in (300, 8192) for rms in (False, True)]
    calls += [lambda n=n: on_target("cuda", layer_norm, rng.standard_normal((3, n)).astype(F32)) for n in (3, 7)]
    calls += [lambda n=n, t=t: on_target("cuda", cross_entropy, rng.standard_normal((3, n)).astype(t),
                                         np.zeros(3, np.int32)) for n, t in ((50257, F32), (300, BF16), (7, F64))]
    calls += [lambda: on_target("cuda", layer_norm, x3d, w, bias), lambda: on_target("cuda", rms_norm, x3d)]
    calls += [lambda t=t: matmul(x.astype(t), x.T.astype(t)) for t in (F32, F16, BF16, F64, np.int32, np.int64)]
    calls += [lambda: matmul(rng.standard_normal((2, 1, 3, 4)).astype(F32), rng.standard_normal((5, 4, 6)).astype(F32)),
              lambda: matmul(x3d[0].T, x3d[1]), lambda: matmul(x[0], x.T)]
    img = rng.standard_normal((2, 6, 9, 8)).astype(F32)
    calls += [lambda: conv2d(img, rng.standard_normal((4, 6, 3, 3)).astype(F32), 1, 1),
              lambda: conv2d(img, rng.standard_normal((6, 2, 3, 2)).astype(F32), (2, 2), (1, 0), (2, 1), 3),
              lambda: conv2d(img.astype(BF16).transpose(0, 1, 3, 2), rng.standard_normal((5, 6, 2, 2)).astype(BF16))]
    for k, s, p, d, ceil in [((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), True),
                             ((3, 2), (2, 1), (1, 0), (2, 1), False)]:
        calls += [lambda k=k, s=s, p=p, d=d, c=ceil: max_pool2d(img[:, :, ::-1], k, s, p, d, c),
                  lambda k=k, s=s, p=p, d=d, c=ceil: max_pool2d_indices(img, k, s, p, d, c),
                  lambda k=k, s=s, p=p, c=ceil: avg_pool2d(img.astype(F64), k, s, p, c),
                  lambda k=k, s=s, p=p, c=ceil: avg_pool2d(img, k, s, p, c, count_include_pad=False)]
    for view, k, s, p, d, ceil in [(img[:, :, :8], (2, 2), (2, 2), (0, 0), (1, 1), False),
                                   (img, (2, 2), (3, 3), (1, 1), (2, 1), True)]:
        grad = rng.standard_normal(max_pool2d(view, k, s, p, d, ceil).shape).astype(F32)
        calls += [lambda v=view, g=grad, k=k, s=s, p=p, d=d, c=ceil: max_pool2d_grad(v, g, k, s, p, d, c)]
    idx = rng.integers(0, 4, (5, 3, 6))
    calls += [lambda t=t, dim=dim: gather(x3.astype(t).transpose(1, 0, 2), idx, dim)
              for t in (F32, np.int64) for dim in (0, 1, 2)]
    calls += [lambda dim=dim: index_select(x3[:, ::-1], np.array([2, 0, 1]), dim) for dim in (0, 1, 2)]
    sidx = rng.integers(0, 4, (4, 8))
    calls += [lambda t=t: scatter(x[:4, :5].astype(t), sidx % 5, x[:4].astype(t)[:, :8].repeat(2, 1)[:, :8], 1, "add")
              for t in (F32, F16, np.int32)]
    calls += [lambda: scatter(x[:6, :3].astype(F64), np.array([[0, 1, 2]]), x[:1, :3].astype(F64), 0),
              lambda: index_add(x[:3], np.array([0, 2, 2, 1]), x[:3, :4], 1)]
    table = rng.standard_normal((6, 20)).astype(F32)  # slices of COLUMNS_MIN or more: a unit per column
    calls += [lambda: index_add(table, np.array([1, 5, 1]), table[:3], 0),
              lambda: index_select(table, np.array([4, 0]), 0)]
    rows = np.argsort(rng.random((3, 40)), 1)[:, :20]  # a plain scatter along the last dim: row by row
    calls += [lambda: scatter(np.zeros((3, 40), F32), rows, x3.reshape(3, -1)[:, :20].astype(F32), 1)]
    calls += [lambda: bits(1000, 3, 5), lambda: uniform(1000, 1, dtype=F64), lambda: uniform((10, 10), 2, low=-2, high=3),
              lambda: normal(1000, 4), lambda: normal(100, 4, dtype=F64)]
    calls += [lambda n=n: sort(rng.standard_normal((3, n)).astype(F32)) for n in (1, 5, 64, 1000, 16384)]
    calls += [lambda: sort(rng.integers(0, 4, (3, 50)).astype(np.int64), descending=True),
              lambda: topk(x, 3), lambda: topk(x, 2, largest=False), lambda: sort(x.astype(F16), 0)]
    calls += [lambda op=op, t=t: scan(op, x3.astype(t), 1) for op in ("cumsum", "cumprod") for t in (F32, np.int64)]
    calls += [lambda t=t: randint((4, 5), 1, 0, -3, 9, t) for t in (np.int32, np.int64)]
    calls += [lambda t=t: fill((3, 4), 2, np.dtype(t)) for t in (F32, np.int64, np.bool_, BF16)]
    calls += [lambda: conv2d_gemm(img, rng.standard_normal((4, 6, 3, 3)).astype(F32), 1, 1),
              lambda: conv_transpose2d(img, rng.standard_normal((6, 2, 3, 3)).astype(F32), 2, 1)]
    if unfold is not None:
        calls += [lambda: unfold(img, (3, 2), (1, 1), (1, 1), (1, 1)),
                  lambda: fold(rng.standard_normal((2, 12, 20)).astype(F32), (5, 6), (2, 2), (1, 1), (0, 0), (1, 1))]
    # the quantized matmul: GEMV (m <= 16: by words, and by bytes where rows are not whole words), slabs and
    # tiles (m > 16), the input gradient's; per-channel int8 and nf4 blocks of 32
    codes = rng.integers(0, 256, (6, 32)).astype(np.uint8)
    for code, width, block in (("int8", 32, 32), ("nf4", 16, 32)):
        qw, qs = codes[:, :width], np.ones((6, 1), F32)
        calls += [lambda m=m, code=code, qw=qw, qs=qs, block=block: qm.quant_matmul(
            rng.standard_normal((m, 32)).astype(F32), qw, qs, None, code=code, block=block, k=32, n=6)
            for m in (1, 17)]
        calls += [lambda code=code, qw=qw, qs=qs, block=block: qm.quant_matmul(
            rng.standard_normal((3, 6)).astype(F32), qw, qs, None, code=code, block=block, k=32, n=6, transpose=True)]
        calls += [lambda code=code, qw=qw, qs=qs, block=block, t=t: qm.tiled(
            rng.standard_normal((17, 6 if t else 32)).astype(F32), qm.weight(qw, qs, None, code, block, 32, 6,
                                                                            cpu_runtime()), transpose=t)
            for t in (False, True)]
    calls += [lambda: qm.quant_matmul(rng.standard_normal((2, 30)).astype(F32), codes[:, :30], np.ones((6, 1), F32),
                                      None, code="int8", block=30, k=30, n=6)]
    calls += [lambda: qm.int_matmul(rng.integers(-128, 128, (5, 12)).astype(np.int8),
                                    rng.integers(-128, 128, (7, 12)).astype(np.int8))]
    # the FFT on a GPU target: Stockham passes of smooth lengths, Bluestein's chirps for a prime one, the
    # real transform's half-length path (even) and its widening (odd); c64 and c128
    for t in (np.complex64, np.complex128):
        for n in (360, 1009):
            z = (rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))).astype(t)
            calls += [lambda z=z, inverse=inverse: on_target("cuda", fft.fft, z, (1,), inverse)
                      for inverse in (False, True)]
        real = np.float32 if t == np.complex64 else F64
        calls += [lambda n=n, real=real: on_target("cuda", fft.rfft, rng.standard_normal((2, n)).astype(real), 1)
                  for n in (64, 9)]
    return calls


def on_target(target: str, fn, *args):
    """`fn(*args)` with launches on NumPy arrays sent to a runtime of `target` (the recorder launches
    nothing; the library reads the target to choose a kernel's shape, e.g. a plane per row on CUDA)."""
    with host_runtime(SimpleNamespace(target=target)):
        return fn(*args)


def library_kernels() -> set:
    """The names of every @cube.kernel in ember.kernels.* and the cube backend's kernels."""
    import ember.kernels as package
    modules = [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]
    modules.append(importlib.import_module("ember.backend.cube.fill"))
    return {v.__name__ for m in modules for v in vars(m).values() if isinstance(v, KernelFunction)}


def device_only_specializations() -> dict:
    """Kernels only device arrays launch, specialized directly: every tile variant of the tensor-core
    matmuls (plane fragments; plane groups, for sm_90a) for bf16, the default tile for f16 (and tf32 for
    fragments: the dtypes change only the matrix instructions, which the default tile covers), and slice
    assignment into device arrays."""
    found = {}
    kfn = common.assign_kernel
    for src, dst, ndim in ((cube.f32, cube.f16, 2), (cube.bool_, cube.i64, 3), (cube.bf16, cube.bf16, 1)):
        comptime = kfn.comptime_values(dict(ndim=ndim))
        dtypes = kfn.resolve_dtypes((src, dst, cube.i32), comptime)
        found[(kfn.__name__, dtypes, tuple(sorted(comptime.items())), cube.CubeDim(256))] = kfn.specialize(dtypes,
                                                                                                        comptime)
    kfn = matmul_tc.matmul_tc_kernel
    for tile in matmul_tc.TILES:
        for t in (cube.bf16,) + ((cube.f16, cube.f32) if tile == matmul_tc.TILES[0] else ()):
            comptime = kfn.comptime_values(dict(T=t, bm=tile.bm, bn=tile.bn, bk=tile.bk, wm=tile.wm, wn=tile.wn,
                                                stages=tile.stages, group=tile.group))
            dtypes = kfn.resolve_dtypes((t, t, t) + (None,) * 5, comptime)
            key = (kfn.__name__, dtypes, tuple(sorted(comptime.items())), cube.CubeDim(tile.units))
            found[key] = kfn.specialize(dtypes, comptime)
    kfn = matmul_tc.matmul_group_kernel
    for tile in matmul_tc.GROUP_TILES:
        for t in (cube.bf16,) + ((cube.f16,) if tile == matmul_tc.GROUP_TILES[0] else ()):
            comptime = kfn.comptime_values(dict(T=t, bm=tile.bm, bn=tile.bn, stages=tile.stages, group=tile.group))
            dtypes = kfn.resolve_dtypes((t, t, t) + (None,) * 5, comptime)
            found[(kfn.__name__, dtypes, tuple(sorted(comptime.items())), cube.CubeDim(tile.units))] = \
                kfn.specialize(dtypes, comptime)
    return found


def collect_specializations() -> dict:
    """{(kernel, dtypes, comptime, dim): traced IR} for every launch `library_calls` makes."""
    found: dict = {}

    def record(kfn, count, dim, /, *args, **comptime):
        comptime = kfn.comptime_values(comptime)
        arg_dtypes = tuple(ew.cube_dtype(a.dtype) if p.kind == "array" else None
                           for p, a in zip(kfn.runtime_params, args))
        dtypes = kfn.resolve_dtypes(arg_dtypes, comptime)
        key = (kfn.__name__, dtypes, tuple(sorted(comptime.items())), dim)
        if key not in found:
            found[key] = kfn.specialize(dtypes, comptime)

    generate = ew.compiled_kernel

    def record_generated(key, build, dim, runtime):  # the elementwise generator's IR kernels
        program = key[1]
        dtypes = program.inputs + tuple(program.dtype(v) for v in program.outputs)
        found.setdefault(("generated_elementwise", dtypes, (("program", program.text()), ("variant", key[2:])), dim),
                         build())
        return generate(key, build, dim, runtime)

    saved = KernelFunction.launch
    KernelFunction.launch = record
    ew.compiled_kernel = record_generated
    try:
        with np.errstate(all="ignore"):
            for call in library_calls():
                call()
    finally:
        KernelFunction.launch = saved
        ew.compiled_kernel = generate
    found.update(device_only_specializations())
    return found


SPECIALIZATIONS = collect_specializations()
CACHE = None  # where compile_one puts binaries (the test's tmp_path; forked workers inherit it)


def test_the_collection_covers_every_kernel_of_the_library():
    names = {key[0] for key in SPECIALIZATIONS}
    missing = library_kernels() - names
    assert not missing, f"kernels no call of library_calls() launches (add one, so CI compiles them): {missing}"
    assert {"matmul_tc_kernel", "softmax_kernel", "fill_kernel", "scan_kernel"} <= names
    dtypes = {d.name for key in SPECIALIZATIONS for d in key[1]}
    assert {"f32", "f16", "bf16", "f64", "i32", "i64", "u8", "bool", "u32"} <= dtypes
    assert len(SPECIALIZATIONS) > 200


def compile_one(i: int) -> str:
    """"" when the i-th specialization renders and compiles to PTX for sm_90, else what went wrong."""
    key = list(SPECIALIZATIONS)[i]  # an index crosses to the worker: u32/u64 dtypes do not pickle
    name, dtypes, comptime, dim = key
    optimized = optimize(SPECIALIZATIONS[key])
    entry = cuda_target.entry_name(optimized)
    # ptxas checks the inline PTX of a CUBIN; wgmma (plane groups) compiles for sm_90a
    kind = "cubin" if name in ("matmul_tc_kernel", "matmul_group_kernel") else "ptx"
    try:
        binary = compile_cuda(cuda_target.render(optimized, dim), entry, 90, kind=kind, cache_dir=CACHE,
                              specific=cuda_target.uses_group_mma(optimized))
    except CudaCompileError as e:
        return f"{name} {[d.name for d in dtypes]} {dict(comptime)}:\n{e}"
    if kind == "cubin":
        return "" if binary.data[:4] == b"\x7fELF" and entry.encode() in binary.data else f"{name}: no {entry} in the CUBIN"
    if b".target sm_90" not in binary.data or f".entry {entry}(".encode() not in binary.data:
        return f"{name}: the PTX lacks the sm_90 target or the entry {entry}"
    return ""


def test_every_library_kernel_compiles_to_ptx_for_sm90(tmp_path):
    global CACHE
    CACHE = tmp_path
    # Optimizing and NVRTC are CPU-bound and hold the GIL: forked workers use every core.
    with ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("fork")) as pool:
        failures = [f for f in pool.map(compile_one, range(len(SPECIALIZATIONS)), chunksize=8) if f]
    assert not failures, f"{len(failures)} kernels do not compile:\n" + "\n".join(failures[:5])


def test_a_cubin_is_built_and_cached_on_disk(tmp_path):
    kernel = next(iter(SPECIALIZATIONS.values()))
    source = cuda_target.render(optimize(kernel), cube.CubeDim(256))
    name = cuda_target.entry_name(kernel)
    first = compile_cuda(source, name, 90, cache_dir=tmp_path)
    assert first.kind == "cubin" and first.data[:4] == b"\x7fELF"
    assert len(list(tmp_path.glob("*.cubin"))) == 1
    assert compile_cuda(source, name, 90, cache_dir=tmp_path) == first  # read back from the file


def test_compile_errors_name_the_kernel_and_quote_the_line(tmp_path):
    source = 'extern "C" __global__ void ember_bad(float *a) {\n  a[0] = undefined_thing;\n}\n'
    with pytest.raises(CudaCompileError) as info:
        compile_cuda(source, "ember_bad", 90, cache_dir=tmp_path)
    message = str(info.value)
    assert "kernel ember_bad" in message and "undefined_thing" in message
    assert "line 2: a[0] = undefined_thing;" in message
    assert list(tmp_path.iterdir()) == []  # nothing cached


def test_error_message_quotes_each_reported_line():
    log = 'k.cu(2): error: bad thing\nk.cu(9): warning: out of range line\n1 error detected'
    text = compile_error_message("k", "line one\n  line two\n", log)
    assert text.splitlines() == ["NVRTC cannot compile kernel k:", "  k.cu(2): error: bad thing",
                                 "    line 2: line two", "  k.cu(9): warning: out of range line",
                                 "  1 error detected"]


def test_fast_math_uses_the_hardware_approximations_only_when_asked(tmp_path):
    key = next(k for k in SPECIALIZATIONS if k[0] == "generated_elementwise" and " = exp(%0) : f32" in dict(k[2])["program"])
    kernel = optimize(SPECIALIZATIONS[key])
    accurate, fast = cuda_target.render(kernel, key[3]), cuda_target.render(kernel, key[3], fast_math=True)
    assert "expf(" in accurate and "__expf" not in accurate and "__expf(" in fast
    compile_cuda(fast, cuda_target.entry_name(kernel), 90, kind="ptx", cache_dir=tmp_path)
