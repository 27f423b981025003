#!/usr/bin/env bash
# deepool-bench-capacity on SQLite and on PostgreSQL (a server of its own,
# bench/postgres-server.sh), one after the other in one run. Extra arguments go to the benchmark
# (--nodes 100 --pending 1000 --history 10000 for a quick look).
#   bash bench/capacity/run.sh [BENCH ARGS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${DEEPOOL_BENCH:-build/bin/deepool-bench-capacity}
if [ ! -x "$bench" ] || [ ! -x build/bin/deepool-coordinator ]; then
  echo "run.sh: build it first (ninja -C build deepool-bench-capacity deepool-coordinator)" >&2
  exit 2
fi
source bench/postgres-server.sh
start_postgres run.sh
"$bench" --stores sqlite "$DEEPOOL_BENCH_POSTGRES" "$@"
