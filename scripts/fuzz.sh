#!/usr/bin/env bash
# Builds the fuzz targets (fuzz/: every parser of outside input) with clang, libFuzzer, ASan and
# UBSan in build-fuzz/, and runs each from its seed corpus (fuzz/corpus/<target>/).
#
#   scripts/fuzz.sh [--seconds S | --runs N] [TARGET...]
#
# Default: --seconds 60 for every target. TARGET is a name such as graph_json (all of them:
# graph_json profile_json prof_file cluster_json plan_json run_spec executor_event
# executor_command job_spec_json job_spec_proto http_request image_decode weights_index
# workload_file users_file). New
# inputs libFuzzer finds go to build-fuzz/corpus/<target>/ (the seed folder is left as it is);
# a crash leaves its input in build-fuzz/crashes/ and makes the script exit 1. Prints one line
# per target: executions, seconds, corpus size. Needs Debian's clang (install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${DEEPOOL_FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${DEEPOOL_JOBS:-$(nproc)}
LIMIT=(-max_total_time=60)
TARGETS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) LIMIT=(-max_total_time="$2"); shift 2 ;;
    --runs) LIMIT=(-runs="$2"); shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=(graph_json profile_json prof_file cluster_json plan_json run_spec executor_event
           executor_command job_spec_json job_spec_proto http_request image_decode weights_index
           workload_file users_file)
fi
for target in "${TARGETS[@]}"; do
  [[ -d "fuzz/corpus/$target" ]] || { echo "fuzz.sh: no target $target (fuzz/corpus/$target)" >&2; exit 2; }
done
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/install-deps.sh)" >&2; exit 2; }

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPOOL_FUZZ=ON -DDEEPOOL_WITH_RUNTIME=OFF \
  -DDEEPOOL_BUILD_TESTS=OFF -DDEEPOOL_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]/#/deepool-fuzz-}"

mkdir -p "$BUILD_DIR/crashes"
failed=0
printf '%-18s %12s %8s %8s  %s\n' target executions seconds corpus result
for target in "${TARGETS[@]}"; do
  work="$BUILD_DIR/corpus/$target"
  mkdir -p "$work"
  log="$BUILD_DIR/fuzz-$target.log"
  start=$(date +%s)
  result=ok
  if ! "$BUILD_DIR/bin/deepool-fuzz-$target" "${LIMIT[@]}" -print_final_stats=1 \
      -artifact_prefix="$ROOT/$BUILD_DIR/crashes/$target-" "$work" "fuzz/corpus/$target" \
      >"$log" 2>&1; then
    result="CRASH (see $log and $BUILD_DIR/crashes/)"
    failed=1
  fi
  executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  printf '%-18s %12s %8s %8s  %s\n' "$target" "$executions" "$(( $(date +%s) - start ))" \
    "$(ls "$work" | wc -l)" "$result"
done
exit $failed
