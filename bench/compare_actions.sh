#!/usr/bin/env bash
# Equivalence check of the Kafka Streams baseline against tidemark: both process the same
# small generated history (one orders topic, LogAppendTime) with only the velocity_spike rule
# in `act` mode and low thresholds, each POSTing to its own local receiver; the sets of
# action keys (Idempotency-Key) must be equal. Payloads are compared too.
#
#   bench/compare_actions.sh [EVENTS] [SIM_RATE] [SKUS]     (defaults 200000 events, 1000/s simulated, 300 SKUs)
#
# Env: KAFKA_PORT (39092; started and stopped here unless already up), MIN_UNITS (20),
# FACTOR (3.0), BASELINE (15), PARTITIONS (4), GUARANTEE (exactly_once_v2), GEN_FLAGS (extra).
# Writes bench/results/compare_actions.json; exit 1 when the key sets differ.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
EVENTS="${1:-200000}"; SIM_RATE="${2:-1000}"; SKUS="${3:-300}"
MIN_UNITS="${MIN_UNITS:-20}"; FACTOR="${FACTOR:-3.0}"; BASELINE="${BASELINE:-15}"
PARTITIONS="${PARTITIONS:-4}"; GUARANTEE="${GUARANTEE:-exactly_once_v2}"
ensure_tidemark; ensure_kstreams; broker_up
RUN="cmp-$(date +%s)"
WORK="$(mktemp -d /tmp/bench-$RUN.XXXX)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; broker_down; rm -f "$BIN"; }
trap cleanup EXIT
PORT_T=$((18000 + RANDOM % 1000)); PORT_K=$((PORT_T + 1000))
topology_file "$WORK/topology.toml" "$RUN" "$PARTITIONS" act "http://127.0.0.1:$PORT_T/actions" "$MIN_UNITS" "$FACTOR" "$BASELINE"
"$BIN" topics --bootstrap "$BOOT" --topology "$WORK/topology.toml" >&2
# Event times start 10 minutes ago so none is "in the future" of its append time.
START="$(date -u -d '-10 min' +%Y-%m-%dT%H:%M:%SZ)"
blog "generating $EVENTS events ($SIM_RATE/s simulated, $SKUS SKUs) into $RUN.orders"
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$RUN.orders" --inventory-topic "$RUN.inventory" --events "$EVENTS" \
  --rate "$SIM_RATE" --skus "$SKUS" --seed 7 --start "$START" --inventory-every 0 --event-bytes 256 ${GEN_FLAGS:-} > "$WORK/gen.json"
cat "$WORK/gen.json" >&2

python3 "$BENCH/lib/receiver.py" "$PORT_T" "$WORK/tidemark.actions.jsonl" & PIDS+=($!)
python3 "$BENCH/lib/receiver.py" "$PORT_K" "$WORK/kstreams.actions.jsonl" & PIDS+=($!)
sleep 0.5

blog "tidemark run"
"$BIN" run --bootstrap "$BOOT" --topology "$WORK/topology.toml" --state-dir "$WORK/tm-state" --group "$RUN-tm" \
  --http-addr "127.0.0.1:$((PORT_T + 2000))" --log warn 2> "$WORK/tidemark.log" & TM=$!; PIDS+=($TM)
# Done when every source record is committed and the outbox is empty (polled from /metrics).
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["orders_records"])' "$WORK/gen.json")
for _ in $(seq 1 600); do
  sleep 1
  m=$(curl -s "http://127.0.0.1:$((PORT_T + 2000))/metrics" || true)
  rec=$(awk '/^tidemark_records_total /{print int($2)}' <<<"$m"); rec=${rec:-0}
  pend=$(awk '/^tidemark_outbox_pending /{print int($2)}' <<<"$m"); pend=${pend:-1}
  # Inputs only: the SKU repartition topic gets progress marks at every commit.
  lag=$(awk '/^tidemark_consumer_lag_records/ && !/sku-repartition/{s+=$2} END{print int(s)}' <<<"$m")
  if [ "$rec" -ge "$want" ] && [ "$pend" = 0 ] && [ "$lag" = 0 ]; then break; fi
done
sleep 3   # let an in-flight window fire and dispatch (idle upstreams promise now - idle_skew)
kill -TERM "$TM"; wait "$TM" || true

blog "kafka streams run ($GUARANTEE)"
java -Xmx1g -jar "$KS_JAR" --bootstrap "$BOOT" --app-id "$RUN-ks" --prefix "$RUN-ks" --orders "$RUN.orders" \
  --partitions "$PARTITIONS" --guarantee "$GUARANTEE" --state-dir "$WORK/ks-state" --min-units "$MIN_UNITS" \
  --factor "$FACTOR" --baseline-windows "$BASELINE" --action-url "http://127.0.0.1:$PORT_K/actions" --exit-at-end \
  > "$WORK/kstreams.out" 2> "$WORK/kstreams.log" || { tail -30 "$WORK/kstreams.log" >&2; exit 1; }
cat "$WORK/kstreams.out" >&2

python3 - "$WORK" "$RESULTS/compare_actions.json" "$EVENTS" "$SIM_RATE" "$SKUS" "$MIN_UNITS" "$FACTOR" "$BASELINE" "$GUARANTEE" <<'PY'
import json, sys, collections
work, out = sys.argv[1], sys.argv[2]
def load(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.actions.jsonl")]
    by = collections.OrderedDict()
    for r in rows: by.setdefault(r["key"], r["body"])
    return rows, by
trows, t = load("tidemark"); krows, k = load("kstreams")
only_t = sorted(set(t) - set(k)); only_k = sorted(set(k) - set(t))
same_payload = sum(1 for key in set(t) & set(k) if json.loads(t[key]) == json.loads(k[key]))
diff_payload = [key for key in sorted(set(t) & set(k)) if json.loads(t[key]) != json.loads(k[key])]
res = {
  "bench": "compare_actions", "events": int(sys.argv[3]), "sim_rate": float(sys.argv[4]), "skus": int(sys.argv[5]),
  "rule": {"id": "velocity_spike", "min_units": int(sys.argv[6]), "factor": sys.argv[7], "baseline_windows": int(sys.argv[8])},
  "kstreams_guarantee": sys.argv[9],
  "tidemark_posts": len(trows), "tidemark_keys": len(t), "kstreams_posts": len(krows), "kstreams_keys": len(k),
  "keys_equal": not only_t and not only_k, "only_tidemark": only_t[:50], "only_kstreams": only_k[:50],
  "payloads_equal": same_payload, "payloads_different": len(diff_payload),
  "payload_diff_examples": [{"key": x, "tidemark": json.loads(t[x]), "kstreams": json.loads(k[x])} for x in diff_payload[:5]],
}
json.dump(res, open(out, "w"), indent=1)
print(json.dumps({kk: v for kk, v in res.items() if kk != "payload_diff_examples"}))
for x in res["payload_diff_examples"][:2]: print("payload differs:", json.dumps(x))
sys.exit(0 if res["keys_equal"] else 1)
PY
