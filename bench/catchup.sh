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
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
N="${1:-2000000}"; LIVE_RATE="${2:-20000}"; MAX_S="${3:-900}"; PARTITIONS="${PARTITIONS:-4}"
ensure_tidemark; broker_up
scenario_begin catchup
HTTP=$(free_port)
scenario_topology
SPAN=$(( N / LIVE_RATE + 1 ))
BSTART="$(date -u -d "-$SPAN sec" +%Y-%m-%dT%H:%M:%SZ)"
blog "producing the backlog: $N records (event times from $BSTART, ${SPAN}s at ${LIVE_RATE}/s simulated)"
TB0=$(now_s)
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" --events "$N" \
  --rate "$LIVE_RATE" --start "$BSTART" --seed 11 --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" \
  > "$WORK/backlog.json" 2> "$WORK/backlog.log"
TB1=$(now_s)
blog "backlog produced in $(rel "$TB1" "$TB0") s; $(du -sh "$KAFKA_RUN/data" | cut -f1) on the broker"
sync; sleep 3
python3 "$BENCH/lib/sampler.py" "$WORK/samples.jsonl" --url "http://127.0.0.1:$HTTP/metrics" \
  --pidfile "processor=$WORK/tm.pid" --pid "broker=$BROKER_PID" & SP=$!; PIDS+=($SP)
T0=$(now_s)
# Live input first (open loop, due times from now), tidemark right after: both start together.
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" \
  --events $(( LIVE_RATE * MAX_S )) --rate "$LIVE_RATE" --paced --start now --seed 12 --inventory-every 0 \
  --event-bytes "${EVENT_BYTES:-1024}" 2> >(stamp > "$WORK/gen.log") >/dev/null &
GEN=$!; PIDS+=($GEN)
TS=$(now_s)
start_tidemark "$WORK/t.toml" "$WORK/state" "$TAG" "$HTTP" "$WORK/tm.log" "$WORK/tm.pid"
blog "tidemark started with a backlog of $N and live input at ${LIVE_RATE}/s; waiting for backlog age < 1 s (max ${MAX_S}s)"
END=$(( $(date +%s) + MAX_S ))
DRAINED=0
while [ "$(date +%s)" -lt "$END" ]; do
  sleep 2
  if python3 - "$WORK/samples.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]).readlines()[-5:]]
ok = len(rows) == 5 and all(r.get("up") and r.get("backlog_age") and len(r["backlog_age"]) > 0 and max(r["backlog_age"].values()) < 1 and sum(r.get("lag", {}).values()) < 100000 for r in rows)
sys.exit(0 if ok else 1)
PY
  then DRAINED=1; break; fi
done
sleep 10 # some live-only samples after the drain
kill "$GEN" 2>/dev/null || true
kill "$SP" 2>/dev/null || true; wait "$SP" 2>/dev/null || true
STATE_MB=$(du -sm "$WORK/state" | cut -f1)
META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'backlog_events': int(sys.argv[2]), 'live_rate': int(sys.argv[3]), 'drained_within_max': sys.argv[4] == '1', 'max_s': int(sys.argv[5]), 'backlog_produce_s': round(float(sys.argv[6]), 1), 'state_dir_mb': int(sys.argv[7]), 'event_bytes': int(sys.argv[8]), 'partitions': int(sys.argv[9]), 'machine': json.loads(sys.argv[10]), 'actions_received': sum(1 for _ in open(sys.argv[11]))}))" \
  "backlog $N records + live ${LIVE_RATE}/s" "$N" "$LIVE_RATE" "$DRAINED" "$MAX_S" "$(rel "$TB1" "$TB0")" "$STATE_MB" "${EVENT_BYTES:-1024}" "$PARTITIONS" "$MACHINE" "$WORK/actions.jsonl")
python3 "$BENCH/lib/timeseries.py" catchup "$RESULTS/${NAME:-catchup}.json" "$RESULTS/${NAME:-catchup}.png" --samples "$WORK/samples.jsonl" \
  --gen "$WORK/gen.log" --t0 "$T0" --marks "{\"processor_start\": $(rel "$TS" "$T0")}" --meta "$META"
