#!/usr/bin/env bash
# A Kafka Connect 4.4.0 standalone worker with the Debezium JDBC sink on its plugin.path, its
# configuration, offsets and log in one directory, REST on 127.0.0.1. Connectors are added
# through REST (`POST /connectors`, docs/connect.md has the sink's configuration).
#
#   CONNECT_DIR=DIR CONNECT_PORT=PORT BOOTSTRAP=HOST:PORT scripts/connect/connect.sh start
#   CONNECT_DIR=DIR scripts/connect/connect.sh stop
#
# Keys and values are read with JsonConverter, schemas enabled: the `connect-json` format of
# tidemark's combined sinks (docs/formats.md).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/paths.sh"
DIR="${CONNECT_DIR:?CONNECT_DIR: the directory of the worker}"
log() { printf '[connect] %s\n' "$*" >&2; }

alive() {
  [ -f "$DIR/pid" ] || return 1
  local pid; pid=$(cat "$DIR/pid")
  [ -d "/proc/$pid" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  local port="${CONNECT_PORT:?CONNECT_PORT: the REST port}" bootstrap="${BOOTSTRAP:?BOOTSTRAP: the Kafka broker}"
  bash "$HERE/install.sh" --check
  if alive; then log "already running (pid $(cat "$DIR/pid"))"; return 0; fi
  mkdir -p "$DIR"
  cat > "$DIR/worker.properties" <<PROPS
bootstrap.servers=$bootstrap
key.converter=org.apache.kafka.connect.json.JsonConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
key.converter.schemas.enable=true
value.converter.schemas.enable=true
offset.storage.file.filename=$DIR/offsets
offset.flush.interval.ms=1000
plugin.path=$CONNECT_PLUGINS
listeners=http://127.0.0.1:$port
PROPS
  cat > "$DIR/log4j2.properties" <<L4J
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $DIR/connect.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.worker.name = org.apache.kafka.connect.runtime.WorkerSinkTask
logger.worker.level = INFO
L4J
  nohup java -Xms128m -Xmx512m -XX:+UseSerialGC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$DIR/log4j2.properties" -cp "$CONNECT_LIBS/*" \
    org.apache.kafka.connect.cli.ConnectStandalone "$DIR/worker.properties" >"$DIR/stdout.log" 2>&1 &
  echo $! > "$DIR/pid"
  for _ in $(seq 1 240); do
    if answers "$port" && curl -sf "http://127.0.0.1:$port/connectors" >/dev/null 2>&1; then
      log "worker up, REST on 127.0.0.1:$port (pid $(cat "$DIR/pid"), dir $DIR)"; return 0
    fi
    if ! alive; then log "worker exited during start:"; tail -30 "$DIR/stdout.log" "$DIR/connect.log" >&2 || true; exit 1; fi
    sleep 0.5
  done
  log "worker did not answer on 127.0.0.1:$port within 120 s"; tail -30 "$DIR/connect.log" >&2 || true; exit 1
}

stop() {
  alive || { log "not running"; return 0; }
  local pid; pid=$(cat "$DIR/pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do alive || { rm -f "$DIR/pid"; return 0; }; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true; rm -f "$DIR/pid"; log "killed after 20 s"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) sed -n '2,10p' "$0" >&2; exit 2 ;;
esac
