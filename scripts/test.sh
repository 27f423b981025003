#!/usr/bin/env bash
# Installs dependencies, builds everything and runs the whole test suite (no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The same build as scripts/up.sh's (warnings are errors in both), so after it nothing rebuilds.
bash scripts/build.sh
BUILD_DIR=${DEEPOOL_BUILD_DIR:-build}
# GPU tests carry the "gpu" label and are skipped where no GPU is visible.
LABEL_ARGS=()
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  LABEL_ARGS=(-LE gpu)
fi
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "${LABEL_ARGS[@]}"
# A short libFuzzer run of every parser of outside input (docs/reliability.md), from the seed
# corpora; DEEPOOL_TEST_FUZZ_SECONDS=0 skips it.
FUZZ_SECONDS=${DEEPOOL_TEST_FUZZ_SECONDS:-10}
if [[ "$FUZZ_SECONDS" != 0 ]]; then
  bash scripts/fuzz.sh --seconds "$FUZZ_SECONDS"
fi
# The sanitizer sets (docs/reliability.md, "Sanitizers"): the coordinator's and worker daemon's
# tests under TSan, then every unit and service test under ASan+UBSan, each in a build of its
# own (about 11 and 20 minutes on two cores). DEEPOOL_TEST_SANITIZERS=0 skips them.
if [[ "${DEEPOOL_TEST_SANITIZERS:-1}" != 0 ]]; then
  bash scripts/sanitize.sh tsan
  bash scripts/sanitize.sh asan
fi
