#!/usr/bin/env bash
# Check ember on a machine with an NVIDIA GPU, in one go, and write a results folder.
#
#   scripts/gpu_check.sh                     # from anywhere; runs ember from this checkout (PYTHONPATH)
#   OUT=/some/dir scripts/gpu_check.sh       # results there (default ./gpu-results)
#   STEPS="tests bench" scripts/gpu_check.sh # a subset of: env tests library conformance fusion trajectories torch
#                                            # features bench featbench
#   BENCH_CASES="gpt plan_replay" ...          # bench.gpu cases (default: all)
#   CUDA_TESTS="tests/cube/test_cuda_graphs.py" ... # the tests step's files (default: tests/cube/test_cuda_*.py,
#                                                   # tests/backend/test_device_moves.py, tests/nn/test_rowwise.py)
#
# Needs python with numpy, ml_dtypes, pytest, hypothesis, cuda-bindings and nvidia-cuda-nvrtc, and
# torch (CUDA) for the conformance oracle and the benchmarks; cupy adds cuBLAS as a matmul candidate;
# pytest-xdist spreads the conformance suite over JOBS workers (default 8). No network. Steps:
#   env          GPU, driver, Python and package versions (environment.txt);
#   tests        the CUDA tests (tests/cube/test_cuda_*.py): rendering, NVRTC, runtime, tensor cores,
#                fusion plans replayed as CUDA graphs; cat/pad/slice_assign on the device; the row ops
#                (cross entropy on CUDA among them, tests/nn/test_rowwise.py);
#   library      the kernel-library tests of tests/cube with every kernel launched on the GPU (NumPy in
#                and out, compared by the tests themselves): `host_runtime(cuda_runtime())`;
#   conformance  the conformance suite (tests/conformance) on Device.cuda(0), fused (Fusion(Cube(cuda)))
#                and unfused (EMBER_FUSION=0);
#   fusion       the fusion tests (tests/fusion) on Device.cuda(0);
#   trajectories the training-trajectory suite (tests/trajectories) on Device.cuda(0), fused and unfused
#                (the suite's cuda device runs fused; EMBER_FUSION=0 runs it unfused): 8 steps of every
#                optimizer on the model families against Device.numpy(), and resumes in a fresh process;
#   torch        the conformance and trajectory suites on Device.torch("cuda:0") (ember's primitives run by
#                torch's CUDA ops, `-k torch-cuda`; tests/conftest.py lists it when torch.cuda.is_available());
#   features     the tests of the later capabilities on Device.cuda(0) (`-k "cuda and not torch-cuda"`):
#                quantized matmul and QTensor (tests/ops/test_quant_matmul.py, tests/quant), DLPack sharing
#                with torch and autocast (tests/test_dlpack.py, tests/train/test_autocast.py, the
#                conformance host_interop cases); FEATURE_TESTS overrides the list;
#   featbench    python -m bench on Device("cuda") with torch as the peer: the quantized matmul at issue
#                #30's shapes ((M, 4096) x (4096, 14336), M = 1, 16, 4096) and the ~1.1B Llama fine-tuning
#                step, full / LoRA / QLoRA against peft (bench-features.json, for --report);
#   bench        python -m bench.gpu: matmul bf16 8192^3, custom GELU vs copy, softmax, layer_norm, host
#                time of tiny ops and of a replayed 100-op plan, transformer_encoder and GPT training steps
#                against torch eager and torch.compile on the same card (gpu-bench.json, and a table at the
#                end of bench.log; bench-cuda.json is the same rows for `python -m bench --report`: copy it
#                to bench/results/).
# Each step writes <step>.log (and junit-<step>.xml for tests); summary.txt says what passed. The exit
# status is non-zero when a step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
RESULTS="${OUT:-./gpu-results}"
mkdir -p "$RESULTS"
RESULTS="$(cd "$RESULTS" && pwd)"
PY="${PYTHON:-python3}"
STEPS="${STEPS:-env tests library conformance fusion trajectories torch features bench featbench}"
BENCH_CASES="${BENCH_CASES:-}"
JOBS="${JOBS:-8}"
# A fresh kernel and autotune cache: every kernel is compiled, and every choice timed, by this run.
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/ember-gpu-check.XXXXXX")"
export EMBER_CACHE_DIR="$SCRATCH/kernels" EMBER_AUTOTUNE_DIR="$SCRATCH/autotune"
failed=()
has() { [[ " $STEPS " == *" $1 "* ]]; }
xdist() { "$PY" -c "import xdist" 2>/dev/null && echo "-n $JOBS"; }

if has env; then
  {
    echo "date: $(date -u +%FT%TZ)"
    # A `git archive` copy inside another checkout would report that checkout's HEAD: only our own.
    if [[ "$(git rev-parse --show-toplevel 2>/dev/null)" == "$PWD" ]]; then
      echo "commit: $(git rev-parse --verify -q HEAD)"
    else
      echo "commit: unknown (not a git checkout; an archive of the tree?)"
    fi
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
fi

if has tests; then
  echo "== CUDA tests"
  "$PY" -m pytest -q -p no:cacheprovider ${CUDA_TESTS:-tests/cube/test_cuda_*.py tests/backend/test_device_moves.py tests/nn/test_rowwise.py} --junitxml="$RESULTS/junit-tests.xml" \
    > "$RESULTS/tests.log" 2>&1 || failed+=("tests")
  tail -n 3 "$RESULTS/tests.log"
fi

if has library; then
  echo "== kernel-library tests on the GPU"
  "$PY" - "$RESULTS" > "$RESULTS/library.log" 2>&1 <<'EOF' || failed+=("library")
import sys
import pytest
from ember.cube.kernel import host_runtime
from ember.cube.runtime.cuda import cuda_runtime

tests = ["tests/cube/" + t for t in ("test_elementwise.py", "test_reduce.py", "test_matmul.py", "test_conv_pool.py",
                                     "test_indexing.py", "test_random.py", "test_sort.py", "test_frontend.py",
                                     "test_passes.py")]
with host_runtime(cuda_runtime()):  # every launch on NumPy arrays runs on the GPU (copied there and back)
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", f"--junitxml={sys.argv[1]}/junit-library.xml", *tests]))
EOF
  tail -n 3 "$RESULTS/library.log"
fi

# A suite's tests on this device, fused (Fusion(Cube(cuda)), the default) and unfused (EMBER_FUSION=0:
# plain Cube(cuda)); -k picks the parametrizations on this device (tests/conftest.py lists it here), not
# those of Device.torch("cuda:0") ("torch-cuda", the torch step's).
both_modes() {  # step name, what it checks, test path
  for mode in fused unfused; do
    echo "== $2 on Device.cuda(0), $mode"
    fusion=$([ $mode = fused ] && echo 1 || echo 0)
    EMBER_FUSION=$fusion "$PY" -m pytest -q -p no:cacheprovider $(xdist) "$3" -k "cuda and not torch-cuda" \
      --junitxml="$RESULTS/junit-$1-$mode.xml" > "$RESULTS/$1-$mode.log" 2>&1 || failed+=("$1-$mode")
    tail -n 3 "$RESULTS/$1-$mode.log"
  done
}

if has conformance; then
  both_modes conformance "conformance suite" tests/conformance
fi

if has fusion; then
  echo "== fusion tests on Device.cuda(0)"
  "$PY" -m pytest -q -p no:cacheprovider tests/fusion -k "cuda and not torch-cuda" --junitxml="$RESULTS/junit-fusion.xml" \
    > "$RESULTS/fusion.log" 2>&1 || failed+=("fusion")
  tail -n 3 "$RESULTS/fusion.log"
fi

if has trajectories; then
  both_modes trajectories "training trajectories" tests/trajectories
fi

if has torch; then
  for suite in conformance trajectories; do  # no fusion on a torch device: one mode
    echo "== $suite suite on Device.torch(\"cuda:0\")"
    "$PY" -m pytest -q -p no:cacheprovider $(xdist) "tests/$suite" -k torch-cuda \
      --junitxml="$RESULTS/junit-torch-$suite.xml" > "$RESULTS/torch-$suite.log" 2>&1 || failed+=("torch-$suite")
    tail -n 3 "$RESULTS/torch-$suite.log"
  done
fi

if has features; then
  echo "== later capabilities on Device.cuda(0)"
  "$PY" -m pytest -q -p no:cacheprovider ${FEATURE_TESTS:-tests/ops/test_quant_matmul.py tests/quant tests/test_dlpack.py \
    tests/train/test_autocast.py tests/conformance/test_creation.py} -k "cuda and not torch-cuda" \
    --junitxml="$RESULTS/junit-features.xml" > "$RESULTS/features.log" 2>&1 || failed+=("features")
  tail -n 3 "$RESULTS/features.log"
fi

if has bench; then
  echo "== benchmarks (bench.gpu)"
  "$PY" -m bench.gpu $BENCH_CASES --json "$RESULTS/gpu-bench.json" --results "$RESULTS/bench-cuda.json" \
    > "$RESULTS/bench.log" 2>&1 || failed+=("bench")
  sed -n '/^| case/,$p' "$RESULTS/bench.log"
fi

if has featbench; then
  echo "== benchmarks of the later capabilities (python -m bench --device cuda)"
  EMBER_BENCH_QUANT=1x4096x14336,16x4096x14336,4096x4096x14336 "$PY" -m bench quant_matmul llama_finetune_step \
    --device cuda --peers torch --large --json "$RESULTS/bench-features.json" > "$RESULTS/featbench.log" 2>&1 \
    || failed+=("featbench")
  sed -n '/^| bench/,$p' "$RESULTS/featbench.log"
fi

{
  echo "gpu_check $(date -u +%FT%TZ) steps: $STEPS"
  for log in "$RESULTS"/tests.log "$RESULTS"/library.log "$RESULTS"/conformance-*.log "$RESULTS"/fusion.log \
             "$RESULTS"/trajectories-*.log "$RESULTS"/torch-*.log "$RESULTS"/features.log; do
    [ -f "$log" ] && echo "$(basename "$log"): $(grep -E '(passed|failed|error)' "$log" | tail -n 1)"
  done
  [ -f "$RESULTS/bench.log" ] && sed -n '/^| case/,$p' "$RESULTS/bench.log"
  if [ ${#failed[@]} -eq 0 ]; then echo "all steps passed"; else echo "FAILED: ${failed[*]}"; fi
} | tee "$RESULTS/summary.txt"
rm -rf "$SCRATCH"
[ ${#failed[@]} -eq 0 ]
