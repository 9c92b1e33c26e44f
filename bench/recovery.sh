#!/usr/bin/env bash
# Recovery: the processor runs at RATE/s with a large dedup state, is killed with SIGKILL and
# restarted at once on the same state directory. Measured: time from restart to the first
# action POSTed (and to the first action not seen before the kill), to /metrics answering,
# and to backlog age < 1 s on every partition.
#
#   [SYSTEMS="tidemark ks-eos"] bench/recovery.sh [RATE=20000] [HISTORY=4000000] [PRE_KILL_S=60] [POST_KILL_S=120]
#
# State: before the live phase, HISTORY order records (~300 B each, EVENT_BYTES_HISTORY=0:
# no padding, so the broker and the generator get through them quickly; dedup cost does not
# depend on the record size) are produced as fast as possible with event times spread over
# the HISTORY_SPAN seconds (default 7200) before now, and tidemark processes them all: every
# one becomes a dedup entry (7-day retention), so the state holds HISTORY dedup entries,
# i.e. HISTORY / RATE seconds of input at RATE (SPEC asks for hours: 1 h at 20k/s is 72 M
# entries; pass HISTORY=72000000 if disk and time allow). Live input is `tidemark gen --paced
# --start now` (open loop, ~1 KiB records, EVENT_BYTES).
# tidemark runs with a static group member id (`--instance-id`, as in the StatefulSet), so
# the restarted process takes its partitions back without waiting for the killed member's
# session to time out; RECOVERY_DYNAMIC=1 runs without it (both systems).
#
# SYSTEMS ("tidemark" by default; "tidemark ks-eos", "tidemark ks-alos", "tidemark ks-eos
# ks-alos"): the Kafka Streams baseline (bench/kstreams; exactly_once_v2 / at_least_once) goes
# through the same scenario afterwards, one system at a time, never concurrently, each on a
# fresh broker (the broker this script started is stopped, wiped and started again between
# systems; on a broker it did not start, the previous system's topics are deleted instead):
# the same HISTORY records (seed 21; done once the committed lag of orders + sku-repartition
# stayed below RATE for 5 s, from App.java's `--lag-out`), the same paced input at RATE
# (seed 22), `kill -9` of the JVM after PRE_KILL_S, an immediate restart on the same state
# directory with the same static member id (`--instance-id`), POST_KILL_S more input. Measured
# for it from the receiver's log exactly as for tidemark (restart → first action POSTed, →
# first action not POSTed before the kill, re-POSTs of keys POSTed before the kill), plus
# restart → client state RUNNING and the changelog restore (App.java's `[ks] t=...` stderr
# lines), → first committed-offset advance, and "caught up": Kafka Streams has no backlog-age
# gauge, so for it that is the time from which every per-second append→2xx p99 of its
# dispatcher (`--latency-out`, as in spike.sh) stays below 1 s (also recorded: committed lag
# below RATE records). Every system gets DRAIN_S (10) s of measurement after its generator ends.
#
# RAW_OUT=PREFIX (bench/recovery_ab.sh sets it): each system's receiver log is also copied to
# PREFIX-<system>.actions.jsonl, Kafka Streams' per-second latency log to
# PREFIX-<system>.latency.jsonl, and PREFIX-<system>.marks.json holds the run's tag and the
# epoch times of the live start, the kill and the restart.
#
# Output: bench/results/${NAME:-recovery}.json and .png (NAME env): tidemark's numbers at the
# top level (as before), each Kafka Streams system under `systems`, the headline numbers side
# by side under `comparison`; the plot adds the first Kafka Streams system's latency and every
# Kafka Streams system's committed lag ÷ RATE and committed records/s.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-20000}"; HISTORY="${2:-4000000}"; PRE_KILL_S="${3:-60}"; POST_KILL_S="${4:-120}"
PARTITIONS="${PARTITIONS:-4}"; HISTORY_SPAN="${HISTORY_SPAN:-7200}"
SYSTEMS="${SYSTEMS:-tidemark}"; DRAIN_S="${DRAIN_S:-10}"
for s in $SYSTEMS; do case "$s" in tidemark|ks-eos|ks-alos) ;; *) blog "unknown system $s"; exit 2;; esac; done
ensure_tidemark
case "$SYSTEMS" in *ks-*) ensure_kstreams;; esac
broker_up
scenario_begin recovery
HRATE=$(python3 -c "print(max(1.0, $HISTORY / $HISTORY_SPAN))")

# produce_history TOPIC_PREFIX FILE_PREFIX: HISTORY records as fast as possible, event times
# spread over the HISTORY_SPAN seconds before now.
produce_history() {
  local hstart; hstart="$(date -u -d "-$HISTORY_SPAN sec" +%Y-%m-%dT%H:%M:%SZ)"
  blog "history: $HISTORY records of ~${EVENT_BYTES_HISTORY:-0} B padding, event times over ${HISTORY_SPAN}s before now"
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$1.orders" --inventory-topic "$1.inventory" --events "$HISTORY" \
    --rate "$HRATE" --start "$hstart" --seed 21 --inventory-every 0 --event-bytes "${EVENT_BYTES_HISTORY:-0}" \
    --max-lateness 10m > "$WORK/${2}history.json" 2> "$WORK/${2}history.log"
}
# start_live TOPIC_PREFIX GEN_LOG: the paced live input in the background (pid in GEN).
start_live() {
  local live=$(( RATE * (PRE_KILL_S + POST_KILL_S) ))
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$1.orders" --inventory-topic "$1.inventory" --events "$live" \
    --rate "$RATE" --paced --start now --seed 22 --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" \
    2> >(stamp > "$2") >/dev/null &
  GEN=$!; PIDS+=($GEN)
}
# keys_before ACTIONS TK TR: first new action after the restart, re-POSTs of keys POSTed before the kill.
keys_before() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
acts = [json.loads(l) for l in open(sys.argv[1])]
tk, tr = float(sys.argv[2]), float(sys.argv[3])
before = {a["key"] for a in acts if a["t"] / 1000 < tk}
after = [a for a in acts if a["t"] / 1000 >= tr]
first_new = next((a["t"] / 1000 for a in sorted(after, key=lambda a: a["t"]) if a["key"] not in before), None)
redelivered = sum(1 for a in after if a["key"] in before)
print(json.dumps({"first_new_action_after_restart_s": None if first_new is None else round(first_new - tr, 2),
                  "posts_after_restart_of_keys_seen_before_kill": redelivered, "posts_before_kill": sum(1 for a in acts if a["t"] / 1000 < tk)}))
PY
}
caught_up() { # N consecutive samples with backlog age < 1 s on every partition and lag < RATE
  python3 - "$WORK/samples.jsonl" "$1" "$RATE" <<'PY'
import json, sys
n, rate = int(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-n:]]
ok = len(rows) == n and all(r.get("up") and r.get("backlog_age") and max(r["backlog_age"].values()) < 1 and sum(r.get("lag", {}).values()) < rate for r in rows)
sys.exit(0 if ok else 1)
PY
}
ks_caught_up() { # LAG_FILE N: the last N --lag-out lines with committed lag (orders + repartition) < RATE
  python3 - "$1" "$2" "$RATE" <<'PY'
import json, sys
n, rate = int(sys.argv[2]), float(sys.argv[3])
try:
    rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-n:]]
except (OSError, ValueError):
    rows = []
ok = len(rows) == n and all(r["orders_committed"] > 0 and r["orders_end"] - r["orders_committed"] + r["repartition_end"] - r["repartition_committed"] < rate for r in rows)
sys.exit(0 if ok else 1)
PY
}

# keep_raw SYSTEM ACTIONS T0 TK TR [LATENCY]: the RAW_OUT copies (see the header).
keep_raw() {
  [ -n "${RAW_OUT:-}" ] || return 0
  cp "$2" "$RAW_OUT-$1.actions.jsonl"
  if [ -n "${6:-}" ]; then cp "$6" "$RAW_OUT-$1.latency.jsonl"; fi
  printf '{"system": "%s", "tag": "%s", "work": "%s", "t0": %s, "kill": %s, "restart": %s}\n' "$1" "$TAG" "$WORK" "$3" "$4" "$5" > "$RAW_OUT-$1.marks.json"
}

run_tidemark() {
  if [ -z "${RECOVERY_DYNAMIC:-}" ]; then export TM_EXTRA="--instance-id $TAG-0"; fi
  scenario_tidemark
  TH0=$(now_s)
  produce_history "$TAG" ""
  until caught_up 5; do alive "$WORK/tm.pid" "$WORK/tm.log"; sleep 2; done
  TH1=$(now_s)
  STATE_MB=$(du -sm "$WORK/state" | cut -f1)
  HIST_RECORDS=$(curl -sf "127.0.0.1:$HTTP/metrics" | awk '/^tidemark_records_total/{print $2}')
  blog "history processed in $(rel "$TH1" "$TH0") s (incl. producing); state dir ${STATE_MB} MB"
  T0=$(now_s)
  start_live "$TAG" "$WORK/gen.log"
  sleep "$PRE_KILL_S"
  TK=$(now_s)
  kill -9 "$(cat "$WORK/tm.pid")"
  wait "$(cat "$WORK/tm.pid")" 2>/dev/null || true
  TR=$(now_s)
  blog "SIGKILL at $(rel "$TK" "$T0") s; restarting"
  start_tidemark "$WORK/t.toml" "$WORK/state" "$TAG" "$HTTP" "$WORK/tm.log" "$WORK/tm.pid"
  wait "$GEN" 2>/dev/null || true
  sleep "$DRAIN_S"
  kill "$SP" 2>/dev/null || true; wait "$SP" 2>/dev/null || true
  stop_pidfile "$WORK/tm.pid"
  rm -rf "$WORK/state"
  KEYS_BEFORE=$(keys_before "$WORK/actions.jsonl" "$TK" "$TR")
  keep_raw tidemark "$WORK/actions.jsonl" "$T0" "$TK" "$TR"
  META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'rate': int(sys.argv[2]), 'history_records': int(sys.argv[3]), 'history_dedup_entries_approx': int(float(sys.argv[4] or 0)), 'history_covers_s_at_rate': round(float(sys.argv[4] or 0) / int(sys.argv[2])), 'history_event_time_span_s': int(sys.argv[5]), 'history_processing_s': round(float(sys.argv[6]), 1), 'state_dir_mb_before_live': int(sys.argv[7]), 'pre_kill_s': int(sys.argv[8]), 'post_kill_s': int(sys.argv[9]), 'static_membership': sys.argv[10] != '', 'machine': json.loads(sys.argv[11]), **json.loads(sys.argv[12]), 'systems_run': sys.argv[13].split(), 'drain_s': int(sys.argv[14])}))" \
    "SIGKILL at ${RATE}/s, $HISTORY history records in state" "$RATE" "$HISTORY" "$HIST_RECORDS" "$HISTORY_SPAN" "$(rel "$TH1" "$TH0")" "$STATE_MB" "$PRE_KILL_S" "$POST_KILL_S" "${TM_EXTRA:-}" "$MACHINE" "$KEYS_BEFORE" "$SYSTEMS" "$DRAIN_S")
}

# run_ks ks-eos|ks-alos: the same scenario for the Kafka Streams baseline; summary in $WORK/SYSTEM.result.json.
run_ks() {
  local sys=$1 id="$TAG-$1" g=at_least_once port sp th0 th1 t0 tk tr state_mb hist i
  if [ "$sys" = ks-eos ]; then g=exactly_once_v2; fi
  port=$(free_port)
  python3 "$BENCH/lib/receiver.py" "$port" "$WORK/$sys.actions.jsonl" & PIDS+=($!)
  topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$port/actions" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" 15
  "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
  KS_EXTRA="--lag-out $WORK/$sys.lag.jsonl"
  if [ -z "${RECOVERY_DYNAMIC:-}" ]; then KS_EXTRA="$KS_EXTRA --instance-id $id-0"; fi
  local ks_args=("$id" "$id.orders" "$WORK/state-$id" "http://127.0.0.1:$port/actions" "$g" "$WORK/$sys.latency.jsonl" "$WORK/$sys.log" "$WORK/$sys.pid")
  start_ks "${ks_args[@]}"
  for i in $(seq 1 120); do [ -s "$WORK/$sys.lag.jsonl" ] && break; alive "$WORK/$sys.pid" "$WORK/$sys.log"; sleep 1; done
  python3 "$BENCH/lib/sampler.py" "$WORK/$sys.samples.jsonl" --pidfile "processor=$WORK/$sys.pid" --pid "broker=$BROKER_PID" & sp=$!; PIDS+=($sp)
  th0=$(now_s)
  produce_history "$id" "$sys."
  until ks_caught_up "$WORK/$sys.lag.jsonl" 5; do alive "$WORK/$sys.pid" "$WORK/$sys.log"; sleep 2; done
  th1=$(now_s)
  state_mb=$(du -sm "$WORK/state-$id" | cut -f1)
  hist=$(tail -n 1 "$WORK/$sys.lag.jsonl" | python3 -c 'import json, sys; print(json.load(sys.stdin)["orders_committed"])')
  blog "$sys: history processed in $(rel "$th1" "$th0") s (incl. producing); state dir ${state_mb} MB"
  t0=$(now_s)
  start_live "$id" "$WORK/$sys.gen.log"
  sleep "$PRE_KILL_S"
  tk=$(now_s)
  kill -9 "$(cat "$WORK/$sys.pid")"
  wait "$(cat "$WORK/$sys.pid")" 2>/dev/null || true
  tr=$(now_s)
  blog "$sys: SIGKILL at $(rel "$tk" "$t0") s; restarting"
  start_ks "${ks_args[@]}"
  wait "$GEN" 2>/dev/null || true
  sleep "$DRAIN_S"
  kill "$sp" 2>/dev/null || true; wait "$sp" 2>/dev/null || true
  stop_pidfile "$WORK/$sys.pid"
  rm -rf "$WORK/state-$id"
  local keys meta marks
  keys=$(keys_before "$WORK/$sys.actions.jsonl" "$tk" "$tr")
  keep_raw "$sys" "$WORK/$sys.actions.jsonl" "$t0" "$tk" "$tr" "$WORK/$sys.latency.jsonl"
  marks="{\"kill\": $(rel "$tk" "$t0"), \"restart\": $(rel "$tr" "$t0")}"
  meta=$(python3 -c "import json,sys; print(json.dumps({'system': sys.argv[1], 'processing_guarantee': sys.argv[2], 'rate': int(sys.argv[3]), 'history_records': int(sys.argv[4]), 'history_orders_committed': int(sys.argv[5]), 'history_processing_s': round(float(sys.argv[6]), 1), 'state_dir_mb_before_live': int(sys.argv[7]), 'static_membership': sys.argv[8] != '', 'instance_id': sys.argv[8] or None, **json.loads(sys.argv[9])}))" \
    "$sys" "$g" "$RATE" "$HISTORY" "$hist" "$(rel "$th1" "$th0")" "$state_mb" "$([ -z "${RECOVERY_DYNAMIC:-}" ] && echo "$id-0")" "$keys")
  python3 "$BENCH/lib/timeseries.py" recovery-ks "$WORK/$sys.result.json" --latency "$WORK/$sys.latency.jsonl" --lag "$WORK/$sys.lag.jsonl" \
    --log "$WORK/$sys.log" --actions "$WORK/$sys.actions.jsonl" --samples "$WORK/$sys.samples.jsonl" --gen "$WORK/$sys.gen.log" \
    --t0 "$t0" --marks "$marks" --meta "$meta" >&2
  KS_FIRST="${KS_FIRST:-$sys}"
  if [ "$KS_FIRST" = "$sys" ]; then KS_T0=$t0; KS_MARKS=$marks; fi
}

PREV=""
for s in $SYSTEMS; do
  if [ -n "$PREV" ]; then # a fresh broker for the next system
    if [ "$STARTED_BROKER" = 1 ] && [ -z "${KEEP_BROKER:-}" ]; then broker_down_wipe; broker_up; else delete_topics "$PREV"; fi
  fi
  if [ "$s" = tidemark ]; then run_tidemark; PREV="$TAG\\..*"; else run_ks "$s"; PREV="$TAG-$s.*"; fi
done

KS_RES=()
for s in $SYSTEMS; do case "$s" in ks-*) KS_RES+=(--ks-result "$s=$WORK/$s.result.json");; esac; done
if [[ " $SYSTEMS " == *" tidemark "* ]]; then
  python3 "$BENCH/lib/timeseries.py" recovery "$RESULTS/${NAME:-recovery}.json" "$RESULTS/${NAME:-recovery}.png" --samples "$WORK/samples.jsonl" \
    --gen "$WORK/gen.log" --t0 "$T0" --marks "{\"kill\": $(rel "$TK" "$T0"), \"restart\": $(rel "$TR" "$T0")}" \
    --actions "$WORK/actions.jsonl" --meta "$META" "${KS_RES[@]}"
else
  META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'rate': int(sys.argv[2]), 'history_records': int(sys.argv[3]), 'history_event_time_span_s': int(sys.argv[4]), 'pre_kill_s': int(sys.argv[5]), 'post_kill_s': int(sys.argv[6]), 'machine': json.loads(sys.argv[7]), 'systems_run': sys.argv[8].split(), 'drain_s': int(sys.argv[9])}))" \
    "SIGKILL at ${RATE}/s, $HISTORY history records in state" "$RATE" "$HISTORY" "$HISTORY_SPAN" "$PRE_KILL_S" "$POST_KILL_S" "$MACHINE" "$SYSTEMS" "$DRAIN_S")
  python3 "$BENCH/lib/timeseries.py" recovery "$RESULTS/${NAME:-recovery}.json" "$RESULTS/${NAME:-recovery}.png" \
    --gen "$WORK/$KS_FIRST.gen.log" --t0 "$KS_T0" --marks "$KS_MARKS" --meta "$META" "${KS_RES[@]}"
fi
