#!/usr/bin/env bash
# Drain throughput of two tidemark revisions over one pre-generated log (issue 16's method:
# committed binaries, alternating A-B-B-A blocks, outputs checked in every run, raw samples).
#
#   bench/drain_ab.sh REV_A REV_B [EVENTS=2000000] [BLOCKS=3]
#
# Both revisions are built in clean worktrees (bench/lib/build_rev.sh). One warm-up drain of
# each (discarded), then BLOCKS blocks of A B B A. Every run starts from an empty state and a
# fresh group over the same orders topic, runs velocity_spike in `act` mode POSTing to its own
# receiver file, and exits at the end of the log (`--exit-at-end`). Measured per run: wall
# time, CPU seconds of the processor (all threads), peak RSS, load average before,
# the hypervisor's steal over the run (% of this VM's CPU time, /proc/stat).
# Checked per run: the set of action keys equals that of the first measured run (a run that
# differs fails the script: a faster wrong binary is not a result); POSTs re-sent under the
# same key (dispatcher retries) are counted and reported (bench/lib/drain_ab.py).
# Env: KAFKA_PORT (39092), PARTITIONS (4), EVENT_BYTES (1024), NAME (drain_ab).
# Output: bench/results/$NAME.json (medians, spreads, ratio), raw runs in
# bench/results/raw/$NAME-runs.jsonl, plot bench/results/$NAME.png.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
REV_A="$(git -C "$ROOT" rev-parse --short "${1:?REV_A}")"; REV_B="$(git -C "$ROOT" rev-parse --short "${2:?REV_B}")"
EVENTS="${3:-2000000}"; BLOCKS="${4:-3}"; PARTITIONS="${PARTITIONS:-4}"; NAME="${NAME:-drain_ab}"
mkdir -p /tmp/tidemark-bench-bin
declare -A BINS
for rev in "$REV_A" "$REV_B"; do
  cp -p "$("$BENCH/lib/build_rev.sh" "$rev")" "/tmp/tidemark-bench-bin/tidemark-ab-$rev.$$"
  BINS[$rev]="/tmp/tidemark-bench-bin/tidemark-ab-$rev.$$"
done
broker_up
TAG="ab-$(date +%s)"
WORK="$(mktemp -d "/tmp/bench-$TAG.XXXX")"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  delete_topics "$TAG.*" 2>/dev/null || true
  broker_down; rm -rf "$WORK" "${BINS[@]}"
}
trap cleanup EXIT
BIN="${BINS[$REV_A]}"
ORDERS="$TAG.orders"
drain_log "$TAG" "$ORDERS" "$EVENTS" "$PARTITIONS" "$WORK" "$WORK/gen.json"

: > "$WORK/runs.jsonl"
run_one() { # REV PHASE
  local rev=$1 phase=$2 id="$TAG-$1-$RANDOM" port load
  port="$(free_port)"; load="$(loadavg)"
  python3 "$BENCH/lib/receiver.py" "$port" "$WORK/$id.actions" & local recv=$!
  topology_file "$WORK/$id.toml" "$id" "$PARTITIONS" act "http://127.0.0.1:$port/actions" 50 3.0 15 "$ORDERS"
  "${BINS[$rev]}" topics --bootstrap "$BOOT" --topology "$WORK/$id.toml" >/dev/null 2>&1
  local host0 host1; host0="$(host_ticks)"
  TIDEMARK_WEBHOOK_SECRET=bench-signing-key /usr/bin/time -f '%e %U %S %M' -o "$WORK/$id.time" "${BINS[$rev]}" run --bootstrap "$BOOT" --topology "$WORK/$id.toml" \
    --state-dir "$WORK/state-$id" --group "$id" --exit-at-end --log warn 2> "$WORK/$id.log" >/dev/null \
    || { tail -20 "$WORK/$id.log" >&2; kill "$recv"; exit 1; }
  host1="$(host_ticks)"
  kill "$recv"; wait "$recv" 2>/dev/null || true
  rm -rf "$WORK/state-$id"
  python3 - "$rev" "$phase" "$EVENTS" "$WORK/$id.time" "$WORK/$id.actions" "$load" "$host0" "$host1" <<'PY' | tee -a "$WORK/runs.jsonl" >&2
import hashlib, json, sys
rev, phase, events, timef, actions, load, host0, host1 = sys.argv[1:]
(b0, s0, t0), (b1, s1, t1) = [[int(x) for x in h.split()] for h in (host0, host1)]
wall, user, sys_s, rss = open(timef).read().split()[-4:]
keys = sorted(json.loads(l)["key"] for l in open(actions) if l.strip())
print(json.dumps({"rev": rev, "phase": phase, "events": int(events), "wall_s": float(wall),
  "events_per_s": round(int(events) / float(wall)), "cpu_s": round(float(user) + float(sys_s), 2),
  "cpu_us_per_event": round((float(user) + float(sys_s)) / int(events) * 1e6, 2), "peak_rss_mb": round(int(rss) / 1024, 1),
  "posts": len(keys), "distinct_keys": len(set(keys)),
  "keys_sha256": hashlib.sha256("\n".join(sorted(set(keys))).encode()).hexdigest(), "loadavg_before": float(load),
  "steal_pct": round(100 * (s1 - s0) / max(1, t1 - t0), 2)}))
PY
  sleep 3
}
run_one "$REV_A" warmup; run_one "$REV_B" warmup
for _ in $(seq 1 "$BLOCKS"); do for rev in "$REV_A" "$REV_B" "$REV_B" "$REV_A"; do run_one "$rev" measured; done; done
mkdir -p "$RESULTS/raw"
cp "$WORK/runs.jsonl" "$RESULTS/raw/$NAME-runs.jsonl"
python3 "$BENCH/lib/drain_ab.py" "$WORK/runs.jsonl" "$WORK/gen.json" "$REV_A" "$REV_B" "$RESULTS/$NAME.json" "$RESULTS/$NAME.png"
cat "$RESULTS/$NAME.json"
