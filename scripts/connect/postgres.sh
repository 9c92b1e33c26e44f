#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster on 127.0.0.1 for the Connect pipeline test: its data, socket
# and log in one directory, trust authentication for the superuser `tidemark`, a database
# `tidemark`, durability off (fsync) as nothing in it must outlive the test.
#
#   PG_DIR=DIR PG_PORT=PORT scripts/connect/postgres.sh start   initdb (once) and start; waits until it answers
#   PG_DIR=DIR scripts/connect/postgres.sh stop                 fast shutdown
#
# PostgreSQL refuses to run as root: as root, the cluster belongs to and runs as the
# `postgres` user (created by Debian's package), and DIR is made traversable for it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/paths.sh"
DIR="${PG_DIR:?PG_DIR: the directory of the cluster}"
DATA="$DIR/data"
log() { printf '[postgres] %s\n' "$*" >&2; }

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() {
  local port="${PG_PORT:?PG_PORT: the port to listen on}"
  mkdir -p "$DIR"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || { log "no 'postgres' user to run the cluster as (apt-get install postgresql-15)"; exit 1; }
    chmod 0755 "$DIR"; mkdir -p "$DATA"; chown postgres "$DATA"
  fi
  if [ ! -f "$DATA/PG_VERSION" ]; then
    as_owner "$PG_BIN/initdb" -D "$DATA" -U tidemark --auth=trust -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 \
      || { log "initdb failed:"; cat "$DIR/initdb.log" >&2; exit 1; }
  fi
  as_owner "$PG_BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$DATA -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >"$DIR/pg_ctl.log" 2>&1 || { log "start failed:"; cat "$DIR/pg_ctl.log" "$DATA/server.log" >&2 || true; exit 1; }
  if ! "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U tidemark -d postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = 'tidemark'" | grep -q 1; then
    "$PG_BIN/psql" -h 127.0.0.1 -p "$port" -U tidemark -d postgres -qc "CREATE DATABASE tidemark" >/dev/null
  fi
  log "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') up on 127.0.0.1:$port (dir $DIR)"
}

stop() {
  [ -f "$DATA/postmaster.pid" ] || { log "not running"; return 0; }
  as_owner "$PG_BIN/pg_ctl" -D "$DATA" -m fast -w -t 30 stop >/dev/null 2>&1 || log "pg_ctl stop failed"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) sed -n '2,11p' "$0" >&2; exit 2 ;;
esac
