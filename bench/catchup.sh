#!/usr/bin/env bash
# Catch-up: a backlog of N order records is in the log before tidemark starts; tidemark then
# starts together with live input at LIVE_RATE/s. Measured: time until backlog age < 1 s
# (every partition), the net drain rate (N / that time) and the processed rate
# ((N + live records in that time) / that time).
#
#   bench/catchup.sh [N=2000000] [LIVE_RATE=20000] [MAX_S=900]
#
# The SPEC §5 target is N = 12000000 (`bench/catchup.sh 12000000`: ~12 GB of ~1 KiB records on
# the broker's disk; check free space first). The backlog's event times are spread over the
# N / LIVE_RATE seconds before now (it is the live stream the processor missed), produced as
# fast as possible (`tidemark gen` unpaced); the live input is `tidemark gen --paced --start
# now` (open loop). Env: EVENT_BYTES (1024), PARTITIONS (4), MIN_UNITS, FACTOR_RULE.
# Output: bench/results/${NAME:-catchup}.json and .png (NAME env).
#
# SYSTEMS ("tidemark" by default; "ks-eos", "ks-alos", or a list run one after the other, each
# with its own backlog and topics, never concurrently): the Kafka Streams baseline
# (exactly_once_v2 / at_least_once) through the same scenario — the same backlog (seed 11) and
# live input (seed 12), the JVM started right after the live generator as tidemark is, with
# `--latency-out` (its dispatcher's per-second append→2xx percentiles) and `--lag-out`
# (committed offsets of orders and sku-repartition once a second); its own action receiver.
# Its result (lib/catchup_ab.py `run`: time to caught up under the rule of lib/caught_up.py,
# net drain rate, the lag as reference, outputs, resources; no backlog-age gauge exists for it)
# goes to results/$NAME.json when it is the only system, else results/$NAME-<system>.json;
# tidemark's result is unchanged. With STOP_RULE=backlog a Kafka Streams run ends once its
# committed lag (orders + sku-repartition) stayed below LIVE_RATE in 5 lag lines.
#
# Options for bench/catchup_ab.sh (issue 16's A-B-B-A series; unset, nothing changes):
# - RAW_OUT=PREFIX: per system PREFIX-<system>.actions.jsonl (the receiver's log), .samples.jsonl,
#   .gen.log (the live generator's progress), .marks.json (tag, work dir, epochs of the live
#   start, the processor start and the end of the observation, how it stopped, the arguments)
#   and for Kafka Streams .latency.jsonl, .lag.jsonl and .ks.log (its `[ks]` stderr lines).
# - ALIGN_S=N: the backlog's first event time is rounded down to a multiple of N s and the live
#   input starts exactly where the backlog's event times end (`--start` that instant instead of
#   `now`; the live event times then trail the wall clock by the backlog's production time and
#   < N s). With N = 60 (the window size) every run holds the same records in the same windows,
#   so two runs' action keys compare once the window start is taken relative to the backlog's
#   start (lib/caught_up.py normalise_key).
# - STOP_RULE: `backlog` (default, as before for tidemark: backlog age < 1 s on every partition
#   and lag < 100,000 in the last 5 samples), `caught_up` (both systems: lib/caught_up.py `hold`
#   from the processor start — the last STOP_HOLD_S (20) s had >= 5 seconds with actions, every
#   one with append→2xx p99 < CAUGHT_UP_MS (1000), or the lag stayed below LIVE_RATE records for
#   STOP_LAG_HOLD_S (60) s), `none` (MAX_S for every system). Every run then measures 10 s more.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
N="${1:-2000000}"; LIVE_RATE="${2:-20000}"; MAX_S="${3:-900}"; PARTITIONS="${PARTITIONS:-4}"
SYSTEMS="${SYSTEMS:-tidemark}"
STOP_RULE="${STOP_RULE:-backlog}"; CAUGHT_UP_MS="${CAUGHT_UP_MS:-1000}"; STOP_HOLD_S="${STOP_HOLD_S:-20}"; STOP_LAG_HOLD_S="${STOP_LAG_HOLD_S:-60}"
for s in $SYSTEMS; do case "$s" in tidemark|ks-eos|ks-alos) ;; *) blog "unknown system $s"; exit 2;; esac; done
case "$STOP_RULE" in backlog|caught_up|none) ;; *) blog "STOP_RULE must be backlog, caught_up or none"; exit 2;; esac
ensure_tidemark
case "$SYSTEMS" in *ks-*) ensure_kstreams;; esac
broker_up
scenario_begin catchup
blog "run $TAG (work directory $WORK)"

# backlog_times: BSTART (the backlog's first event time), LIVE_START (the live generator's
# --start), ALIGN_MS (the aligned base in epoch ms, or null).
backlog_times() {
  if [ -n "${ALIGN_S:-}" ]; then
    read -r BSTART LIVE_START ALIGN_MS < <(python3 -c 'import sys, time
from datetime import datetime, timezone
n, rate, a = int(sys.argv[1]), float(sys.argv[2]), int(float(sys.argv[3]) * 1000)
span = int(n / rate * 1000)
base = (int(time.time() * 1000) - span) // a * a
f = lambda ms: datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (ms % 1000)
print(f(base), f(base + span), base)' "$N" "$LIVE_RATE" "$ALIGN_S")
  else
    local span=$(( N / LIVE_RATE + 1 ))
    BSTART="$(date -u -d "-$span sec" +%Y-%m-%dT%H:%M:%SZ)"; LIVE_START=now; ALIGN_MS=null
  fi
}
# produce_backlog TOPIC_PREFIX FILE_PREFIX: N records as fast as possible (TB0, TB1: its span).
produce_backlog() {
  blog "producing the backlog: $N records (event times from $BSTART, ${LIVE_RATE}/s simulated)"
  TB0=$(now_s)
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$1.orders" --inventory-topic "$1.inventory" --events "$N" \
    --rate "$LIVE_RATE" --start "$BSTART" --seed 11 --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" \
    > "$WORK/${2}backlog.json" 2> "$WORK/${2}backlog.log"
  TB1=$(now_s)
  blog "backlog produced in $(rel "$TB1" "$TB0") s; $(du -sh "$KAFKA_RUN/data" | cut -f1) on the broker"
  sync; sleep 3
}
# start_live TOPIC_PREFIX GEN_LOG: the paced live input in the background (pid in GEN).
start_live() {
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$1.orders" --inventory-topic "$1.inventory" \
    --events $(( LIVE_RATE * MAX_S )) --rate "$LIVE_RATE" --paced --start "$LIVE_START" --seed 12 --inventory-every 0 \
    --event-bytes "${EVENT_BYTES:-1024}" 2> >(stamp > "$2") >/dev/null &
  GEN=$!; PIDS+=($GEN)
}
# stop_check SYSTEM SINCE: exit 0 when the run may end under STOP_RULE.
stop_check() {
  local sys=$1 since=$2
  case "$STOP_RULE" in
    none) return 1 ;;
    caught_up)
      if [ "$sys" = tidemark ]; then
        python3 "$BENCH/lib/caught_up.py" hold --since "$since" --actions "$WORK/actions.jsonl" --threshold-ms "$CAUGHT_UP_MS" \
          --hold-s "$STOP_HOLD_S" --lag-samples "$WORK/samples.jsonl" --lag-below "$LIVE_RATE" --lag-hold-s "$STOP_LAG_HOLD_S"
      else
        python3 "$BENCH/lib/caught_up.py" hold --since "$since" --latency "$WORK/$sys.latency.jsonl" --threshold-ms "$CAUGHT_UP_MS" \
          --hold-s "$STOP_HOLD_S" --lag-ks "$WORK/$sys.lag.jsonl" --lag-below "$LIVE_RATE" --lag-hold-s "$STOP_LAG_HOLD_S"
      fi ;;
    backlog)
      if [ "$sys" = tidemark ]; then
        python3 - "$WORK/samples.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-5:]]
ok = len(rows) == 5 and all(r.get("up") and r.get("backlog_age") and len(r["backlog_age"]) > 0 and max(r["backlog_age"].values()) < 1 and sum(r.get("lag", {}).values()) < 100000 for r in rows)
sys.exit(0 if ok else 1)
PY
      else
        python3 - "$WORK/$sys.lag.jsonl" "$LIVE_RATE" <<'PY'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-5:]]
except (OSError, ValueError):
    rows = []
ok = len(rows) == 5 and all(r["orders_committed"] > 0 and r["orders_end"] - r["orders_committed"] + r["repartition_end"] - r["repartition_committed"] < float(sys.argv[2]) for r in rows)
sys.exit(0 if ok else 1)
PY
      fi ;;
  esac
}
# write_marks OUT SYSTEM T0 TS TEND STOPPED STATE_MB: the run's marks (lib/catchup_ab.py reads them).
write_marks() {
  python3 - "$@" "$TAG" "$WORK" "$N" "$LIVE_RATE" "$MAX_S" "$ALIGN_MS" "$BSTART" "$LIVE_START" "$(rel "$TB1" "$TB0")" \
    "$STOP_RULE" "$CAUGHT_UP_MS" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" "$PARTITIONS" "${EVENT_BYTES:-1024}" <<'PY'
import json, sys
(out, system, t0, ts, tend, stopped, state_mb, tag, work, n, live, max_s, align, bstart, lstart, produce_s, rule, thr, mn, fr,
 parts, eb) = sys.argv[1:]
json.dump({"system": system, "tag": tag, "work": work, "t0": float(t0), "processor_start_epoch": float(ts), "end_epoch": float(tend),
           "backlog_events": int(n), "live_rate": int(live), "max_s": int(max_s), "align_base_ms": json.loads(align),
           "backlog_start": bstart, "live_start": lstart, "backlog_produce_s": float(produce_s), "stop_rule": rule,
           "stopped_by_rule": stopped == "1", "caught_up_ms": float(thr), "min_units": int(mn), "factor_rule": fr,
           "partitions": int(parts), "event_bytes": int(eb), "state_dir_mb": int(state_mb or 0)}, open(out, "w"))
PY
}
# keep_raw SYSTEM ACTIONS SAMPLES GEN_LOG MARKS [LATENCY LAG KS_LOG]: the RAW_OUT copies (see the header).
keep_raw() {
  [ -n "${RAW_OUT:-}" ] || return 0
  cp "$2" "$RAW_OUT-$1.actions.jsonl"; cp "$3" "$RAW_OUT-$1.samples.jsonl"; cp "$4" "$RAW_OUT-$1.gen.log"; cp "$5" "$RAW_OUT-$1.marks.json"
  if [ -n "${6:-}" ]; then
    cp "$6" "$RAW_OUT-$1.latency.jsonl"
    cp "$7" "$RAW_OUT-$1.lag.jsonl" 2>/dev/null || : > "$RAW_OUT-$1.lag.jsonl"
    grep -a '^\[ks\]' "$8" > "$RAW_OUT-$1.ks.log" || true
  fi
}

run_tidemark() {
  HTTP=$(free_port)
  scenario_topology
  backlog_times
  produce_backlog "$TAG" ""
  python3 "$BENCH/lib/sampler.py" "$WORK/samples.jsonl" --url "http://127.0.0.1:$HTTP/metrics" \
    --pidfile "processor=$WORK/tm.pid" --pid "broker=$BROKER_PID" & SP=$!; PIDS+=($SP)
  T0=$(now_s)
  # Live input first (open loop, due times from now), tidemark right after: both start together.
  start_live "$TAG" "$WORK/gen.log"
  TS=$(now_s)
  start_tidemark "$WORK/t.toml" "$WORK/state" "$TAG" "$HTTP" "$WORK/tm.log" "$WORK/tm.pid"
  blog "tidemark started with a backlog of $N and live input at ${LIVE_RATE}/s; waiting (STOP_RULE=$STOP_RULE, max ${MAX_S}s)"
  END=$(( $(date +%s) + MAX_S ))
  DRAINED=0
  while [ "$(date +%s)" -lt "$END" ]; do
    sleep 2
    if stop_check tidemark "$TS"; then DRAINED=1; break; fi
  done
  sleep 10 # some live-only samples after the drain
  TEND=$(now_s)
  kill "$GEN" 2>/dev/null || true
  kill "$SP" 2>/dev/null || true; wait "$SP" 2>/dev/null || true
  STATE_MB=$(du -sm "$WORK/state" | cut -f1)
  META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'backlog_events': int(sys.argv[2]), 'live_rate': int(sys.argv[3]), 'drained_within_max': sys.argv[4] == '1', 'max_s': int(sys.argv[5]), 'backlog_produce_s': round(float(sys.argv[6]), 1), 'state_dir_mb': int(sys.argv[7]), 'event_bytes': int(sys.argv[8]), 'partitions': int(sys.argv[9]), 'machine': json.loads(sys.argv[10]), 'actions_received': sum(1 for _ in open(sys.argv[11]))}))" \
    "backlog $N records + live ${LIVE_RATE}/s" "$N" "$LIVE_RATE" "$DRAINED" "$MAX_S" "$(rel "$TB1" "$TB0")" "$STATE_MB" "${EVENT_BYTES:-1024}" "$PARTITIONS" "$MACHINE" "$WORK/actions.jsonl")
  python3 "$BENCH/lib/timeseries.py" catchup "$RESULTS/${NAME:-catchup}.json" "$RESULTS/${NAME:-catchup}.png" --samples "$WORK/samples.jsonl" \
    --gen "$WORK/gen.log" --t0 "$T0" --marks "{\"processor_start\": $(rel "$TS" "$T0")}" --meta "$META"
  write_marks "$WORK/tidemark.marks.json" tidemark "$T0" "$TS" "$TEND" "$DRAINED" "$STATE_MB"
  keep_raw tidemark "$WORK/actions.jsonl" "$WORK/samples.jsonl" "$WORK/gen.log" "$WORK/tidemark.marks.json"
  stop_pidfile "$WORK/tm.pid"
}

# run_ks ks-eos|ks-alos: the same scenario for the Kafka Streams baseline.
run_ks() {
  local sys=$1 id="$TAG-$1" g=at_least_once port sp t0 ts tend stopped=0 end state_mb out
  if [ "$sys" = ks-eos ]; then g=exactly_once_v2; fi
  port=$(free_port)
  python3 "$BENCH/lib/receiver.py" "$port" "$WORK/$sys.actions.jsonl" & PIDS+=($!)
  topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$port/actions" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" "${BASELINE_WINDOWS:-15}"
  "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
  backlog_times
  produce_backlog "$id" "$sys."
  t0=$(now_s)
  start_live "$id" "$WORK/$sys.gen.log"
  ts=$(now_s)
  KS_EXTRA="${KS_EXTRA:-} --lag-out $WORK/$sys.lag.jsonl" start_ks "$id" "$id.orders" "$WORK/state-$id" "http://127.0.0.1:$port/actions" \
    "$g" "$WORK/$sys.latency.jsonl" "$WORK/$sys.log" "$WORK/$sys.pid"
  python3 "$BENCH/lib/sampler.py" "$WORK/$sys.samples.jsonl" --pidfile "processor=$WORK/$sys.pid" --pid "broker=$BROKER_PID" & sp=$!; PIDS+=($sp)
  blog "$sys started with a backlog of $N and live input at ${LIVE_RATE}/s; waiting (STOP_RULE=$STOP_RULE, max ${MAX_S}s)"
  end=$(( $(date +%s) + MAX_S ))
  while [ "$(date +%s)" -lt "$end" ]; do
    sleep 2
    alive "$WORK/$sys.pid" "$WORK/$sys.log"
    if stop_check "$sys" "$ts"; then stopped=1; break; fi
  done
  sleep 10
  tend=$(now_s)
  kill "$GEN" 2>/dev/null || true
  kill "$sp" 2>/dev/null || true; wait "$sp" 2>/dev/null || true
  state_mb=$(du -sm "$WORK/state-$id" | cut -f1)
  stop_pidfile "$WORK/$sys.pid"
  rm -rf "$WORK/state-$id"
  write_marks "$WORK/$sys.marks.json" "$sys" "$t0" "$ts" "$tend" "$stopped" "$state_mb"
  keep_raw "$sys" "$WORK/$sys.actions.jsonl" "$WORK/$sys.samples.jsonl" "$WORK/$sys.gen.log" "$WORK/$sys.marks.json" \
    "$WORK/$sys.latency.jsonl" "$WORK/$sys.lag.jsonl" "$WORK/$sys.log"
  out="$RESULTS/${NAME:-catchup}-$sys"
  if [ "$SYSTEMS" = "$sys" ]; then out="$RESULTS/${NAME:-catchup}"; fi
  python3 "$BENCH/lib/catchup_ab.py" run --system "$sys" --marks "$WORK/$sys.marks.json" --actions "$WORK/$sys.actions.jsonl" \
    --samples "$WORK/$sys.samples.jsonl" --gen "$WORK/$sys.gen.log" --latency "$WORK/$sys.latency.jsonl" --lag "$WORK/$sys.lag.jsonl" \
    --ks-log "$WORK/$sys.log" --caught-up-ms "$CAUGHT_UP_MS" --out "$out.json" --png "$out.png" --machine "$MACHINE" >/dev/null \
    || blog "$sys: the output check failed (a key POSTed with two payloads) or the result could not be computed: see $out.json"
  blog "$sys: result $out.json"
}

PREV=""
for s in $SYSTEMS; do
  if [ -n "$PREV" ]; then delete_topics "$PREV"; fi # the previous system's GBs
  if [ "$s" = tidemark ]; then run_tidemark; PREV="$TAG\\..*"; else run_ks "$s"; PREV="$TAG-$s.*"; fi
done
