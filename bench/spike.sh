#!/usr/bin/env bash
# Spike: BASE/s steady, then SPIKE_S seconds at FACTOR × BASE, then back to BASE — append→2xx
# p50/p99/max and backlog age over time, on one plot.
#
#   bench/spike.sh [BASE=20000] [PRE_S=60] [SPIKE_S=60] [POST_S=60] [FACTOR=10]
#
# Env: SYSTEMS ("tidemark", or "tidemark ks-eos" / "tidemark ks-alos" to run the Kafka
# Streams baseline through the same scenario afterwards, never concurrently),
# DRAIN_S (120: how long to keep measuring after the generator finished), EVENT_BYTES (1024),
# PARTITIONS (4), MIN_UNITS (50), FACTOR_RULE (3.0).
#
# The input is `tidemark gen --paced --start now --spike PRE_S:SPIKE_S:FACTOR`: an open-loop
# generator whose records are due on a fixed wall-clock schedule. When it cannot keep up
# (200k/s of ~1 KiB records is more than this 2-core host can produce next to the
# processor), records are sent as fast as possible until it is back on schedule, so the
# "spike" lasts longer at a lower peak: the achieved offered rate is recorded from the
# generator's progress (bench/results/spike.json `offered`) and plotted. Latency is measured
# from the broker's append time of the input record that fired the action (LogAppendTime), so
# queueing inside the processor is never hidden by a slow producer (no coordinated
# omission); generator lag behind its schedule shows up as a lower offered rate instead.
# tidemark: /metrics sampled every second (bench/lib/sampler.py); Kafka Streams: its
# dispatcher's per-second HdrHistogram percentiles (`--latency-out`); backlog age is only
# available for tidemark.
# Output: bench/results/${NAME:-spike}.json and .png (NAME env), raw samples in bench/results/raw/.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
BASE="${1:-20000}"; PRE_S="${2:-60}"; SPIKE_S="${3:-60}"; POST_S="${4:-60}"; FACTOR="${5:-10}"
SYSTEMS="${SYSTEMS:-tidemark}"; DRAIN_S="${DRAIN_S:-120}"; PARTITIONS="${PARTITIONS:-4}"
EVENTS=$(python3 -c "print(int($BASE*($PRE_S+$POST_S) + $BASE*$FACTOR*$SPIKE_S))")
ensure_tidemark
case "$SYSTEMS" in *ks-*) ensure_kstreams;; esac
broker_up
scenario_begin spike
ARGS_JSON="{\"base\": $BASE, \"pre_s\": $PRE_S, \"spike_s\": $SPIKE_S, \"post_s\": $POST_S, \"factor\": $FACTOR, \"events\": $EVENTS, \"event_bytes\": ${EVENT_BYTES:-1024}, \"partitions\": $PARTITIONS}"

# run_spike SYSTEM: one run; writes $WORK/SYSTEM.{samples,gen.log,marks,...}
run_spike() {
  local sys=$1 id="$TAG-$1"
  topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$RX_PORT/actions" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" 15
  "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
  local http=""
  if [ "$sys" = tidemark ]; then
    http=$(free_port)
    start_tidemark "$WORK/$id.toml" "$WORK/state-$id" "$id" "$http" "$WORK/$sys.log" "$WORK/$sys.pid"
    wait_ready "$http" 120 || { blog "tidemark not ready"; cat "$WORK/$sys.log" >&2; return 1; }
  else
    local g=at_least_once; [ "$sys" = ks-eos ] && g=exactly_once_v2
    start_ks "$id" "$id.orders" "$WORK/state-$id" "http://127.0.0.1:$RX_PORT/actions" "$g" "$WORK/$sys.latency.jsonl" "$WORK/$sys.log" "$WORK/$sys.pid"
    sleep 20 # JVM start, group join and task assignment before input arrives
  fi
  python3 "$BENCH/lib/sampler.py" "$WORK/$sys.samples.jsonl" ${http:+--url "http://127.0.0.1:$http/metrics"} \
    --pidfile "processor=$WORK/$sys.pid" --pid "broker=$BROKER_PID" & local sp=$!
  sleep 2
  local t0; t0=$(now_s); echo "$t0" > "$WORK/$sys.t0"
  blog "$sys: $EVENTS events: ${BASE}/s for ${PRE_S}s, ×$FACTOR for ${SPIKE_S}s, ${BASE}/s for ${POST_S}s (paced, open loop)"
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$id.orders" --inventory-topic "$id.inventory" --events "$EVENTS" \
    --rate "$BASE" --spike "$PRE_S:$SPIKE_S:$FACTOR" --paced --start now --seed 5 --inventory-every 0 \
    --event-bytes "${EVENT_BYTES:-1024}" 2>&1 >"$WORK/$sys.gen.json" | stamp > "$WORK/$sys.gen.log"
  local tg; tg=$(now_s)
  blog "$sys: generator done after $(rel "$tg" "$t0") s; measuring the drain for up to ${DRAIN_S}s"
  local end=$(( $(date +%s) + DRAIN_S ))
  while [ "$(date +%s)" -lt "$end" ]; do
    sleep 2
    if [ "$sys" = tidemark ]; then
      # stop early once every partition's backlog age has been < 1 s for 10 s
      python3 - "$WORK/$sys.samples.jsonl" <<'PY' && break
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-10:]]
ok = len(rows) == 10 and all(r.get("up") and r.get("backlog_age") and max(r["backlog_age"].values()) < 1 for r in rows)
sys.exit(0 if ok else 1)
PY
    fi
  done
  kill "$sp"; wait "$sp" 2>/dev/null || true
  kill "$(cat "$WORK/$sys.pid")" 2>/dev/null || true; wait "$(cat "$WORK/$sys.pid")" 2>/dev/null || true
  rm -f "$WORK/$sys.pid"
  rm -rf "$WORK/state-$id"
  delete_topics "$id\\..*" # the run's topics hold GBs
  python3 - "$t0" "$PRE_S" "$SPIKE_S" "$tg" > "$WORK/$sys.marks" <<'PY'
import json, sys
t0, pre, spike, tg = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
print(json.dumps({"spike_start": pre, "spike_end": pre + spike, "gen_end": round(tg - t0, 2)}))
PY
  sleep 5
}

for s in $SYSTEMS; do run_spike "$s"; done
KS_ARGS=()
for s in $SYSTEMS; do case "$s" in ks-*)
  KS_ARGS=(--ks-latency "$WORK/$s.latency.jsonl" --ks-gen "$WORK/$s.gen.log" --ks-t0 "$(cat "$WORK/$s.t0")" --ks-marks "$(cat "$WORK/$s.marks")" --ks-samples "$WORK/$s.samples.jsonl");
  KS_SYS=$s;;
esac; done
META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'args': json.loads(sys.argv[2]), 'machine': json.loads(sys.argv[3]), 'systems': sys.argv[4].split(), 'actions_received': sum(1 for _ in open(sys.argv[5]))}))" \
  "base ${BASE}/s, ${SPIKE_S}s at ×${FACTOR} (requested), ${EVENT_BYTES:-1024} B events" "$ARGS_JSON" "$MACHINE" "$SYSTEMS" "$WORK/actions.jsonl")
python3 "$BENCH/lib/timeseries.py" spike "$RESULTS/${NAME:-spike}.json" "$RESULTS/${NAME:-spike}.png" --samples "$WORK/tidemark.samples.jsonl" \
  --gen "$WORK/tidemark.gen.log" --t0 "$(cat "$WORK/tidemark.t0")" --marks "$(cat "$WORK/tidemark.marks")" --meta "$META" "${KS_ARGS[@]}"
mkdir -p "$RESULTS/raw"; tar czf "$RESULTS/raw/$TAG.tgz" -C "$WORK" $(cd "$WORK" && ls *.jsonl *.log *.marks *.t0 2>/dev/null | grep -v '^actions.jsonl$') 2>/dev/null || true
