#!/usr/bin/env bash
# Recovery: tidemark runs at RATE/s with a large dedup state, is killed with SIGKILL and
# restarted at once on the same state directory. Measured: time from restart to the first
# action POSTed (and to the first action not seen before the kill), to /metrics answering,
# and to backlog age < 1 s on every partition.
#
#   bench/recovery.sh [RATE=20000] [HISTORY=4000000] [PRE_KILL_S=60] [POST_KILL_S=120]
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
# session to time out; RECOVERY_DYNAMIC=1 runs without it.
# Output: bench/results/${NAME:-recovery}.json and .png (NAME env).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-20000}"; HISTORY="${2:-4000000}"; PRE_KILL_S="${3:-60}"; POST_KILL_S="${4:-120}"
PARTITIONS="${PARTITIONS:-4}"; HISTORY_SPAN="${HISTORY_SPAN:-7200}"
ensure_tidemark; broker_up
scenario_begin recovery
[ -z "${RECOVERY_DYNAMIC:-}" ] && export TM_EXTRA="--instance-id $TAG-0"
HTTP=$(free_port)
scenario_topology
start_tidemark "$WORK/t.toml" "$WORK/state" "$TAG" "$HTTP" "$WORK/tm.log" "$WORK/tm.pid"
wait_ready "$HTTP" 120 || { cat "$WORK/tm.log" >&2; exit 1; }
python3 "$BENCH/lib/sampler.py" "$WORK/samples.jsonl" --url "http://127.0.0.1:$HTTP/metrics" \
  --pidfile "processor=$WORK/tm.pid" --pid "broker=$BROKER_PID" & SP=$!; PIDS+=($SP)
HSTART="$(date -u -d "-$HISTORY_SPAN sec" +%Y-%m-%dT%H:%M:%SZ)"
HRATE=$(python3 -c "print(max(1.0, $HISTORY / $HISTORY_SPAN))")
blog "history: $HISTORY records of ~${EVENT_BYTES_HISTORY:-0} B padding, event times over ${HISTORY_SPAN}s before now"
TH0=$(now_s)
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" --events "$HISTORY" \
  --rate "$HRATE" --start "$HSTART" --seed 21 --inventory-every 0 --event-bytes "${EVENT_BYTES_HISTORY:-0}" \
  --max-lateness 10m > "$WORK/history.json" 2> "$WORK/history.log"
caught_up() { # N consecutive samples with backlog age < 1 s on every partition and lag < RATE
  python3 - "$WORK/samples.jsonl" "$1" "$RATE" <<'PY'
import json, sys
n, rate = int(sys.argv[2]), float(sys.argv[3])
rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-n:]]
ok = len(rows) == n and all(r.get("up") and r.get("backlog_age") and max(r["backlog_age"].values()) < 1 and sum(r.get("lag", {}).values()) < rate for r in rows)
sys.exit(0 if ok else 1)
PY
}
until caught_up 5; do sleep 2; done
TH1=$(now_s)
STATE_MB=$(du -sm "$WORK/state" | cut -f1)
HIST_RECORDS=$(curl -sf "127.0.0.1:$HTTP/metrics" | awk '/^tidemark_records_total/{print $2}')
blog "history processed in $(rel "$TH1" "$TH0") s (incl. producing); state dir ${STATE_MB} MB"
T0=$(now_s)
LIVE=$(( RATE * (PRE_KILL_S + POST_KILL_S) ))
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" --events "$LIVE" \
  --rate "$RATE" --paced --start now --seed 22 --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" \
  2> >(stamp > "$WORK/gen.log") >/dev/null &
GEN=$!; PIDS+=($GEN)
sleep "$PRE_KILL_S"
TK=$(now_s)
kill -9 "$(cat "$WORK/tm.pid")"
wait "$(cat "$WORK/tm.pid")" 2>/dev/null || true
TR=$(now_s)
blog "SIGKILL at $(rel "$TK" "$T0") s; restarting"
start_tidemark "$WORK/t.toml" "$WORK/state" "$TAG" "$HTTP" "$WORK/tm.log" "$WORK/tm.pid"
wait "$GEN" 2>/dev/null || true
sleep 10
kill "$SP" 2>/dev/null || true; wait "$SP" 2>/dev/null || true
KEYS_BEFORE=$(python3 - "$WORK/actions.jsonl" "$TK" "$TR" <<'PY'
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
)
META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'rate': int(sys.argv[2]), 'history_records': int(sys.argv[3]), 'history_dedup_entries_approx': int(float(sys.argv[4] or 0)), 'history_covers_s_at_rate': round(float(sys.argv[4] or 0) / int(sys.argv[2])), 'history_event_time_span_s': int(sys.argv[5]), 'history_processing_s': round(float(sys.argv[6]), 1), 'state_dir_mb_before_live': int(sys.argv[7]), 'pre_kill_s': int(sys.argv[8]), 'post_kill_s': int(sys.argv[9]), 'static_membership': sys.argv[10] != '', 'machine': json.loads(sys.argv[11]), **json.loads(sys.argv[12])}))" \
  "SIGKILL at ${RATE}/s, $HISTORY history records in state" "$RATE" "$HISTORY" "$HIST_RECORDS" "$HISTORY_SPAN" "$(rel "$TH1" "$TH0")" "$STATE_MB" "$PRE_KILL_S" "$POST_KILL_S" "${TM_EXTRA:-}" "$MACHINE" "$KEYS_BEFORE")
python3 "$BENCH/lib/timeseries.py" recovery "$RESULTS/${NAME:-recovery}.json" "$RESULTS/${NAME:-recovery}.png" --samples "$WORK/samples.jsonl" \
  --gen "$WORK/gen.log" --t0 "$T0" --marks "{\"kill\": $(rel "$TK" "$T0"), \"restart\": $(rel "$TR" "$T0")}" \
  --actions "$WORK/actions.jsonl" --meta "$META"
