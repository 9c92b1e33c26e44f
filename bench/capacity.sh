#!/usr/bin/env bash
# Capacity per core and scaling efficiency at 1 and 2 instances (issue 16's row "capacity per
# core, 1 and 2 instances; pods for a 200 k/s spike"), in alternating blocks.
#
#   [CORE=1] [NAME=capacity] [TIDEMARK_BIN=… TIDEMARK_REV=…] bench/capacity.sh [EVENTS=1000000] [BLOCKS=5]
#
# This host has two cores, shared by the broker and the processor. To measure what one core of
# processing does, the broker (every thread, `taskset -a -p`) and the action receiver run on the
# other core for the whole series and the processor on CORE alone (`taskset -c CORE`); the
# broker's own CPU time per run is recorded, so a broker that became the limit shows.
# Two configurations drain the same pre-generated log (velocity_spike in `act` mode, as
# drain_ab.sh: 4 partitions, ~1 KiB records, no inventory records):
#   1pod:  one `tidemark run --exit-at-end` on CORE;
#   2pods: two, `--replicas 2` (static ownership by ordinal: each owns half the partitions of
#          every topic, the SKU repartition hop goes through the broker between them, as
#          between two pods), both on CORE, started together; the run ends when both exited.
# One warm-up of each (discarded), then BLOCKS blocks of 1pod, 2pods, 2pods, 1pod (BLOCKS >= 5
# is the method). Every run starts from empty state and a fresh group. Before each run: the
# quiet-host wait (wait_quiet: load and the hypervisor's steal; both recorded).
#
# What the two configurations give:
# - capacity per core: 1pod's events/s with the core to itself (and its busy fraction of that
#   core: CPU seconds / wall, near 1.0 when the core is the limit);
# - scaling efficiency at 2 instances: 2pods' events/s over 1pod's on the same core. Two pods
#   on one core do the same work as two pods on two cores, plus what splitting costs (a second
#   process's fixed work, the group, a second transactional producer, lines that now cross
#   between processes); 1.0 means splitting costs nothing. What this cannot show is contention
#   that only two hosts would have (network, a shared broker at twice the fetch rate): a second
#   host is needed for that, and the result says so.
# From these, lib/capacity.py states the pods (of one such core each) a 200 k/s spike needs to
# stay inside the 10 s budget (a drain of >= 5/6 × 200 k/s, the spike row's arithmetic), and
# the broker CPU it implies.
# Outputs checked in every run: the set of action keys (both pods' POSTs together) equals that
# of the first measured run, else the script stops (a faster wrong configuration is no result);
# re-sent POSTs are counted.
# Output: bench/results/$NAME.json, $NAME.png; raw: bench/results/raw/$NAME-runs.jsonl and per run
# and pod the sampler's lines, raw/$NAME-rNN-podK.samples.jsonl.gz (the steady window is
# recomputable from them with lib/capacity.py's steady_window).
# Time: ~1 min per run at 1 M events (~25 min for 22 runs).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
EVENTS="${1:-1000000}"; BLOCKS="${2:-5}"; PARTITIONS="${PARTITIONS:-4}"; NAME="${NAME:-capacity}"; CORE="${CORE:-1}"
NCPU="$(nproc)"
if [ "$NCPU" -lt 2 ]; then blog "needs 2 cores (one for the broker, one for the processor); this host has $NCPU"; exit 2; fi
OTHER="$(python3 -c "print(','.join(str(c) for c in range($NCPU) if c != $CORE))")"
if [ "$BLOCKS" -lt 5 ]; then blog "BLOCKS=$BLOCKS < 5: a plumbing check, not issue 16's method (the result says so)"; fi
ensure_tidemark
TM_REV="${BIN_INFO#* * * }"
broker_up
TAG="cap-$(date +%s)"
WORK="$(mktemp -d "/tmp/bench-$TAG.XXXX")"
RECV=""; RAW="$RESULTS/raw"; mkdir -p "$RAW"
cleanup() {
  if [ -n "$RECV" ]; then kill "$RECV" 2>/dev/null || true; fi
  taskset -a -p -c "0-$((NCPU - 1))" "$BROKER_PID" >/dev/null 2>&1 || true
  delete_topics "$TAG.*" 2>/dev/null || true
  eval "${trap_extra:-}"; broker_down_wipe; rm -rf "$WORK"
}
trap cleanup EXIT
ORDERS="$TAG.orders"
drain_log "$TAG" "$ORDERS" "$EVENTS" "$PARTITIONS" "$WORK" "$WORK/gen.json"
taskset -a -p -c "$OTHER" "$BROKER_PID" >/dev/null
blog "broker (pid $BROKER_PID, all threads) on CPU $OTHER; the processor on CPU $CORE"

: > "$WORK/runs.jsonl"
run=0
run_one() { # CONFIG PHASE BLOCK
  local config=$1 phase=$2 block=$3 id pods port host0 host1 broker0 broker1 k
  run=$((run + 1)); id="$TAG-r$run"
  case "$config" in 1pod) pods=1 ;; 2pods) pods=2 ;; esac
  wait_quiet
  blog "run $run: $config, $phase, block $block, load $(loadavg), steal $QUIET_STEAL% (waited ${QUIET_WAITED}s)"
  port="$(free_port)"
  taskset -c "$OTHER" python3 "$BENCH/lib/receiver.py" "$port" "$WORK/$id.actions" & RECV=$!
  topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$port/actions" 50 3.0 15 "$ORDERS"
  "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
  local load; load="$(loadavg)"
  host0="$(host_ticks)"; broker0="$(cpu_ticks "$BROKER_PID")"
  local pids=() samplers=() args mport child
  for k in $(seq 0 $((pods - 1))); do
    args=(); mport="$(free_port)"
    if [ "$pods" -gt 1 ]; then args=(--replicas "$pods" --instance-id "$id-$k"); fi
    TIDEMARK_WEBHOOK_SECRET=bench-signing-key taskset -c "$CORE" /usr/bin/time -f '%e %U %S %M' -o "$WORK/$id-$k.time" \
      "$BIN" run --bootstrap "$BOOT" --topology "$WORK/$id.toml" --state-dir "$WORK/state-$id-$k" --group "$id" \
      --exit-at-end --log warn --http-addr "127.0.0.1:$mport" "${args[@]}" 2> "$WORK/$id-$k.log" >/dev/null &
    pids+=($!)
    child=""; for _ in $(seq 1 50); do child="$(pgrep -P "$!" -n || true)"; [ -n "$child" ] && break; sleep 0.02; done
    taskset -c "$OTHER" python3 "$BENCH/lib/sampler.py" "$WORK/$id-$k.samples" --url "http://127.0.0.1:$mport/metrics" \
      --pid "pod=${child:-0}" --interval 0.5 & samplers+=($!)
  done
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}" || { blog "run $run pod $k failed"; tail -20 "$WORK/$id-$k.log" >&2; exit 1; }
  done
  host1="$(host_ticks)"; broker1="$(cpu_ticks "$BROKER_PID")"
  kill "${samplers[@]}" 2>/dev/null || true; wait "${samplers[@]}" 2>/dev/null || true
  kill "$RECV"; wait "$RECV" 2>/dev/null || true; RECV=""
  rm -rf "$WORK"/state-"$id"-*
  for k in $(seq 0 $((pods - 1))); do
    if [ -f "$WORK/$id-$k.samples" ]; then gzip -c "$WORK/$id-$k.samples" > "$RAW/$NAME-r$(printf %02d "$run")-pod$k.samples.jsonl.gz"; fi
  done
  BENCH="$BENCH" python3 - "$run" "$config" "$phase" "$block" "$EVENTS" "$WORK/$id.actions" "$load" "$QUIET_STEAL" "$QUIET_WAITED" \
      "$host0" "$host1" "$broker0" "$broker1" "$(getconf CLK_TCK)" "$WORK/$id"-*.time <<'PY' | tee -a "$WORK/runs.jsonl" >&2
import hashlib, json, os, sys
sys.path.insert(0, os.path.join(os.environ["BENCH"], "lib"))
from capacity import steady_window
(run, config, phase, block, events, actions, load, steal_before, waited,
 host0, host1, broker0, broker1, tck), times = sys.argv[1:15], sys.argv[15:]
events, tck = int(events), float(tck)
steady = steady_window([t[: -len(".time")] + ".samples" for t in times], events, tck)
pods = []
for t in times:
    wall, user, sys_s, rss = open(t).read().split()[-4:]
    pods.append({"wall_s": float(wall), "cpu_s": round(float(user) + float(sys_s), 2), "peak_rss_mb": round(int(rss) / 1024, 1)})
wall = max(p["wall_s"] for p in pods)
cpu = sum(p["cpu_s"] for p in pods)
keys = sorted(json.loads(line)["key"] for line in open(actions) if line.strip())
(b0, s0, t0), (b1, s1, t1) = [[int(x) for x in h.split()] for h in (host0, host1)]
print(json.dumps({
    "run": int(run), "config": config, "pods": len(pods), "phase": phase, "block": int(block), "events": events,
    "wall_s": wall, "events_per_s": round(events / wall), "cpu_s": round(cpu, 2),
    "cpu_us_per_event": round(cpu / events * 1e6, 2), "core_busy": round(cpu / wall, 3),
    "peak_rss_mb": round(sum(p["peak_rss_mb"] for p in pods), 1), "per_pod": pods,
    "steady": steady,
    "broker_cpu_s": round((int(broker1) - int(broker0)) / tck, 2),
    "broker_us_per_event": round((int(broker1) - int(broker0)) / tck / events * 1e6, 2),
    "posts": len(keys), "distinct_keys": len(set(keys)), "resent": len(keys) - len(set(keys)),
    "keys_sha256": hashlib.sha256("\n".join(sorted(set(keys))).encode()).hexdigest(),
    "loadavg_before": float(load), "steal_before_pct": float(steal_before), "quiet_waited_s": int(waited),
    "steal_pct": round(100 * (s1 - s0) / max(1, t1 - t0), 2)}))
PY
}
run_one 1pod warmup 0; run_one 2pods warmup 0
for b in $(seq 1 "$BLOCKS"); do for c in 1pod 2pods 2pods 1pod; do run_one "$c" measured "$b"; done; done
cp "$WORK/runs.jsonl" "$RAW/$NAME-runs.jsonl"
python3 "$BENCH/lib/capacity.py" "$WORK/runs.jsonl" "$WORK/gen.json" "$RESULTS/$NAME.json" "$RESULTS/$NAME.png" \
  --rev "$TM_REV" --core "$CORE" --broker-cpus "$OTHER" --command "bench/capacity.sh $EVENTS $BLOCKS" \
  --drain-ref "$RESULTS/drain_vs_ks.json"
cat "$RESULTS/$NAME.json"
