#!/usr/bin/env bash
# Drain throughput of tidemark vs Kafka Streams (at_least_once and exactly_once_v2) over one
# pre-generated log, never concurrently, in A-B-B-A order, after discarded warm-up runs.
#
#   bench/throughput_compare.sh [EVENTS] [REPS]     (defaults: 2000000 events of ~1 KiB, 1 A-B-B-A block)
#
# Sequence per block: tidemark, ks-alos, ks-eos, ks-eos, ks-alos, tidemark (so every pair is
# A-B-B-A), preceded once by a warm-up run of each (discarded). Every run starts from an empty
# state and a fresh consumer group / application id over the same orders topic, processes the
# whole log with velocity_spike in `act` mode (default thresholds) POSTing to a local receiver,
# and exits at the end of the log. Measured per run: wall time (process start → exit at end),
# CPU seconds of the processor (utime+stime, all threads) and of the broker (/proc/PID/stat
# delta), peak RSS of the processor, host steal time (/proc/stat delta). For Kafka Streams also
# App's `drained_ms` (the instance's start, ~0.1 s after the JVM's → input committed at its end
# and the last action POSTed) as drained_s / events_per_s_drained; the figures above stay
# process-based, as in older results.
# bench/drain_vs_ks.sh is the comparison with the JVM warmed up in-process (issue 16's method).
# Env: KAFKA_PORT (39092), PARTITIONS (4), KS_THREADS (2), KS_HEAP (1g), WARMUP (1), EVENT_BYTES (1024).
# Output: bench/results/throughput_compare.json (+ .png).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
EVENTS="${1:-2000000}"; REPS="${2:-1}"
PARTITIONS="${PARTITIONS:-4}"; KS_THREADS="${KS_THREADS:-2}"; KS_HEAP="${KS_HEAP:-1g}"; WARMUP="${WARMUP:-1}"
ensure_tidemark; ensure_kstreams; broker_up
TAG="tp-$(date +%s)"
WORK="$(mktemp -d /tmp/bench-$TAG.XXXX)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; broker_down; rm -rf "$WORK"/state-*; rm -f "$BIN"; }
trap cleanup EXIT
PORT_R=$((18000 + RANDOM % 1000))
python3 "$BENCH/lib/receiver.py" "$PORT_R" /dev/null & PIDS+=($!)
ORDERS="$TAG.orders"
topology_file "$WORK/topology-gen.toml" "$TAG" "$PARTITIONS" act "http://127.0.0.1:$PORT_R/actions" 50 3.0 15 "$ORDERS"
"$BIN" topics --bootstrap "$BOOT" --topology "$WORK/topology-gen.toml" >&2
START="$(date -u -d '-30 min' +%Y-%m-%dT%H:%M:%SZ)"
blog "generating $EVENTS events of ~${EVENT_BYTES:-1024} B into $ORDERS ($PARTITIONS partitions)"
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$ORDERS" --inventory-topic "$TAG.inventory" --events "$EVENTS" \
  --rate 20000 --seed 1 --start "$START" --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" > "$WORK/gen.json"
cat "$WORK/gen.json" >&2
sync; sleep 5

OUT="$RESULTS/throughput_compare.jsonl"
: > "$WORK/runs.jsonl"
run_one() { # system phase
  local sys=$1 phase=$2 id="$TAG-$1-$RANDOM"
  local b0 s0 b1 s1 st0 st1
  b0=$(cpu_ticks "$BROKER_PID"); read -r st0 s0 < <(steal_total)
  local load; load=$(loadavg)
  local t0; t0=$(date +%s.%N)
  if [ "$sys" = tidemark ]; then
    topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$PORT_R/actions" 50 3.0 15 "$ORDERS"
    "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
    t0=$(date +%s.%N)
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/$id.time" "$BIN" run --bootstrap "$BOOT" --topology "$WORK/$id.toml" \
      --state-dir "$WORK/state-$id" --group "$id" --exit-at-end --log warn 2> "$WORK/$id.log" >/dev/null
  else
    local g=at_least_once; [ "$sys" = ks-eos ] && g=exactly_once_v2
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/$id.time" java -Xms"$KS_HEAP" -Xmx"$KS_HEAP" -XX:+UseG1GC -jar "$KS_JAR" \
      --bootstrap "$BOOT" --app-id "$id" --prefix "$id" --orders "$ORDERS" --partitions "$PARTITIONS" --guarantee "$g" \
      --threads "$KS_THREADS" --state-dir "$WORK/state-$id" --action-url "http://127.0.0.1:$PORT_R/actions" --exit-at-end \
      > "$WORK/$id.out" 2> "$WORK/$id.log"
  fi
  local t1; t1=$(date +%s.%N)
  b1=$(cpu_ticks "$BROKER_PID"); read -r st1 s1 < <(steal_total)
  rm -rf "$WORK/state-$id"
  read -r wall user sys_s rss < "$WORK/$id.time"
  python3 - "$sys" "$phase" "$EVENTS" "$wall" "$user" "$sys_s" "$rss" "$((b1 - b0))" "$((st1 - st0))" "$((s1 - s0))" "$CLK_TCK" "$load" "$BIN_INFO" "$WORK/$id.out" <<'PY' | tee -a "$WORK/runs.jsonl" >&2
import json, os, sys
s, phase, ev, wall, user, sy, rss, bt, st, tot, hz, load, bininfo, outf = sys.argv[1:]
ev, wall, cpu = int(ev), float(wall), float(user) + float(sy)
broker = int(bt) / int(hz)
r = {"system": s, "phase": phase, "events": ev, "wall_s": wall, "events_per_s": round(ev / wall),
  "cpu_s": round(cpu, 2), "broker_cpu_s": round(broker, 2),
  "cpu_s_per_million": round(cpu / ev * 1e6, 2), "cpu_s_per_million_incl_broker": round((cpu + broker) / ev * 1e6, 2),
  "peak_rss_mb": round(int(rss) / 1024, 1), "steal_pct": round(100 * int(st) / max(1, int(tot)), 2),
  "loadavg_before": float(load), **({"tidemark_binary": bininfo} if s == "tidemark" else {})}
# Kafka Streams: App's own line (instance start -> orders and sku-repartition committed at
# their ends and the last action POSTed; JVM start-up and the final close excluded).
drained = [json.loads(l) for l in open(outf) if '"drained_ms"' in l] if os.path.exists(outf) else []
if drained:
    d = drained[-1]
    r.update(drained_s=d["drained_ms"] / 1000, events_per_s_drained=round(ev / (d["drained_ms"] / 1000)))
    if "cpu_ms" in d:
        r.update(cpu_s_drained=d["cpu_ms"] / 1000, peak_rss_mb_drained=round(d["peak_rss_kb"] / 1024, 1))
print(json.dumps(r))
PY
  sleep 3
}
if [ "$WARMUP" -gt 0 ]; then for s in tidemark ks-alos ks-eos; do run_one "$s" warmup; done; fi
for _ in $(seq 1 "$REPS"); do for s in tidemark ks-alos ks-eos ks-eos ks-alos tidemark; do run_one "$s" measured; done; done
cat "$WORK/runs.jsonl" >> "$OUT"
python3 "$BENCH/lib/summarize_throughput.py" "$WORK/runs.jsonl" "$WORK/gen.json" "$RESULTS/throughput_compare.json"
