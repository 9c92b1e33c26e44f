#!/usr/bin/env bash
# The full test suite: installs prerequisites, checks formatting and lints, starts a real
# Apache Kafka on 127.0.0.1, runs every test (unit, black-box, the Kafka Connect → PostgreSQL
# pipeline), the chaos short profile, the chart checks and the benchmark harness's smoke run,
# and stops the broker.
set -euo pipefail
cd "$(dirname "$0")/.."
# Every prerequisite, found or missing and how it was detected; then install what is missing.
bash scripts/setup.sh --check || bash scripts/setup.sh
. scripts/env.sh
# Kafka Connect, the Debezium JDBC sink and PostgreSQL 15 for tests/connect_jdbc.rs, which must
# run here: it may be skipped only where TIDEMARK_ALLOW_SKIP_CONNECT_JDBC=1 says so.
bash scripts/connect/install.sh
unset TIDEMARK_ALLOW_SKIP_CONNECT_JDBC

echo "[test] cargo fmt --check" >&2
cargo fmt --all -- --check
echo "[test] building (target dir $CARGO_TARGET_DIR)" >&2
cargo build --release --all-targets --workspace
echo "[test] cargo clippy -D warnings" >&2
cargo clippy --release --all-targets --workspace -- -D warnings

export KAFKA_PORT="${KAFKA_PORT:-19092}"
bash scripts/kafka/kafka.sh start
trap 'bash scripts/kafka/kafka.sh stop' EXIT
export TIDEMARK_TEST_BOOTSTRAP="127.0.0.1:$KAFKA_PORT"

echo "[test] cargo test (broker $TIDEMARK_TEST_BOOTSTRAP)" >&2
cargo test --release --workspace -- --test-threads=2

echo "[test] chaos: short profile (own broker on port ${CHAOS_KAFKA_PORT:-19492}; report in chaos/results/)" >&2
"$CARGO_TARGET_DIR/release/tidemark-chaos" --profile short --port "${CHAOS_KAFKA_PORT:-19492}" \
  --report chaos/results/report-short.json

echo "[test] helm chart: lint, render, schema-validate, alert rules, dashboard" >&2
TIDEMARK_BIN="$CARGO_TARGET_DIR/release/tidemark" bash helm/test.sh

# The benchmark harness cannot rot: every scenario's smoke variant (one half-block, tiny
# input, its output checks) against this build, on the harness's own broker (port 39092).
echo "[test] bench harness: every scenario's smoke variant (bench/run --smoke-all)" >&2
python3 -m doctest bench/harness/util.py
bench/run --smoke-all --bin "$CARGO_TARGET_DIR/release/tidemark"
