#!/usr/bin/env bash
# Runs the test suite (as scripts/test.sh's CTest step does) while other processes keep the
# machine's cores busy, as on a shared CI host: timing-dependent tests must pass loaded too.
#
#   scripts/test-under-load.sh [--busy N] [CTEST_ARGS...]
#
# --busy N: N processes that spin on a core each for the whole run (default 2). Needs a build
# (scripts/build.sh). Extra arguments go to ctest, e.g. -L e2e or -R trace_test. Prints CTest's
# summary; exits with CTest's status. GPU tests are left out where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${DEEPOOL_BUILD_DIR:-build}
BUSY=2
ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --busy) BUSY=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[[ -d "$BUILD_DIR" ]] || { echo "test-under-load.sh: no $BUILD_DIR; run scripts/build.sh" >&2; exit 2; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  ARGS+=(-LE gpu)
fi
spinners=()
stop_spinners() { ((${#spinners[@]})) && kill "${spinners[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_spinners EXIT
for ((i = 0; i < BUSY; i++)); do
  (while :; do :; done) &
  spinners+=($!)
done
echo "test-under-load: $BUSY busy processes beside ctest -j $(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "${ARGS[@]}"
