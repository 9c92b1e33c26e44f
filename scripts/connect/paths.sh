# Sourced by the scripts of scripts/connect/: where each piece of the Connect pipeline lives.
# Every path can be set from the environment; tests/connect_jdbc.rs reads the same variables
# with the same defaults.
KAFKA_VERSION=4.4.0
DEBEZIUM_VERSION=3.5.0.Final
TIDEMARK_CACHE="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}"
# The Connect runtime: the broker's classpath (scripts/kafka/kafka.sh).
CONNECT_LIBS="${TIDEMARK_CONNECT_LIBS:-$TIDEMARK_CACHE/kafka-$KAFKA_VERSION/libs}"
# Connect's plugin.path; the sink is one directory in it.
CONNECT_PLUGINS="${TIDEMARK_CONNECT_PLUGINS:-$TIDEMARK_CACHE/connect-plugins}"
DEBEZIUM_DIR="$CONNECT_PLUGINS/debezium-connector-jdbc-$DEBEZIUM_VERSION"
PG_BIN="${TIDEMARK_PG_BIN:-/usr/lib/postgresql/15/bin}"
