#!/usr/bin/env bash
# The tests that need no libtorch under sanitizers, each build in a folder of its own:
#
#   scripts/sanitize.sh asan   ASan + UBSan (build-asan/): every unit and service test
#   scripts/sanitize.sh tsan   TSan (build-tsan/): the coordinator's and the worker daemon's
#                              logic tests (scheduler, dispatcher, job manager and follower,
#                              node registry, store suite, supervisor, command stream)
#
# Any sanitizer report fails the test it happens in (halt_on_error), so the script exits 1.
# The libtorch runtime and the e2e tests (real executors) are not built here: libtorch and the
# system's gRPC are not instrumented, which TSan needs of everything that synchronizes.
set -euo pipefail
cd "$(dirname "$0")/.."
KIND=${1:-}
JOBS=${DEEPOOL_JOBS:-$(nproc)}
case "$KIND" in
  asan)
    FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    SELECT=(-L "unit|service")
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  tsan)
    FLAGS="-fsanitize=thread -fno-omit-frame-pointer"
    SELECT=(-R "service/(scheduler|scheduler_background|scheduler_store_failure|dispatcher|job_manager|job_follower|job_progress|node_registry|job_store|store_crash|admission|worker_supervisor|command_stream)_test")
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    ;;
  -h|--help|"")
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    [[ -n "$KIND" ]] && exit 0 || exit 2
    ;;
  *) echo "sanitize.sh: unknown kind $KIND (asan or tsan)" >&2; exit 2 ;;
esac
BUILD_DIR=build-$KIND
# -O1 -g1: the sanitizers' usual level, and about a third less compile time than -O2 -g.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" \
  -DDEEPOOL_WITH_RUNTIME=OFF -DDEEPOOL_BUILD_BENCH=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" "${SELECT[@]}"
