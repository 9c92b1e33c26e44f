#!/usr/bin/env bash
# Installs what the Kafka Connect → PostgreSQL pipeline test (tests/connect_jdbc.rs) runs:
# Kafka Connect 4.4.0 standalone, the Debezium JDBC sink connector 3.5.0.Final and
# PostgreSQL 15. Idempotent: each piece is detected by the files that run it, and only what is
# missing is installed. Everything lands outside the clone ($TIDEMARK_CACHE, Debian's paths).
#
#   scripts/connect/install.sh           install what is missing, then print where each piece is
#   scripts/connect/install.sh --check   only report, one line per piece; exit 1 when one is missing
#
# - Kafka Connect: connect-runtime, connect-json and connect-transforms 4.4.0 from Maven
#   Central are on the broker's classpath already (scripts/kafka/pom.xml, through kafka-tools);
#   `scripts/kafka/kafka.sh install` resolves it.
# - The Debezium JDBC sink: resolved from Maven Central (its pom names other repositories,
#   mirrored to Central by maven-settings.xml) into a plugin directory for Connect's
#   plugin.path. Jars Connect provides itself are removed from it: jackson 2.19 beside the
#   runtime's 2.21 fails the worker with `ServiceConfigurationError: BlackbirdModule not a
#   subtype`, and slf4j, connect-api and kafka-clients must come from the runtime. The MySQL
#   driver is excluded (scripts/connect/pom.xml).
# - PostgreSQL 15: Debian's postgresql-15 (initdb, pg_ctl, postgres, psql); the test runs a
#   throwaway cluster of its own (scripts/connect/postgres.sh), never the package's.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/paths.sh"
MODE=install
case "${1:-}" in
  --check) MODE=check ;;
  "") ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac

log() { printf '[connect] %s\n' "$*" >&2; }
MISSING=()
report() { printf '[connect] %-8s %-22s %s\n' "$1" "$2" "$3" >&2; }

check() {
  MISSING=()
  local jar ok=1
  for jar in connect-runtime connect-json connect-transforms; do
    [ -f "$CONNECT_LIBS/$jar-$KAFKA_VERSION.jar" ] || ok=0
  done
  if [ $ok = 1 ]; then report found "kafka-connect" "$CONNECT_LIBS/connect-runtime-$KAFKA_VERSION.jar exists"
  else report missing "kafka-connect" "no connect-runtime/json/transforms $KAFKA_VERSION jars in $CONNECT_LIBS"; MISSING+=(connect); fi
  if [ -f "$DEBEZIUM_DIR/.complete" ] && [ -f "$DEBEZIUM_DIR/debezium-connector-jdbc-$DEBEZIUM_VERSION.jar" ]; then
    report found "debezium-jdbc-sink" "$DEBEZIUM_DIR/debezium-connector-jdbc-$DEBEZIUM_VERSION.jar exists"
  else report missing "debezium-jdbc-sink" "no $DEBEZIUM_DIR/.complete"; MISSING+=(debezium); fi
  local b all=1
  for b in initdb pg_ctl postgres psql; do [ -x "$PG_BIN/$b" ] || all=0; done
  if [ $all = 1 ]; then report found "postgresql-15" "$PG_BIN/{initdb,pg_ctl,postgres,psql} exist"
  else report missing "postgresql-15" "no initdb/pg_ctl/postgres/psql in $PG_BIN"; MISSING+=(postgres); fi
}

install_debezium() {
  command -v mvn >/dev/null || { log "mvn not found: apt-get install maven"; exit 1; }
  log "resolving io.debezium:debezium-connector-jdbc:$DEBEZIUM_VERSION into $DEBEZIUM_DIR"
  rm -rf "$DEBEZIUM_DIR"; mkdir -p "$DEBEZIUM_DIR"
  mvn -B -q -s "$HERE/maven-settings.xml" -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$DEBEZIUM_DIR"
  rm -f "$DEBEZIUM_DIR"/jackson-*.jar "$DEBEZIUM_DIR"/slf4j-*.jar \
        "$DEBEZIUM_DIR"/connect-api-*.jar "$DEBEZIUM_DIR"/kafka-clients-*.jar
  touch "$DEBEZIUM_DIR/.complete"
  log "installed $(ls "$DEBEZIUM_DIR" | wc -l) jars into $DEBEZIUM_DIR"
}

install_postgres() {
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  log "installing Debian's postgresql-15 (no cluster of the package's is created)"
  # The tests run their own throwaway clusters; a package-created one would only take 5432.
  $sudo mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $sudo tee /etc/postgresql-common/createcluster.d/tidemark.conf >/dev/null
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql-15 >/dev/null
}

check
if [ "$MODE" = check ]; then
  [ ${#MISSING[@]} -eq 0 ] || { log "missing: ${MISSING[*]} (run scripts/connect/install.sh)"; exit 1; }
  exit 0
fi
for piece in "${MISSING[@]}"; do
  case "$piece" in
    connect) bash "$HERE/../kafka/kafka.sh" install ;;
    debezium) install_debezium ;;
    postgres) install_postgres ;;
  esac
done
check
[ ${#MISSING[@]} -eq 0 ] || { log "still missing after install: ${MISSING[*]}"; exit 1; }
log "Kafka Connect, the Debezium JDBC sink and PostgreSQL 15 present"
