#!/usr/bin/env bash
# Fuzz ember's loaders and config parsers with a large budget: the tests of tests/fuzz (CI runs them
# with a small fixed-seed budget) with fresh random seeds and EMBER_FUZZ_EXAMPLES examples per test.
#
#   scripts/fuzz.sh                         # 2000 examples per test, on 2 workers
#   EMBER_FUZZ_EXAMPLES=20000 JOBS=8 scripts/fuzz.sh
#   scripts/fuzz.sh -k safetensors          # extra arguments go to pytest
#
# Needs python with numpy, ml_dtypes, pytest, pytest-xdist, hypothesis, torch and safetensors (the
# references the tests compare against). A failure prints the file that broke the contract.
set -euo pipefail
cd "$(dirname "$0")/.."
export EMBER_FUZZ_EXAMPLES="${EMBER_FUZZ_EXAMPLES:-2000}"
exec "${PYTHON:-python}" -m pytest -q -p no:cacheprovider -n "${JOBS:-2}" tests/fuzz "$@"
