#!/usr/bin/env bash
# Failover (issue 14 item 4): two processes A and B share the work; A is SIGKILLed and never
# comes back, so its partitions must become active on B. Measured: kill → first action POSTed
# for a SKU of a SKU-repartition partition A owned (target ≤ 10 s), kill → B owns every
# partition, kill → caught up (tidemark: backlog age < 1 s on every partition; Kafka Streams:
# append→2xx p99 < 1 s, as recovery.sh), re-POSTs of keys POSTed before the kill, keys with
# two payloads, and the action key sets across runs.
#
#   [RUNS="tidemark ks-eos ks-eos tidemark"] (systems: tidemark, tidemark-standby, ks-eos) [SESSION=6s] [INTERVAL=10s] [DRAIN_S=10] [NAME=failover] \
#     bench/failover.sh [RATE=20000] [PRE_KILL_S=60] [POST_KILL_S=90]
#
# Per run (RUNS: the systems in order, one at a time, each on a fresh broker — the broker this
# script started is stopped, wiped and started again between runs; on a broker it did not
# start, the previous run's topics are deleted instead):
#   tidemark: two `tidemark run` processes, group-managed (no --replicas), --instance-id A/B,
#     own state directories, one shared --snapshot-dir, --session-timeout SESSION,
#     --snapshot-interval INTERVAL. No standby tasks (the default --standbys none): A's
#     partitions move to B after the session timeout, are imported from their newest snapshot
#     and replay the log since it.
#   tidemark-standby: identical to tidemark (same snapshot dir and interval, same session
#     timeout) plus `--standbys all`: each process keeps a standby task for every partition it
#     does not own (replaying the log without outputs, up to the offsets the owners committed),
#     so after the session timeout A's partitions are handed from B's standby tasks to its
#     active tasks, which resume about one commit behind, without a snapshot import. At this
#     cold start nothing is committed yet, so the warm-up (--warmup-timeout) ends at once. The
#     only other difference is the log filter (tidemark::standby=info, for the hand-over lines).
#   ks-eos: the Kafka Streams baseline (bench/kstreams), two JVMs with --instance-id A/B (static
#     membership), exactly_once_v2, num.stream.threads as everywhere (KS_THREADS, 2),
#     num.standby.replicas=1 (`--standby 1`), session.timeout.ms = SESSION for the stream
#     threads and the dispatcher (`--session-timeout-ms`), `--task-log` for the assignment.
#   Input: `tidemark gen --paced` at RATE (seed 22, ~1 KiB records, no inventory), the
#   velocity_spike rule only, in act mode (recovery.sh's topology and rule settings). The
#   generator's --start is the current minute minus EVENT_OFFSET_S (30), not `now`: every run
#   gets the same event times relative to the window grid, so the action keys of all runs can
#   be compared (SKU@window start − generator start), and the kill after PRE_KILL_S (60) lands
#   30 s into a 1-min window, where actions are dense, not at a window boundary (the rule
#   fires as SKUs cross the window's threshold; right after a boundary few have yet).
#   Once both processes own partitions (tidemark: tidemark_partition_owned on both /metrics
#   pages; KS: active tasks in both `[ks] ... tasks` lines) the generator starts; after
#   PRE_KILL_S A's SKU-repartition partitions are recorded (A's /metrics just before the kill;
#   KS: A's last task line), A gets `kill -9`, POST_KILL_S more input, DRAIN_S, then B stops.
#   Action SKUs map to partitions as each system places them (bench/lib/failover.py).
#
# QUIET_LOAD=2.5 (unset: no wait): before each run (after the broker restart) wait until no
# tidemark-chaos process runs (pgrep -x) and the 1-min load average is below QUIET_LOAD, at most
# QUIET_MAX_S (600); the wait, whether it was reached and the load are recorded per run
# (quiet_wait) next to loadavg_before (taken later, with both processes up, just before the input).
#
# Output: bench/results/${NAME:-failover}.json and .png, raw files (action logs and samples
# gzipped, process logs as .txt, /metrics pages before the live input and at the kill, per-run
# summaries r.json) under bench/results/raw/${NAME:-failover}-r<run>-<system>-*.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-20000}"; PRE_KILL_S="${2:-60}"; POST_KILL_S="${3:-90}"
PARTITIONS="${PARTITIONS:-4}"; DRAIN_S="${DRAIN_S:-10}"
SESSION="${SESSION:-6s}"; INTERVAL="${INTERVAL:-10s}"; EVENT_OFFSET_S="${EVENT_OFFSET_S:-30}"
RUNS="${RUNS:-tidemark ks-eos ks-eos tidemark}"
OUT="${NAME:-failover}"; RAW="$RESULTS/raw"; mkdir -p "$RAW"
for s in $RUNS; do case "$s" in tidemark|tidemark-standby|ks-eos) ;; *) blog "unknown system $s"; exit 2;; esac; done
if [ -z "${ALLOW_DIRTY:-}" ] && [ -z "${TIDEMARK_BIN:-}" ] && ! git -C "$ROOT" diff --quiet HEAD -- bench/kstreams; then
  blog "bench/kstreams has uncommitted changes (the baseline jar is built from the working tree): commit them or set ALLOW_DIRTY=1"; exit 2
fi
SESSION_MS=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)(ms|s|m)', sys.argv[1]); print(int(m[1]) * {'ms': 1, 's': 1000, 'm': 60000}[m[2]])" "$SESSION")
ensure_tidemark
REV="${BIN_INFO##* }"
case "$RUNS" in *ks-*) ensure_kstreams;; esac
broker_up
scenario_begin failover
py() { python3 "$BENCH/lib/failover.py" "$@"; }
QW='{}'
wait_quiet() {
  [ -n "${QUIET_LOAD:-}" ] || { QW='{}'; return 0; }
  local t0 ok=false chaos l; t0=$(date +%s)
  while :; do
    chaos=$( (pgrep -x tidemark-chaos || true) | wc -l); l=$(loadavg)
    if [ "$chaos" = 0 ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$l" "$QUIET_LOAD"; then ok=true; break; fi
    [ $(( $(date +%s) - t0 )) -ge "${QUIET_MAX_S:-600}" ] && break
    sleep 5
  done
  QW=$(python3 -c "import json,sys; a=sys.argv; print(json.dumps({'quiet_load_below': float(a[1]), 'reached': a[2] == 'true', 'waited_s': int(a[3]), 'loadavg_at_run_start': float(a[4]), 'tidemark_chaos_processes': int(a[5])}))" \
    "$QUIET_LOAD" "$ok" "$(( $(date +%s) - t0 ))" "$l" "$chaos")
  blog "quiet wait: $QW"
}
# start_gen TOPIC_PREFIX GEN_LOG: paced input; event times from the current minute.
start_gen() {
  GEN_START="$(date -u -d "@$(( $(date +%s) / 60 * 60 - EVENT_OFFSET_S ))" +%Y-%m-%dT%H:%M:%SZ)"
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$1.orders" --inventory-topic "$1.inventory" \
    --events "$(( RATE * (PRE_KILL_S + POST_KILL_S) ))" --rate "$RATE" --paced --start "$GEN_START" --seed 22 \
    --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" 2> >(stamp > "$2") >/dev/null &
  GEN=$!; PIDS+=($GEN)
}

# run_tidemark I SYSTEM (tidemark | tidemark-standby): writes $WORK/r$I.json
run_tidemark() {
  local i=$1 sys=$2 id="$TAG-r$1" d="$WORK/r$1" n ha hb sp t0 tk aff ok_a ok_b la
  local extra=() logf="warn,tidemark::snapshot=info"
  if [ "$sys" = tidemark-standby ]; then extra=(--standbys all); logf="$logf,tidemark::standby=info"; fi
  mkdir -p "$d/snap"
  ha=$(free_port); hb=$(free_port)
  local rx; rx=$(free_port)
  python3 "$BENCH/lib/receiver.py" "$rx" "$d/actions.jsonl" & PIDS+=($!); RX=$!
  topology_file "$d/t.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$rx/actions" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" 15
  "$BIN" topics --bootstrap "$BOOT" --topology "$d/t.toml" >/dev/null 2>&1
  for n in A B; do
    local h=$ha; [ $n = B ] && h=$hb
    env TIDEMARK_WEBHOOK_SECRET="${TIDEMARK_WEBHOOK_SECRET:-bench-signing-key}" "$BIN" run --bootstrap "$BOOT" --topology "$d/t.toml" \
      --state-dir "$d/state-$n" --group "$id" --http-addr "127.0.0.1:$h" --backlog-probe-every 1 --log "$logf" \
      --instance-id "$n" --session-timeout "$SESSION" --snapshot-dir "$d/snap" --snapshot-interval "$INTERVAL" "${extra[@]}" \
      2>> "$d/$n.log" >/dev/null &
    echo $! > "$d/$n.pid"
  done
  PIDS+=($(cat "$d/A.pid") $(cat "$d/B.pid"))
  wait_ready "$ha" 120 && wait_ready "$hb" 120 || { tail -30 "$d/A.log" "$d/B.log" >&2; exit 1; }
  python3 "$BENCH/lib/failover.py" sample "$d/samples.jsonl" --url "A=http://127.0.0.1:$ha/metrics" --url "B=http://127.0.0.1:$hb/metrics" & sp=$!; PIDS+=($sp)
  # settled: every partition of orders and sku-repartition owned by exactly one of the two, and
  # both own some partition (any source)
  for n in $(seq 1 120); do
    curl -sf "127.0.0.1:$ha/metrics" > "$d/A.pre.metrics" || true; curl -sf "127.0.0.1:$hb/metrics" > "$d/B.pre.metrics" || true
    if python3 - "$d/A.pre.metrics" "$d/B.pre.metrics" "$PARTITIONS" <<'PY'
import re, sys
def owned(path):
    return {m[0] + "[" + m[1] + "]" for m in re.findall(r'tidemark_partition_owned\{source="([^"]+)",partition="(\d+)"\} 1', open(path).read())}
a, b = owned(sys.argv[1]), owned(sys.argv[2]); n = int(sys.argv[3])
want = {f"{s}[{p}]" for s in ("orders", "sku-repartition") for p in range(n)}
sys.exit(0 if a and b and not (a & b) and want <= (a | b) else 1)
PY
    then break; fi
    alive "$d/A.pid" "$d/A.log"; alive "$d/B.pid" "$d/B.log"; sleep 1
  done
  sleep 3; curl -sf "127.0.0.1:$ha/metrics" > "$d/A.pre.metrics" || true; curl -sf "127.0.0.1:$hb/metrics" > "$d/B.pre.metrics" || true
  # the process to kill: the one owning more SKU repartition partitions (A on a tie)
  local V=A S=B hv=$ha
  if [ "$(py owned "$d/B.pre.metrics" sku-repartition | wc -w)" -gt "$(py owned "$d/A.pre.metrics" sku-repartition | wc -w)" ]; then V=B S=A hv=$hb; fi
  la=$(loadavg)
  SPLIT=$(for n in A B; do for src in orders sku-repartition inventory combine-repartition; do printf '%s.%s=[%s] ' $n $src "$(py owned "$d/$n.pre.metrics" $src)"; done; done)
  blog "run $i $sys: $SPLIT; killing $V; loadavg $la"
  t0=$(now_s)
  start_gen "$id" "$d/gen.log"
  sleep "$PRE_KILL_S"
  curl -sf "127.0.0.1:$ha/metrics" > "$d/A.kill.metrics" || true; curl -sf "127.0.0.1:$hb/metrics" > "$d/B.kill.metrics" || true
  alive "$d/$V.pid" "$d/$V.log"
  tk=$(now_s)
  kill -9 "$(cat "$d/$V.pid")"; wait "$(cat "$d/$V.pid")" 2>/dev/null || true; rm -f "$d/$V.pid"
  aff=$(py owned "$d/$V.kill.metrics" sku-repartition)
  ok_a=$(py owned "$d/$V.kill.metrics" orders); ok_b=$(py owned "$d/$S.kill.metrics" orders)
  SPLIT_K=$(for n in A B; do for src in orders sku-repartition inventory combine-repartition; do printf '%s.%s=[%s] ' $n $src "$(py owned "$d/$n.kill.metrics" $src)"; done; done)
  blog "run $i $sys: kill -9 $V at $(rel "$tk" "$t0") s; at the kill: $SPLIT_K"
  wait "$GEN" 2>/dev/null || true
  sleep "$DRAIN_S"
  kill "$sp" 2>/dev/null || true; wait "$sp" 2>/dev/null || true
  stop_pidfile "$d/$S.pid"
  kill "$RX" 2>/dev/null || true
  local meta
  meta=$(python3 -c "import json,sys; a=sys.argv; print(json.dumps({'loadavg_before': float(a[1]), 'gen_start': a[2], 'killed_owned_orders_at_kill': a[3].split(), 'survivor_owned_orders_at_kill': a[4].split(), 'both_owned_orders_partitions_at_kill': bool(a[3].strip() and a[4].strip()), 'snapshot_dir_mb': int(a[5]), 'assignment_before_live': a[6].strip(), 'assignment_at_kill': a[7].strip(), 'standbys': a[8], 'tidemark_flags_extra': a[9], 'log_filter': a[10], 'quiet_wait': json.loads(a[11])}))" \
    "$la" "$GEN_START" "$ok_a" "$ok_b" "$(du -sm "$d/snap" | cut -f1)" "$SPLIT" "$SPLIT_K" \
    "$([ "$sys" = tidemark-standby ] && echo all || echo none)" "${extra[*]}" "$logf" "$QW")
  py run "$d/r.json" --system "$sys" --victim "$V" --actions "$d/actions.jsonl" --t0 "$t0" --tk "$tk" --affected "$aff" --partitions "$PARTITIONS" \
    --gen-start "$GEN_START" --samples "$d/samples.jsonl" --tm-log-b "$d/$S.log" --tm-log-a "$d/$V.log" --meta "$meta" >&2
  rm -rf "$d"/state-* "$d/snap"
}

# run_ks I: the Kafka Streams baseline, exactly_once_v2, standby 1
run_ks() {
  local i=$1 id="$TAG-r$1" d="$WORK/r$1" n rx t0 tk aff ok_a ok_b la
  mkdir -p "$d"
  rx=$(free_port)
  python3 "$BENCH/lib/receiver.py" "$rx" "$d/actions.jsonl" & PIDS+=($!); RX=$!
  topology_file "$d/t.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$rx/actions" "${MIN_UNITS:-50}" "${FACTOR_RULE:-3.0}" 15
  "$BIN" topics --bootstrap "$BOOT" --topology "$d/t.toml" >/dev/null 2>&1
  for n in A B; do
    KS_EXTRA="--instance-id $n --standby 1 --session-timeout-ms $SESSION_MS --task-log --lag-out $d/$n.lag.jsonl" \
      start_ks "$id" "$id.orders" "$d/state-$n" "http://127.0.0.1:$rx/actions" exactly_once_v2 "$d/$n.latency.jsonl" "$d/$n.log" "$d/$n.pid"
  done
  PIDS+=($(cat "$d/A.pid") $(cat "$d/B.pid"))
  for n in $(seq 1 180); do # both have active tasks of both topics
    ok_a=$(py ks-owned "$d/A.log" "$id.sku-repartition"); ok_b=$(py ks-owned "$d/B.log" "$id.sku-repartition")
    if [ -n "$ok_a" ] && [ -n "$ok_b" ] && [ -n "$(py ks-owned "$d/A.log" "$id.orders")" ] && [ -n "$(py ks-owned "$d/B.log" "$id.orders")" ] \
       && grep -q 'state REBALANCING -> RUNNING' "$d/A.log" && grep -q 'state REBALANCING -> RUNNING' "$d/B.log"; then break; fi
    alive "$d/A.pid" "$d/A.log"; alive "$d/B.pid" "$d/B.log"; sleep 1
  done
  sleep 3 # standby tasks are assigned in a follow-up rebalance
  la=$(loadavg)
  blog "run $i ks-eos: A active orders [$(py ks-owned "$d/A.log" "$id.orders")], B [$(py ks-owned "$d/B.log" "$id.orders")]; loadavg $la"
  t0=$(now_s)
  start_gen "$id" "$d/gen.log"
  sleep "$PRE_KILL_S"
  alive "$d/A.pid" "$d/A.log"
  tk=$(now_s)
  kill -9 "$(cat "$d/A.pid")"; wait "$(cat "$d/A.pid")" 2>/dev/null || true; rm -f "$d/A.pid"
  local tkms; tkms=$(python3 -c "print(int(float('$tk') * 1000))")
  aff=$(py ks-owned "$d/A.log" "$id.sku-repartition" "$tkms")
  ok_a=$(py ks-owned "$d/A.log" "$id.orders" "$tkms"); ok_b=$(py ks-owned "$d/B.log" "$id.orders" "$tkms")
  blog "run $i ks-eos: kill -9 A at $(rel "$tk" "$t0") s; A active sku-repartition [$aff], orders [$ok_a]; B orders [$ok_b]"
  wait "$GEN" 2>/dev/null || true
  sleep "$DRAIN_S"
  stop_pidfile "$d/B.pid"
  kill "$RX" 2>/dev/null || true
  local meta
  meta=$(python3 -c "import json,sys; a=sys.argv; print(json.dumps({'loadavg_before': float(a[1]), 'gen_start': a[2], 'killed_owned_orders_at_kill': a[3].split(), 'survivor_owned_orders_at_kill': a[4].split(), 'both_owned_orders_partitions_at_kill': bool(a[3].strip() and a[4].strip()), 'processing_guarantee': 'exactly_once_v2', 'num_standby_replicas': 1, 'num_stream_threads': int(a[5]), 'affected_from': 'A last [ks] tasks line before the kill (active tasks input partitions)', 'quiet_wait': json.loads(a[6])}))" \
    "$la" "$GEN_START" "$ok_a" "$ok_b" "${KS_THREADS:-2}" "$QW")
  py run "$d/r.json" --system ks-eos --actions "$d/actions.jsonl" --t0 "$t0" --tk "$tk" --affected "$aff" --partitions "$PARTITIONS" \
    --gen-start "$GEN_START" --ks-log-b "$d/B.log" --ks-latency-a "$d/A.latency.jsonl" --ks-latency-b "$d/B.latency.jsonl" \
    --ks-lag-b "$d/B.lag.jsonl" --meta "$meta" >&2
  rm -rf "$d"/state-*
}

i=0; PREV=""; SUMMARIES=()
for s in $RUNS; do
  i=$((i + 1))
  if [ -n "$PREV" ]; then
    if [ "$STARTED_BROKER" = 1 ] && [ -z "${KEEP_BROKER:-}" ]; then broker_down_wipe; broker_up; else delete_topics "$PREV"; fi
  fi
  wait_quiet
  blog "run $i/$(echo $RUNS | wc -w): $s"
  case "$s" in tidemark*) run_tidemark "$i" "$s";; *) run_ks "$i";; esac
  PREV="$TAG-r$i\\..*"
  # raw files of this run
  for f in "$WORK/r$i"/*; do # logs as .txt (*.log is git-ignored), the large JSON lines gzipped
    [ -f "$f" ] || continue
    case "$f" in
      *.pid|*.toml.src) ;;
      *.log) cp "$f" "$RAW/$OUT-r$i-$s-$(basename "$f").txt" ;;
      */actions.jsonl|*/samples.jsonl) gzip -c "$f" > "$RAW/$OUT-r$i-$s-$(basename "$f").gz" ;;
      *) cp "$f" "$RAW/$OUT-r$i-$s-$(basename "$f")" ;;
    esac
  done
  SUMMARIES+=("$WORK/r$i/r.json")
done

META=$(python3 -c "import json,sys; a=sys.argv; print(json.dumps({'title': f'failover: kill -9 of 1 of 2 processes at {a[1]}/s (session {a[5]}, tidemark snapshot interval {a[6]}{\", tidemark-standby: --standbys all\" if \"tidemark-standby\" in a[8].split() else \"\"}, Kafka Streams standby=1)', 'rate': int(a[1]), 'pre_kill_s': int(a[2]), 'post_kill_s': int(a[3]), 'drain_s': int(a[4]), 'session_timeout': a[5], 'session_timeout_ms': int(a[9]), 'snapshot_interval': a[6], 'partitions': int(a[7]), 'runs_order': a[8].split(), 'target_s': 10, 'event_offset_s': int(a[14]), 'tidemark_revision': a[10], 'repo_revision': a[11], 'machine': json.loads(a[12]), 'raw_prefix': 'results/raw/' + a[13] + '-r<run>-<system>-'}))" \
  "$RATE" "$PRE_KILL_S" "$POST_KILL_S" "$DRAIN_S" "$SESSION" "$INTERVAL" "$PARTITIONS" "$RUNS" "$SESSION_MS" "$REV" \
  "$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- bench || echo '+dirty bench/')" "$MACHINE" "$OUT" "$EVENT_OFFSET_S")
py report "$RESULTS/$OUT.json" "$RESULTS/$OUT.png" "${SUMMARIES[@]}" --meta "$META"
