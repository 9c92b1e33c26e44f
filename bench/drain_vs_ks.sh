#!/usr/bin/env bash
# Drain throughput of tidemark against the Kafka Streams baseline over one pre-generated log
# (issue 16's method: a committed binary, a fair baseline, alternating A-B-B-A blocks, outputs
# checked in every run, raw runs kept).
#
#   [BENCH_REV=HEAD] [KS_GUARANTEE=exactly_once_v2] [STEAL_MAX_PCT=…] bench/drain_vs_ks.sh [EVENTS=2000000] [BLOCKS=5]
#
# One orders log (EVENTS ~1-KiB events, PARTITIONS partitions, seed 1) and one warm-up log for
# the JVM (WARMUP_EVENTS, seed 2) are generated once. tidemark is the committed BENCH_REV built
# by bench/lib/build_rev.sh (TIDEMARK_BIN / ALLOW_DIRTY as in lib/common.sh). One warm-up run
# of each system (discarded), then BLOCKS blocks of tidemark, ks, ks, tidemark.
#
# Every run starts from an empty state and a fresh group / application id over the same orders
# topic, runs velocity_spike in `act` mode (min_units 50, factor 3.0, 15 windows) POSTing to
# its own receiver, and stops at the end of the log:
# - tidemark: `run --exit-at-end` (exits once the log is consumed, the SKU merge released and
#   every action POSTed). drained time = the process's wall time (exec → exit, so its start-up
#   and shutdown count against it); CPU = the process's user+sys (all threads); peak RSS =
#   its maximum resident set.
# - Kafka Streams (KS_GUARANTEE, default exactly_once_v2; at_least_once is the other choice):
#   one JVM that first drains the warm-up log under its own application id and topics (JIT
#   warm-up, discarded; App.java `--warmup-orders`), closes that instance, and then starts the
#   measured instance with `--exit-at-end`. drained time = measured start → orders and
#   sku-repartition committed at their ends and the last action POSTed (App's `drained_ms`);
#   CPU = the JVM's process CPU (all threads, GC and JIT included) over that span; peak RSS =
#   VmHWM since the measured start. The whole JVM's wall and CPU (warm-up included) are kept
#   as process_wall_s / process_cpu_s.
# Per run also: events/s (events / drained time), CPU µs per event, the 1-minute load average
# before the run, and the host over the processor's whole life (`host`: busy CPU seconds of all
# CPUs, the hypervisor's steal in seconds and per cent, the broker's CPU seconds) — to tell a
# slower host (steal) or a busier broker (log cleaner, page-cache misses) from a slower processor
# when runs of the same input differ, as tidemark's did in the 548616b series (bimodal, ~30 %
# more CPU per event in 4 of 10 runs). This VM exposes no hardware counters (perf: instructions
# and cycles "not supported"), so work and clock speed cannot be split further here.
# Checked per run: the set of action Idempotency-Keys equals the first run's
# (and, in the summary, the first measured run's): tidemark and Kafka Streams must agree, a
# faster wrong system is not a result (KEYS_MUST_MATCH=0 records a difference instead of
# stopping; the key lists are kept in results/raw/$NAME-keys-*.txt). POSTs re-sent under the
# same key are counted (`resent`).
# Env: KAFKA_PORT (39092), PARTITIONS (4), EVENT_BYTES (1024), WARMUP_EVENTS (300000),
# KS_THREADS (2), KS_HEAP (1g), QUIET_LOAD (2.5) / QUIET_MAX_S (120): before each run, wait up
# to QUIET_MAX_S for the load average to fall below QUIET_LOAD; STEAL_MAX_PCT (unset: none) /
# STEAL_RETRIES (2): a measured run above that steal is discarded and run again (see
# run_measured); NAME (drain_vs_ks); KSTREAMS_JAR
# (a baseline jar to run instead of bench/kstreams/build.sh's build of the working tree, where
# lib/common.sh's ensure_kstreams honours it); the baseline's revision is recorded per run.
# Output: bench/results/$NAME.json (per system median and min–max, ratios), raw runs
# bench/results/raw/$NAME-runs.jsonl, plot bench/results/$NAME.png.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
EVENTS="${1:-2000000}"; BLOCKS="${2:-5}"
PARTITIONS="${PARTITIONS:-4}"; NAME="${NAME:-drain_vs_ks}"; WARMUP_EVENTS="${WARMUP_EVENTS:-300000}"
KS_GUARANTEE="${KS_GUARANTEE:-exactly_once_v2}"; KS_THREADS="${KS_THREADS:-2}"; KS_HEAP="${KS_HEAP:-1g}"
QUIET_LOAD="${QUIET_LOAD:-2.5}"; QUIET_MAX_S="${QUIET_MAX_S:-120}"; KEYS_MUST_MATCH="${KEYS_MUST_MATCH:-1}"
case "$KS_GUARANTEE" in
  exactly_once_v2) KS=ks-eos ;;
  at_least_once) KS=ks-alos ;;
  *) blog "KS_GUARANTEE must be exactly_once_v2 or at_least_once"; exit 2 ;;
esac
ensure_tidemark; ensure_kstreams; broker_up
# Which baseline ran: the jar given (KSTREAMS_JAR), or the last commit touching bench/kstreams
# (+dirty when the working tree's sources differ from it).
if [ -n "${KSTREAMS_JAR:-}" ]; then KS_INFO="$KSTREAMS_JAR"; else
  KS_INFO="$(git -C "$ROOT" log -1 --format=%h -- bench/kstreams)$(git -C "$ROOT" diff --quiet HEAD -- bench/kstreams/src bench/kstreams/pom.xml || echo +dirty)"
fi
TAG="dk-$(date +%s)"
WORK="$(mktemp -d "/tmp/bench-$TAG.XXXX")"
RAW="$RESULTS/raw"; mkdir -p "$RAW"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -s "$WORK/runs.jsonl" ] && [ ! -f "$WORK/done" ]; then cp "$WORK/runs.jsonl" "$RAW/$NAME-runs.failed.jsonl"; fi
  delete_topics "$TAG.*" 2>/dev/null || true
  broker_down_wipe; rm -rf "$WORK" "$BIN"
}
trap cleanup EXIT
MACHINE="$(machine_json | python3 -c 'import json, sys; m = json.load(sys.stdin); m["kstreams_baseline"] = sys.argv[1]; print(json.dumps(m))' "$KS_INFO")"
# Where the KS warm-up instance POSTs (its actions are not this run's outputs).
SINK_PORT="$(free_port)"
python3 "$BENCH/lib/receiver.py" "$SINK_PORT" /dev/null & PIDS+=($!)

ORDERS="$TAG.orders"; WARM="$TAG.warmup-orders"
START="$(date -u -d '-30 min' +%Y-%m-%dT%H:%M:%SZ)"
gen() { # TOPIC_RUN ORDERS_TOPIC EVENTS SEED OUT
  topology_file "$WORK/topology-$1.toml" "$1" "$PARTITIONS" act "http://127.0.0.1:1/actions" 50 3.0 15 "$2"
  "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/topology-$1.toml" >&2
  blog "generating $3 events of ~${EVENT_BYTES:-1024} B into $2 ($PARTITIONS partitions, seed $4)"
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$2" --inventory-topic "$1.inventory" --events "$3" \
    --rate 20000 --seed "$4" --start "$START" --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" > "$5"
}
gen "$TAG" "$ORDERS" "$EVENTS" 1 "$WORK/gen.json"
gen "$TAG.w" "$WARM" "$WARMUP_EVENTS" 2 "$WORK/gen-warmup.json"
sync; sleep 5

: > "$WORK/runs.jsonl"
n=0
run_one() { # SYSTEM PHASE
  local sys=$1 phase=$2 id port load recv rc=0
  wait_quiet
  n=$((n + 1)); id="$TAG.r$n-$sys"
  port="$(free_port)"; load="$(loadavg)"
  blog "run $n: $sys, $phase, load $load, steal ${QUIET_STEAL}% (waited ${QUIET_WAITED}s)"
  python3 "$BENCH/lib/receiver.py" "$port" "$WORK/$id.actions" & recv=$!
  local host0 broker0; host0="$(host_ticks)"; broker0="$(cpu_ticks "$BROKER_PID")"
  if [ "$sys" = tidemark ]; then
    topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$port/actions" 50 3.0 15 "$ORDERS"
    "$BIN" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
    TIDEMARK_WEBHOOK_SECRET=bench-signing-key /usr/bin/time -f '%e %U %S %M' -o "$WORK/$id.time" "$BIN" run --bootstrap "$BOOT" \
      --topology "$WORK/$id.toml" --state-dir "$WORK/state-$id" --group "$id" --exit-at-end --log warn 2> "$WORK/$id.log" >/dev/null \
      || { tail -20 "$WORK/$id.log" >&2; kill "$recv"; exit 1; }
    echo '{}' > "$WORK/$id.out"
  else
    /usr/bin/time -f '%e %U %S %M' -o "$WORK/$id.time" java -Xms"$KS_HEAP" -Xmx"$KS_HEAP" -XX:+UseG1GC -jar "$KS_JAR" \
      --bootstrap "$BOOT" --app-id "$id" --prefix "$id" --orders "$ORDERS" --partitions "$PARTITIONS" --guarantee "$KS_GUARANTEE" \
      --threads "$KS_THREADS" --state-dir "$WORK/state-$id" --action-url "http://127.0.0.1:$port/actions" \
      --min-units 50 --factor 3.0 --baseline-windows 15 \
      --warmup-orders "$WARM" --warmup-action-url "http://127.0.0.1:$SINK_PORT/actions" --exit-at-end \
      > "$WORK/$id.stdout" 2> "$WORK/$id.log" || { tail -40 "$WORK/$id.log" >&2; kill "$recv"; exit 1; }
    grep '"drained_ms"' "$WORK/$id.stdout" | tail -1 > "$WORK/$id.out"
    [ -s "$WORK/$id.out" ] || { blog "no drained_ms line from $id"; cat "$WORK/$id.stdout" >&2; tail -40 "$WORK/$id.log" >&2; exit 1; }
  fi
  local host1 broker1; host1="$(host_ticks)"; broker1="$(cpu_ticks "$BROKER_PID")"
  kill "$recv"; wait "$recv" 2>/dev/null || true
  rm -rf "$WORK/state-$id"
  python3 - "$sys" "$phase" "$n" "$EVENTS" "$WORK/$id.time" "$WORK/$id.out" "$WORK/$id.actions" "$load" "$BIN_INFO" \
    "$WORK/keys-$n.txt" "$WORK/keys-ref.txt" "$KEYS_MUST_MATCH" "$KS_INFO" "$host0" "$host1" "$broker0" "$broker1" "$CLK_TCK" \
    > "$WORK/$id.json" <<'PY' || rc=$?
import hashlib, json, os, shutil, sys
sys_, phase, n, events, timef, outf, actions, load, bininfo, keysf, reff, must, ksinfo = sys.argv[1:14]
host0, host1, broker0, broker1, tck = sys.argv[14:19]
events = int(events)
wall, user, sys_s, rss = open(timef).read().split()[-4:]
proc_cpu = float(user) + float(sys_s)
o = json.load(open(outf))
posts = [json.loads(line)["key"] for line in open(actions) if line.strip()]
keys = sorted(set(posts))
open(keysf, "w").write("\n".join(keys) + "\n")
r = {"system": sys_, "phase": phase, "run": int(n), "events": events}
if sys_ == "tidemark":
    drained, cpu, rss_mb = float(wall), proc_cpu, int(rss) / 1024
    r["tidemark_binary"] = bininfo
else:
    drained, cpu, rss_mb = o["drained_ms"] / 1000, o["cpu_ms"] / 1000, o["peak_rss_kb"] / 1024
    r["kstreams_baseline"] = ksinfo
    r.update(offsets_drained_s=o["offsets_drained_ms"] / 1000, last_post_s=o["last_post_ms"] / 1000,
             actions_caught_up=o["actions_caught_up"], peak_rss_reset=o["peak_rss_reset"],
             warmup_s=o["warmup_ms"] / 1000, warmup_cpu_s=o["warmup_cpu_ms"] / 1000, jvm_to_start_s=o["jvm_to_start_ms"] / 1000)
r.update(drained_s=round(drained, 3), events_per_s=round(events / drained), cpu_s=round(cpu, 2),
         cpu_us_per_event=round(cpu / events * 1e6, 2), peak_rss_mb=round(rss_mb, 1),
         process_wall_s=float(wall), process_cpu_s=round(proc_cpu, 2), process_peak_rss_mb=round(int(rss) / 1024, 1),
         posts=len(posts), distinct_keys=len(keys), resent=len(posts) - len(keys),
         keys_sha256=hashlib.sha256("\n".join(keys).encode()).hexdigest(), loadavg_before=float(load))
# the host over the whole process (for Kafka Streams its warm-up too): all CPUs' busy time, the
# hypervisor's steal, and the broker's CPU (log cleaner, fetch serving) — to tell a slower host
# or a busier broker from a slower processor when runs of the same input differ
(b0, s0, t0), (b1, s1, t1) = [[int(x) for x in h.split()] for h in (host0, host1)]
tck, ncpu = float(tck), os.cpu_count() or 1
r["host"] = {"busy_cpu_s": round((b1 - b0) / tck, 2), "steal_s": round((s1 - s0) / tck, 2),
             "steal_pct": round(100 * (s1 - s0) / max(1, t1 - t0), 2),
             "broker_cpu_s": round((int(broker1) - int(broker0)) / tck, 2), "cpus": ncpu}
if not os.path.exists(reff):
    shutil.copy(keysf, reff)
ref = set(open(reff).read().split())
r["keys_equal_first_run"] = ref == set(keys)
if not r["keys_equal_first_run"]:
    r["keys_only_here"], r["keys_only_in_first_run"] = len(set(keys) - ref), len(ref - set(keys))
print(json.dumps(r))
if not r["keys_equal_first_run"] and must == "1":
    sys.exit("run %s (%s): action keys differ from the first run's: %d only here, %d only in the first run"
             % (n, sys_, r["keys_only_here"], r["keys_only_in_first_run"]))
PY
  cat "$WORK/$id.json" >> "$WORK/runs.jsonl"; cat "$WORK/$id.json" >&2
  if ! grep -q '"keys_equal_first_run": true' "$WORK/$id.json"; then
    cp "$WORK/keys-ref.txt" "$RAW/$NAME-keys-first.txt"; cp "$WORK/keys-$n.txt" "$RAW/$NAME-keys-r$n-$sys.txt"
    blog "key lists kept: $RAW/$NAME-keys-first.txt, $RAW/$NAME-keys-r$n-$sys.txt"
  fi
  [ "$rc" = 0 ] || exit 1
  delete_topics "$id.*"
  sleep 3
}
# A measured run whose steal (the hypervisor's, over the processor's life) is above STEAL_MAX_PCT
# is kept in the raw runs as phase "discarded-steal" and run again in its place in the block,
# at most STEAL_RETRIES (2) times; the run after the last retry counts whatever its steal, marked
# `steal_above_ceiling`. Unset: no ceiling (every run counts, as before).
run_measured() { # SYSTEM
  local tries=0 final rc
  while :; do
    run_one "$1" measured
    [ -n "${STEAL_MAX_PCT:-}" ] || return 0
    final=$([ "$tries" -ge "${STEAL_RETRIES:-2}" ] && echo 1 || echo 0)
    rc=0
    python3 - "$WORK/runs.jsonl" "$STEAL_MAX_PCT" "$final" <<'PY' || rc=$?
import json, sys
path, ceiling, final = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
lines = open(path).read().splitlines()
r = json.loads(lines[-1])
if r["host"]["steal_pct"] <= ceiling:
    sys.exit(0)
if final:
    r["steal_above_ceiling"] = True
else:
    r["phase"] = "discarded-steal"
lines[-1] = json.dumps(r)
open(path, "w").write("\n".join(lines) + "\n")
sys.exit(0 if final else 3)
PY
    case "$rc" in 0) return 0 ;; 3) ;; *) exit 1 ;; esac
    tries=$((tries + 1))
    blog "run $n ($1): steal above ${STEAL_MAX_PCT}%: discarded, run again (retry $tries of ${STEAL_RETRIES:-2})"
  done
}
run_one tidemark warmup; run_one "$KS" warmup
for _ in $(seq 1 "$BLOCKS"); do for s in tidemark "$KS" "$KS" tidemark; do run_measured "$s"; done; done
cp "$WORK/runs.jsonl" "$RAW/$NAME-runs.jsonl"; touch "$WORK/done"
python3 "$BENCH/lib/drain_vs_ks.py" "$WORK/runs.jsonl" "$WORK/gen.json" "$WORK/gen-warmup.json" "$MACHINE" "$KS" \
  "$RESULTS/$NAME.json" "$RESULTS/$NAME.png" "$KEYS_MUST_MATCH" \
  "EVENTS=$EVENTS BLOCKS=$BLOCKS PARTITIONS=$PARTITIONS WARMUP_EVENTS=$WARMUP_EVENTS KS_GUARANTEE=$KS_GUARANTEE${STEAL_MAX_PCT:+ STEAL_MAX_PCT=$STEAL_MAX_PCT STEAL_RETRIES=${STEAL_RETRIES:-2}} NAME=$NAME bench/drain_vs_ks.sh $EVENTS $BLOCKS" \
  "${STEAL_MAX_PCT:-}"
cat "$RESULTS/$NAME.json" | python3 -c 'import json, sys; d = json.load(sys.stdin); d.pop("runs"); print(json.dumps(d, indent=1))'
