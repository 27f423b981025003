# Sourced by the benchmarks that compare stores: starts a PostgreSQL server of their own
# (initdb in a temporary directory, a Unix socket only, fsync and synchronous_commit at their
# defaults, so each commit is flushed to disk; run as the postgres user when run as root), sets
# DEEPOOL_BENCH_POSTGRES to its URI, and stops and removes it when the script exits.
#   source bench/postgres-server.sh; start_postgres NAME
start_postgres() {
  local name=$1
  local bin=${DEEPOOL_POSTGRES_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
  if [ -z "$bin" ] || [ ! -x "$bin/pg_ctl" ]; then
    echo "$name: no PostgreSQL server binaries (scripts/install-deps.sh installs them)" >&2
    exit 2
  fi
  POSTGRES_BIN=$bin
  POSTGRES_DIR=$(mktemp -d /tmp/deepool-bench-pg-XXXXXX)
  POSTGRES_AS=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$POSTGRES_DIR"
    POSTGRES_AS=(runuser -u postgres --)
  fi
  trap stop_postgres EXIT
  "${POSTGRES_AS[@]}" "$bin/initdb" -D "$POSTGRES_DIR/data" -U deepool --auth=trust -E UTF8 \
    --locale=C > "$POSTGRES_DIR/initdb.log"
  "${POSTGRES_AS[@]}" "$bin/pg_ctl" -D "$POSTGRES_DIR/data" -l "$POSTGRES_DIR/server.log" -w \
    -o "-c listen_addresses='' -k $POSTGRES_DIR" start > /dev/null
  DEEPOOL_BENCH_POSTGRES="postgresql:///postgres?host=$POSTGRES_DIR&user=deepool"
}

stop_postgres() {
  "${POSTGRES_AS[@]}" "$POSTGRES_BIN/pg_ctl" -D "$POSTGRES_DIR/data" -m fast -w stop \
    > /dev/null 2>&1 || true
  rm -rf "$POSTGRES_DIR"
}
