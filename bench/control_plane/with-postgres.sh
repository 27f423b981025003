#!/usr/bin/env bash
# deepool-bench-control-plane side by side on SQLite, memory and PostgreSQL, in one run, with a
# PostgreSQL server of its own (bench/postgres-server.sh). Extra arguments go to the benchmark
# (--clients 1 --jobs-per-client 50).
#   bash bench/control_plane/with-postgres.sh [BENCH ARGS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${DEEPOOL_BENCH:-build/bin/deepool-bench-control-plane}
if [ ! -x "$bench" ]; then
  echo "with-postgres.sh: $bench is not built (ninja -C build deepool-bench-control-plane)" >&2
  exit 2
fi
source bench/postgres-server.sh
start_postgres with-postgres.sh
"$bench" --stores sqlite memory "$DEEPOOL_BENCH_POSTGRES" "$@"
