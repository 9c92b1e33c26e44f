#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft, combined broker+controller) on 127.0.0.1 for tests,
# chaos runs and benchmarks. The jars come from Maven Central through Maven (cached in ~/.m2
# and in $TIDEMARK_CACHE); every start formats a fresh log directory.
#
#   scripts/kafka/kafka.sh install      resolve the broker classpath (idempotent, fast when cached)
#   scripts/kafka/kafka.sh start        install, format and start; waits until the broker answers
#   scripts/kafka/kafka.sh stop         stop the broker started by `start` (SIGTERM, then SIGKILL)
#   scripts/kafka/kafka.sh kill         SIGKILL the broker (fault injection; data dir is kept)
#   scripts/kafka/kafka.sh restart      start again on the existing data dir (after `kill`)
#   scripts/kafka/kafka.sh status       exit 0 when the broker is up
#   scripts/kafka/kafka.sh bootstrap    print the bootstrap address
#
# Environment: KAFKA_PORT (19092), KAFKA_CONTROLLER_PORT (KAFKA_PORT+1), TIDEMARK_CACHE
# (~/.cache/tidemark), KAFKA_RUN_DIR (/tmp/tidemark-kafka-$KAFKA_PORT), KAFKA_HEAP (1g).
set -euo pipefail

KAFKA_VERSION=4.4.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}"
LIBS="$CACHE/kafka-$KAFKA_VERSION/libs"
PORT="${KAFKA_PORT:-19092}"
CPORT="${KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
RUN="${KAFKA_RUN_DIR:-/tmp/tidemark-kafka-$PORT}"
HEAP="${KAFKA_HEAP:-1g}"

log() { printf '[kafka] %s\n' "$*" >&2; }

install() {
  if [ -f "$LIBS/.complete" ]; then return 0; fi
  command -v java >/dev/null || { log "java not found: install a JDK 17 (apt-get install openjdk-17-jre-headless)"; exit 1; }
  command -v mvn >/dev/null || { log "mvn not found: apt-get install maven"; exit 1; }
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies"
  rm -rf "$LIBS"; mkdir -p "$LIBS"
  mvn -B -q -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIBS"
  touch "$LIBS/.complete"
  log "installed $(ls "$LIBS" | wc -l) jars into $LIBS"
}

java_run() { # main-class args...
  java -Xms256m -Xmx"$HEAP" -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$RUN/log4j2.properties" -cp "$LIBS/*" "$@"
}

write_config() {
  mkdir -p "$RUN/data"
  cat > "$RUN/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$RUN/data
num.partitions=4
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.segment.bytes=268435456
log.retention.hours=-1
log.flush.interval.messages=9223372036854775807
PROPS
  cat > "$RUN/log4j2.properties" <<'L4J'
status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir:-/tmp}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
L4J
}

is_up() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

# Alive and not a zombie: a SIGKILLed broker whose parent has not reaped it yet still
# answers kill -0.
pid_alive() {
  [ -f "$RUN/pid" ] || return 1
  local pid; pid=$(cat "$RUN/pid")
  [ -d "/proc/$pid" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

launch() {
  nohup java -Xms256m -Xmx"$HEAP" -XX:+UseG1GC -Djava.awt.headless=true \
    -Dkafka.logs.dir="$RUN" -Dlog4j2.configurationFile="$RUN/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$RUN/server.properties" >"$RUN/stdout.log" 2>&1 &
  echo $! > "$RUN/pid"
  for _ in $(seq 1 240); do
    if is_up; then log "broker up on 127.0.0.1:$PORT (pid $(cat "$RUN/pid"), dir $RUN)"; return 0; fi
    if ! pid_alive; then log "broker exited during start; last lines of $RUN/stdout.log and server.log:"; tail -20 "$RUN/stdout.log" "$RUN/server.log" >&2 || true; exit 1; fi
    sleep 0.5
  done
  log "broker did not open 127.0.0.1:$PORT within 120 s"; exit 1
}

start() {
  install
  if pid_alive; then log "already running (pid $(cat "$RUN/pid"))"; return 0; fi
  if is_up; then log "port $PORT is taken by another process"; exit 1; fi
  rm -rf "$RUN"; write_config
  local cluster_id
  cluster_id=$(java_run kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  java_run kafka.tools.StorageTool format --standalone -t "$cluster_id" -c "$RUN/server.properties" >"$RUN/format.log" 2>&1 \
    || { log "storage format failed:"; cat "$RUN/format.log" >&2; exit 1; }
  launch
}

restart() {
  install
  if pid_alive; then log "already running"; return 0; fi
  [ -f "$RUN/server.properties" ] || { log "no data dir at $RUN: use start"; exit 1; }
  launch
}

stop() {
  pid_alive || { log "not running"; return 0; }
  local pid; pid=$(cat "$RUN/pid")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || { rm -f "$RUN/pid"; log "stopped"; return 0; }; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true; rm -f "$RUN/pid"; log "killed after 30 s"
}

hard_kill() {
  pid_alive || { log "not running"; return 0; }
  kill -KILL "$(cat "$RUN/pid")"
  for _ in $(seq 1 50); do pid_alive || break; sleep 0.1; done
  while is_up; do sleep 0.1; done
  log "SIGKILLed"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  kill) hard_kill ;;
  restart) restart ;;
  status) is_up ;;
  bootstrap) echo "127.0.0.1:$PORT" ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
