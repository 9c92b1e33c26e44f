#!/usr/bin/env bash
# Freshness of the combined dashboard rows (issue 19 item 4, SPEC §6): how far a combined
# row's `as_of` trails the partials it sums, at a steady paced input, with the default
# topology (topology/examples/orders.toml; only topic names made unique per run).
#
#   bench/freshness.sh [RATE] [SECONDS]        (defaults: 2000 events/s for 120 s)
#   KAFKA_PORT=19092 bench/freshness.sh ...    (use a broker already running on that port)
#
# Starts the benchmark broker unless up, creates the run's topics, starts `tidemark run`,
# produces events open-loop at RATE with `tidemark gen --paced --start now`, waits for the
# processor to catch up, then reads the dashboard partial and combined topics with Kafka's
# console consumer (record timestamps: when tidemark produced each record) and computes, per
# partial record (key K|p<n>, `as_of` A, produced at t): the time until the first combined
# record of K with `as_of` >= A was produced (bench/lib/freshness.py). Also the combined
# rows' age: produced-at minus `as_of` (input append time → combined row). Results go to
# bench/results/freshness.json and bench/results/freshness.png, with the git revision of the
# binary; a dirty working tree is refused unless ALLOW_DIRTY=1 (then labelled +dirty).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-2000}"
SECS="${2:-120}"
EVENTS=$((RATE * SECS))
ensure_tidemark
broker_up
RUN="fresh-$(date +%s)"
WORK="$(mktemp -d)"
cleanup() { kill "${TM_PID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; eval "${trap_extra:-}"; broker_down; }
trap cleanup EXIT
HTTP_PORT=$(free_port)
sed -e 's/topic = "orders"/topic = "'"$RUN"'.orders"/' -e 's/topic = "inventory"/topic = "'"$RUN"'.inventory"/' \
  -e 's/topic = "tidemark\./topic = "'"$RUN"'./' "$ROOT/topology/examples/orders.toml" > "$WORK/topology.toml"
"$BIN" topics --bootstrap "$BOOT" --topology "$WORK/topology.toml" >&2
start_tidemark "$WORK/topology.toml" "$WORK/state" "$RUN" "$HTTP_PORT" "$WORK/run.log" "$WORK/tm.pid"
TM_PID="$(cat "$WORK/tm.pid")"
wait_ready "$HTTP_PORT" 60 || { blog "tidemark not ready"; tail -20 "$WORK/run.log" >&2; exit 1; }
LOAD_BEFORE="$(loadavg)"
blog "producing $EVENTS events at $RATE/s (open loop) into $RUN.orders"
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$RUN.orders" --inventory-topic "$RUN.inventory" --events "$EVENTS" \
  --rate "$RATE" --paced --start now --seed 19 --inventory-every 1000 > "$WORK/gen.json" 2> "$WORK/gen.log"
# Caught up: every input partition's lag back to 0 (at most 60 s), then a few commits more.
for _ in $(seq 1 60); do
  lag=$(curl -sf "127.0.0.1:$HTTP_PORT/metrics" | awk '/^tidemark_consumer_lag_records\{/ && /source="orders"/ {s+=$2} END{print int(s)}')
  [ "${lag:-1}" = 0 ] && break; sleep 1
done
sleep 5
kill "$TM_PID"; wait "$TM_PID" 2>/dev/null || true; TM_PID=
consume() { # TOPIC OUT
  java -cp "$HOME/.cache/tidemark/kafka-4.4.0/libs/*" org.apache.kafka.tools.consumer.ConsoleConsumer \
    --bootstrap-server "$BOOT" --topic "$1" --from-beginning --timeout-ms 15000 \
    --formatter-property print.timestamp=true --formatter-property print.key=true \
    --formatter-property key.separator=$'\t' > "$2" 2>> "$WORK/consume.log" || true
}
consume "$RUN.dashboard" "$WORK/partials.tsv"
consume "$RUN.dashboard-combined" "$WORK/combined.tsv"
blog "$(wc -l < "$WORK/partials.tsv") partial and $(wc -l < "$WORK/combined.tsv") combined records read"
python3 "$BENCH/lib/freshness.py" "$WORK/partials.tsv" "$WORK/combined.tsv" "$RESULTS/freshness.json" \
  "$RESULTS/freshness.png" "$RATE" "$SECS" "$BIN_INFO" "$LOAD_BEFORE" "$(loadavg)" "$(machine_json)"
