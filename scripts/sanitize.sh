#!/usr/bin/env bash
# Test sets under sanitizers, each build in a folder of its own:
#
#   scripts/sanitize.sh asan          ASan + UBSan (build-asan/): every unit and service test
#   scripts/sanitize.sh asan-runtime  ASan + UBSan (build-asan-runtime/): the tests that need
#                                     libtorch: runtime, e2e and multi-host (needs .venv)
#   scripts/sanitize.sh asan-all      both ASan sets: the whole non-GPU suite
#   scripts/sanitize.sh tsan          TSan (build-tsan/): the coordinator's and the worker
#                                     daemon's tests (scheduler and its policies and curves,
#                                     dispatcher, job manager and follower, node registry, store
#                                     suite, leader lease, listener, SQLite checkpointer, call
#                                     slots, progress reports, trace collector, supervisor,
#                                     command stream, and the in-process gRPC servers of both
#                                     daemons)
#   scripts/sanitize.sh tsan-runtime  TSan (build-tsan-runtime/): the communicator and
#                                     multiplexing tests, with libtorch (needs .venv, as the
#                                     main build)
#
# Any sanitizer report fails the test it happens in (halt_on_error), so the script exits 1.
# asan-runtime runs the e2e and multi-host tests with the daemons, CLI and executors it starts
# built with the sanitizers too; the TSan sets leave them out. Libtorch, gRPC and Abseil are
# not instrumented: scripts/tsan-suppressions.txt names the reports that arise inside them
# alone (each with its reason); a report with a deepool frame is never suppressed there.
set -euo pipefail
cd "$(dirname "$0")/.."
KIND=${1:-}
JOBS=${DEEPOOL_JOBS:-$(nproc)}
RUNTIME=OFF
TARGETS=()
case "$KIND" in
  asan | asan-runtime)
    FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    SELECT=(-L "unit|service")
    if [[ "$KIND" == asan-runtime ]]; then
      RUNTIME=ON
      SELECT=(-L "runtime|e2e|multihost" -LE gpu)
      for f in tests/runtime/*_test.cc; do TARGETS+=("runtime_$(basename "$f" .cc)"); done
      for f in tests/e2e/*_test.cc; do TARGETS+=("e2e_$(basename "$f" .cc)"); done
      TARGETS+=(multihost_multihost_cluster_test)
      # The processes those tests start, built with the sanitizers too.
      TARGETS+=(deepool deepool-coordinator deepool-worker deepool-executor deepool-profile)
      export OMP_NUM_THREADS=1
    fi
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  tsan | tsan-runtime)
    FLAGS="-fsanitize=thread -fno-omit-frame-pointer"
    if [[ "$KIND" == tsan ]]; then
      TESTS=(scheduler scheduler_background scheduler_elastic scheduler_store_failure dispatcher
             job_manager job_manager_submission job_follower job_progress node_registry job_store
             store_crash admission
             worker_supervisor command_stream coordinator_service node_service worker_daemon
             scheduler_policy scheduler_curves leader_lease coordinator_connections
             sqlite_checkpointer call_slots progress_reports trace_collector)
      LAYER=service
    else
      TESTS=(fake_communicator communicator multiplex_gate multiplex_streams
             multiplex_background multiplex_executor background_units)
      LAYER=runtime
      RUNTIME=ON
      # One intra-op thread: libgomp's barriers are invisible to TSan.
      export OMP_NUM_THREADS=1
    fi
    for t in "${TESTS[@]}"; do TARGETS+=("${LAYER}_${t}_test"); done
    SELECT=(-R "^${LAYER}/($(IFS='|'; echo "${TESTS[*]}"))_test:" -LE gpu)
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan-suppressions.txt}
    ;;
  asan-all)
    bash "$0" asan
    exec bash "$0" asan-runtime
    ;;
  -h|--help|"")
    awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'
    [[ -n "$KIND" ]] && exit 0 || exit 2
    ;;
  *) echo "sanitize.sh: unknown kind $KIND (asan, asan-runtime, asan-all, tsan or tsan-runtime)" >&2; exit 2 ;;
esac
BUILD_DIR=build-$KIND
# -O1 -g1: the sanitizers' usual level, and about a third less compile time than -O2 -g.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" \
  -DDEEPOOL_WITH_RUNTIME=$RUNTIME -DDEEPOOL_BUILD_BENCH=OFF >/dev/null
if ((${#TARGETS[@]})); then
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" "${SELECT[@]}"
