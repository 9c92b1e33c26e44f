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
# With SYSTEMS holding no tidemark (e.g. SYSTEMS=ks-eos) the result has only the Kafka Streams part
# (`kafka_streams`, `kafka_streams_series`, plot lines) and no tidemark resources.
#
# Options for bench/spike_ab.sh (issue 16's A-B-B-A series; unset, nothing changes):
# - RAW_OUT=PREFIX: per system, PREFIX-<system>.actions.jsonl (the receiver's lines of that
#   system's run), .samples.jsonl, .gen.log, .marks.json (tag, work dir, epoch of the generator's
#   start, spike and generator marks, end of the observation, how it stopped, the arguments),
#   and for Kafka Streams .latency.jsonl and .lag.jsonl (it runs with `--lag-out`, committed
#   offsets of orders and sku-repartition once a second, when RAW_OUT is set or STOP_RULE is
#   caught_up). The tarball
#   results/raw/$TAG.tgz is then not written (the caller keeps the copies).
# - ALIGN_S=N: the generator's `--start` is now rounded down to a multiple of N s instead of
#   `now` (event times then trail the wall clock by < N s). With N = 60 (the window size) every
#   run puts the same records into the same windows, so two runs' action keys compare once the
#   window start is taken relative to that start (lib/caught_up.py normalise_key).
# - STOP_RULE: `backlog` (default, as before: tidemark stops once every partition's backlog age
#   was < 1 s for 10 s, Kafka Streams is measured for DRAIN_S), `caught_up` (both systems: stop
#   once, after the generator finished, lib/caught_up.py `hold` passes — the last STOP_HOLD_S
#   (20) s had >= 5 seconds with actions, every one with append→2xx p99 < CAUGHT_UP_MS (1000), or
#   the lag stayed below BASE records for STOP_LAG_HOLD_S (60) s), `none` (DRAIN_S for both).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
BASE="${1:-20000}"; PRE_S="${2:-60}"; SPIKE_S="${3:-60}"; POST_S="${4:-60}"; FACTOR="${5:-10}"
SYSTEMS="${SYSTEMS:-tidemark}"; DRAIN_S="${DRAIN_S:-120}"; PARTITIONS="${PARTITIONS:-4}"
STOP_RULE="${STOP_RULE:-backlog}"; CAUGHT_UP_MS="${CAUGHT_UP_MS:-1000}"; STOP_HOLD_S="${STOP_HOLD_S:-20}"; STOP_LAG_HOLD_S="${STOP_LAG_HOLD_S:-60}"
case "$STOP_RULE" in backlog|caught_up|none) ;; *) blog "STOP_RULE must be backlog, caught_up or none"; exit 2;; esac
EVENTS=$(python3 -c "print(int($BASE*($PRE_S+$POST_S) + $BASE*$FACTOR*$SPIKE_S))")
ensure_tidemark
case "$SYSTEMS" in *ks-*) ensure_kstreams;; esac
broker_up
scenario_begin spike
blog "run $TAG (work directory $WORK)"
ARGS_JSON="{\"base\": $BASE, \"pre_s\": $PRE_S, \"spike_s\": $SPIKE_S, \"post_s\": $POST_S, \"factor\": $FACTOR, \"events\": $EVENTS, \"event_bytes\": ${EVENT_BYTES:-1024}, \"partitions\": $PARTITIONS}"

# run_spike SYSTEM: one run; writes $WORK/SYSTEM.{samples,gen.log,marks,...}
run_spike() {
  local sys=$1 id="$TAG-$1" ts0 start_arg=now align_ms=null stopped=0
  ts0=$(now_s)
  topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$RX_PORT/actions" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" 15
  "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
  local http=""
  if [ "$sys" = tidemark ]; then
    http=$(free_port)
    start_tidemark "$WORK/$id.toml" "$WORK/state-$id" "$id" "$http" "$WORK/$sys.log" "$WORK/$sys.pid"
    wait_ready "$http" 120 || { blog "tidemark not ready"; cat "$WORK/$sys.log" >&2; return 1; }
  else
    local g=at_least_once; [ "$sys" = ks-eos ] && g=exactly_once_v2
    local ks_extra="${KS_EXTRA:-}"
    if [ -n "${RAW_OUT:-}" ] || [ "$STOP_RULE" = caught_up ]; then ks_extra="$ks_extra --lag-out $WORK/$sys.lag.jsonl"; fi
    KS_EXTRA="$ks_extra" start_ks "$id" "$id.orders" "$WORK/state-$id" "http://127.0.0.1:$RX_PORT/actions" "$g" "$WORK/$sys.latency.jsonl" "$WORK/$sys.log" "$WORK/$sys.pid"
    sleep 20 # JVM start, group join and task assignment before input arrives
  fi
  python3 "$BENCH/lib/sampler.py" "$WORK/$sys.samples.jsonl" ${http:+--url "http://127.0.0.1:$http/metrics"} \
    --pidfile "processor=$WORK/$sys.pid" --pid "broker=$BROKER_PID" & local sp=$!
  sleep 2
  if [ -n "${ALIGN_S:-}" ]; then
    read -r start_arg align_ms < <(python3 -c 'import sys, time
from datetime import datetime, timezone
a = int(float(sys.argv[1]) * 1000); ms = int(time.time() * 1000) // a * a
print(datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000), ms)' "$ALIGN_S")
  fi
  local t0; t0=$(now_s); echo "$t0" > "$WORK/$sys.t0"
  blog "$sys: $EVENTS events: ${BASE}/s for ${PRE_S}s, ×$FACTOR for ${SPIKE_S}s, ${BASE}/s for ${POST_S}s (paced, open loop, --start $start_arg)"
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$id.orders" --inventory-topic "$id.inventory" --events "$EVENTS" \
    --rate "$BASE" --spike "$PRE_S:$SPIKE_S:$FACTOR" --paced --start "$start_arg" --seed 5 --inventory-every 0 \
    --event-bytes "${EVENT_BYTES:-1024}" 2>&1 >"$WORK/$sys.gen.json" | stamp > "$WORK/$sys.gen.log"
  local tg; tg=$(now_s)
  blog "$sys: generator done after $(rel "$tg" "$t0") s; measuring the drain for up to ${DRAIN_S}s"
  local end=$(( $(date +%s) + DRAIN_S ))
  while [ "$(date +%s)" -lt "$end" ]; do
    sleep 2
    if [ "$STOP_RULE" = caught_up ]; then
      # the same rule for both systems (lib/caught_up.py hold)
      if [ "$sys" = tidemark ]; then
        python3 "$BENCH/lib/caught_up.py" hold --since "$tg" --actions "$WORK/actions.jsonl" --threshold-ms "$CAUGHT_UP_MS" \
          --hold-s "$STOP_HOLD_S" --lag-samples "$WORK/$sys.samples.jsonl" --lag-below "$BASE" --lag-hold-s "$STOP_LAG_HOLD_S" && { stopped=1; break; }
      else
        python3 "$BENCH/lib/caught_up.py" hold --since "$tg" --latency "$WORK/$sys.latency.jsonl" --threshold-ms "$CAUGHT_UP_MS" \
          --hold-s "$STOP_HOLD_S" --lag-ks "$WORK/$sys.lag.jsonl" --lag-below "$BASE" --lag-hold-s "$STOP_LAG_HOLD_S" && { stopped=1; break; }
      fi
    elif [ "$STOP_RULE" = backlog ] && [ "$sys" = tidemark ]; then
      # stop early once every partition's backlog age has been < 1 s for 10 s
      python3 - "$WORK/$sys.samples.jsonl" <<'PY' && { stopped=1; break; }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-10:]]
ok = len(rows) == 10 and all(r.get("up") and r.get("backlog_age") and max(r["backlog_age"].values()) < 1 for r in rows)
sys.exit(0 if ok else 1)
PY
    fi
  done
  local tend; tend=$(now_s)
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
  if [ -n "${RAW_OUT:-}" ]; then
    python3 - "$WORK/actions.jsonl" "$ts0" "$tend" > "$RAW_OUT-$sys.actions.jsonl" <<'PY'
import json, sys
a, b = float(sys.argv[2]) * 1000, float(sys.argv[3]) * 1000 + 5000  # POSTs answered while the processor stopped count
for line in open(sys.argv[1]):
    try:
        if a <= json.loads(line)["t"] <= b:
            sys.stdout.write(line)
    except (ValueError, KeyError):
        pass
PY
    cp "$WORK/$sys.samples.jsonl" "$RAW_OUT-$sys.samples.jsonl"
    cp "$WORK/$sys.gen.log" "$RAW_OUT-$sys.gen.log"
    if [ "$sys" != tidemark ]; then
      cp "$WORK/$sys.latency.jsonl" "$RAW_OUT-$sys.latency.jsonl"
      cp "$WORK/$sys.lag.jsonl" "$RAW_OUT-$sys.lag.jsonl" 2>/dev/null || : > "$RAW_OUT-$sys.lag.jsonl"
    fi
    python3 - "$RAW_OUT-$sys.marks.json" "$(cat "$WORK/$sys.marks")" "$sys" "$TAG" "$WORK" "$t0" "$ts0" "$tend" "$align_ms" \
      "$STOP_RULE" "$stopped" "$ARGS_JSON" "$DRAIN_S" "$CAUGHT_UP_MS" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" <<'PY'
import json, sys
out, marks, system, tag, work, t0, ts0, tend, align, rule, stopped, args, drain, thr, mn, fr = sys.argv[1:]
m = {"system": system, "tag": tag, "work": work, "t0": float(t0), "processor_start_epoch": float(ts0), **json.loads(marks),
     "end": round(float(tend) - float(t0), 2), "align_base_ms": json.loads(align), "stop_rule": rule, "stopped_by_rule": stopped == "1",
     "drain_s": int(drain), "caught_up_ms": float(thr), "min_units": int(mn), "factor_rule": fr, **json.loads(args)}
json.dump(m, open(out, "w"))
PY
  fi
  sleep 5
}

for s in $SYSTEMS; do run_spike "$s"; done
KS_ARGS=(); KS_SYS=""
for s in $SYSTEMS; do case "$s" in ks-*)
  KS_ARGS=(--ks-latency "$WORK/$s.latency.jsonl" --ks-gen "$WORK/$s.gen.log" --ks-t0 "$(cat "$WORK/$s.t0")" --ks-marks "$(cat "$WORK/$s.marks")" --ks-samples "$WORK/$s.samples.jsonl");
  KS_SYS=$s;;
esac; done
META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'args': json.loads(sys.argv[2]), 'machine': json.loads(sys.argv[3]), 'systems': sys.argv[4].split(), 'actions_received': sum(1 for _ in open(sys.argv[5]))}))" \
  "base ${BASE}/s, ${SPIKE_S}s at ×${FACTOR} (requested), ${EVENT_BYTES:-1024} B events" "$ARGS_JSON" "$MACHINE" "$SYSTEMS" "$WORK/actions.jsonl")
if [[ " $SYSTEMS " == *" tidemark "* ]]; then
  TM_ARGS=(--samples "$WORK/tidemark.samples.jsonl" --gen "$WORK/tidemark.gen.log" --t0 "$(cat "$WORK/tidemark.t0")" --marks "$(cat "$WORK/tidemark.marks")")
else # Kafka Streams only: its own start and marks, no tidemark samples
  TM_ARGS=(--t0 "$(cat "$WORK/$KS_SYS.t0")" --marks "$(cat "$WORK/$KS_SYS.marks")")
fi
python3 "$BENCH/lib/timeseries.py" spike "$RESULTS/${NAME:-spike}.json" "$RESULTS/${NAME:-spike}.png" "${TM_ARGS[@]}" --meta "$META" "${KS_ARGS[@]}"
if [ -z "${RAW_OUT:-}" ]; then # else the caller keeps the raw copies
  mkdir -p "$RESULTS/raw"; tar czf "$RESULTS/raw/$TAG.tgz" -C "$WORK" $(cd "$WORK" && ls *.jsonl *.log *.marks *.t0 2>/dev/null | grep -v '^actions.jsonl$') 2>/dev/null || true
fi
