#!/usr/bin/env bash
# deepool-bench-control-plane side by side on SQLite, memory and PostgreSQL, in one run: starts
# a PostgreSQL server of its own (initdb in a temporary directory, a Unix socket only, fsync and
# synchronous_commit at their defaults, so each commit is flushed to disk; run as the postgres
# user when this script runs as root), runs the benchmark with the three stores, stops the
# server and removes it. Extra arguments go to the benchmark (--clients 1 --jobs-per-client 50).
#   bash bench/control_plane/with-postgres.sh [BENCH ARGS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${DEEPOOL_BENCH:-build/bin/deepool-bench-control-plane}
bin=${DEEPOOL_POSTGRES_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
if [ ! -x "$bench" ]; then
  echo "with-postgres.sh: $bench is not built (ninja -C build deepool-bench-control-plane)" >&2
  exit 2
fi
if [ -z "$bin" ] || [ ! -x "$bin/pg_ctl" ]; then
  echo "with-postgres.sh: no PostgreSQL server binaries (scripts/install-deps.sh installs them)" >&2
  exit 2
fi
dir=$(mktemp -d /tmp/deepool-bench-pg-XXXXXX)
as=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$dir"
  as=(runuser -u postgres --)
fi
stop() {
  "${as[@]}" "$bin/pg_ctl" -D "$dir/data" -m fast -w stop > /dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT
"${as[@]}" "$bin/initdb" -D "$dir/data" -U deepool --auth=trust -E UTF8 --locale=C > "$dir/initdb.log"
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -o "-c listen_addresses='' -k $dir" \
  start > /dev/null
"$bench" --stores sqlite memory "postgresql:///postgres?host=$dir&user=deepool" "$@"
