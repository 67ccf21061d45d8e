#!/usr/bin/env bash
# Check cube's CUDA target on a machine with an NVIDIA GPU, and time a few kernels.
#
#   scripts/gpu_check.sh            # from anywhere; runs ember from this checkout (PYTHONPATH)
#   OUT=/some/dir scripts/gpu_check.sh
#
# Needs python with numpy, ml_dtypes, pytest, hypothesis, cuda-bindings and nvidia-cuda-nvrtc
# (torch too, for the matmul comparison; optional). No network. Steps:
#   1. environment: GPU, driver, Python and package versions;
#   2. the CUDA tests (tests/cube/test_cuda_*.py): rendering, NVRTC, runtime, and on-GPU launches;
#   3. the kernel-library tests of tests/cube run with every kernel launched on the GPU (NumPy in and
#      out, compared with NumPy as the tests do): `host_runtime(cuda_runtime())` sends them there;
#   4. timings: elementwise bandwidth vs a device-to-device copy, a row reduction, matmul vs torch.
# Results go to $OUT (else ./gpu-results): environment.txt, *.log, junit-*.xml, timings.json,
# summary.txt. The exit status is non-zero when a step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
RESULTS="${OUT:-./gpu-results}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
PY="${PYTHON:-python3}"
# A fresh kernel cache: every kernel is compiled by this run's NVRTC.
export EMBER_CACHE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ember-gpu-check.XXXXXX")"
failed=()

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv 2>&1
  "$PY" - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("numpy", "ml_dtypes", "pytest", "cuda.bindings", "torch", "cupy"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as e:
        print(name, "missing:", e)
from ember.cube.runtime.nvrtc import nvrtc_available, nvrtc_version
from ember.cube.runtime.cuda import cuda_available
print("nvrtc", nvrtc_version() if nvrtc_available()[0] else nvrtc_available()[1])
print("cuda_available", cuda_available())
EOF
} 2>&1 | tee "$RESULTS/environment.txt"

echo "== CUDA tests"
"$PY" -m pytest -q -p no:cacheprovider tests/cube/test_cuda_*.py --junitxml="$RESULTS/junit-cuda.xml" \
  2>&1 | tee "$RESULTS/cuda-tests.log" || failed+=("cuda tests")

echo "== kernel-library tests on the GPU"
"$PY" - "$RESULTS" <<'EOF' 2>&1 | tee "$RESULTS/library-on-gpu.log" || failed+=("library tests on the GPU")
import sys
import pytest
from ember.cube.kernel import host_runtime
from ember.cube.runtime.cuda import cuda_runtime

tests = ["tests/cube/" + t for t in ("test_elementwise.py", "test_reduce.py", "test_matmul.py",
                                     "test_conv_pool.py", "test_indexing.py", "test_random.py", "test_sort.py",
                                     "test_frontend.py", "test_passes.py")]
# Every @cube.kernel launch on NumPy arrays, including those inside the host functions, runs on the GPU.
with host_runtime(cuda_runtime()):
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", f"--junitxml={sys.argv[1]}/junit-library.xml", *tests]))
EOF

echo "== timings"
"$PY" - "$RESULTS" <<'EOF' 2>&1 | tee "$RESULTS/timings.log" || failed+=("timings")
import importlib, json, sys
import numpy as np
from ember import cube
# The modules, not the host functions of the same names that ember.cube.kernels exports.
elementwise, matmul, reduce = (importlib.import_module(f"ember.cube.kernels.{m}")
                               for m in ("elementwise", "matmul", "reduce"))
from ember.cube.runtime.cuda import cuda_runtime

rt = cuda_runtime()
f32 = cube.f32
results = {}


def record(name, ms, **extra):
    results[name] = dict(ms=round(ms, 4), **extra)
    print(f"{name:34s} {ms:9.4f} ms  " + "  ".join(f"{k}={v}" for k, v in extra.items()))


# Elementwise bandwidth: out = a + b over 64 Mi f32 (768 MiB moved), vs a device-to-device copy.
n = 64 << 20
a, b, out = (rt.to_device(np.random.default_rng(0).standard_normal(n, np.float32)) for _ in range(3))
layout = rt.to_device(np.array([n, 1, 1], np.int32))
count, dim = cube.CubeCount(-(-n // 256)), cube.CubeDim(256)
add = lambda: rt.launch(elementwise.binary_kernel, count, dim, (a, b, out, layout),
                        dict(op="add", T=f32, ndim=1, dense_a=True, dense_b=True))
exp = lambda: rt.launch(elementwise.unary_kernel, count, dim, (a, out, layout),
                        dict(op="exp", T=f32, ndim=1, dense=True))
for name, fn, moved in (("elementwise add f32 64Mi", add, 3 * 4 * n), ("elementwise exp f32 64Mi", exp, 2 * 4 * n),
                        ("device-to-device copy 256MiB", lambda: rt.copy(a, out), 2 * 4 * n)):
    ms = rt.time(fn)
    record(name, ms, GBps=round(moved / ms / 1e6, 1))
for x in (a, b, out):
    x.free()

# Row reduction: sum over the last dim of (4096, 16384) f32.
rows, cols = 4096, 16384
x = rt.to_device(np.random.default_rng(1).standard_normal((rows, cols), np.float32))
y = rt.empty(rows, np.float32)
kept, red = rt.to_device(np.array([rows, cols], np.int32)), rt.to_device(np.array([cols, 1], np.int32))
total = lambda: rt.launch(reduce.reduce_kernel, cube.CubeCount(rows), cube.CubeDim(256), (x, y, kept, red, cols),
                          dict(op="sum", T=f32, kdim=1, rdim=1, dense=True, units=256, correction=0))
ms = rt.time(total)
record("reduce sum f32 4096x16384 rows", ms, GBps=round(4 * rows * cols / ms / 1e6, 1),
       max_error=float(np.abs(y.numpy() - x.numpy().sum(1, dtype=np.float64)).max()))
x.free()

# Matmul f32 4096^3: cube's register-blocked kernel vs torch (cuBLAS, TF32 off).
m = k = nn = 4096
A = np.random.default_rng(2).standard_normal((m, k), np.float32)
B = np.random.default_rng(3).standard_normal((k, nn), np.float32)
da, db, dc = rt.to_device(A), rt.to_device(B), rt.empty((m, nn), np.float32)
batch = rt.to_device(np.zeros(0, np.int32))
rows_, units = matmul.ROWS, matmul.UNITS
mm = lambda: rt.launch(matmul.matmul_kernel, cube.CubeCount(-(-nn // units), -(-m // rows_), 1), cube.CubeDim(units),
                       (da, db, dc, batch, m, nn, k, k, 1, nn, 1),
                       dict(T=f32, bdim=0, rows=rows_, units=units, b_unit_n=True, depth=matmul.DEPTH))
ms = rt.time(mm, repeat=5, warmup=1)
C = dc.numpy()
record("matmul cube f32 4096^3", ms, TFLOPs=round(2 * m * nn * k / ms / 1e9, 2),
       max_rel_error=float(np.abs(C[:64] - A[:64] @ B).max() / np.abs(A[:64] @ B).max()))
try:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(A).cuda(), torch.from_numpy(B).cuda()
    for _ in range(2):
        ta @ tb
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        ta @ tb
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / 5
    record("matmul torch f32 4096^3", ms, TFLOPs=round(2 * m * nn * k / ms / 1e9, 2))
except ImportError:
    print("torch missing: no matmul comparison")
json.dump(results, open(f"{sys.argv[1]}/timings.json", "w"), indent=1)
EOF

{
  echo "gpu_check $(date -u +%FT%TZ)"
  grep -h -E "^[0-9]+ (passed|failed)|passed|failed" "$RESULTS/cuda-tests.log" "$RESULTS/library-on-gpu.log" | tail -n 4
  [ -f "$RESULTS/timings.json" ] && cat "$RESULTS/timings.json" && echo
  if [ ${#failed[@]} -eq 0 ]; then echo "all steps passed"; else echo "FAILED: ${failed[*]}"; fi
} | tee "$RESULTS/summary.txt"
rm -rf "$EMBER_CACHE_DIR"
[ ${#failed[@]} -eq 0 ]
