#!/usr/bin/env bash
# Action latency of two configurations (or two revisions) in alternating A-B-B-A blocks
# (issue 16's method): one committed binary per side, every run's outputs checked, every
# action's exact append→2xx kept.
#
#   bench/latency_ab.sh [RATE=20000] [SECONDS=60] [BLOCKS=3]
#   A="IDLE_SKEW=2s" B="IDLE_SKEW=300ms" bench/latency_ab.sh ...     (defaults shown)
#   A="BENCH_REV=abc1234" B="BENCH_REV=def5678" bench/latency_ab.sh ...
#
# A and B are environment assignments handed to bench/latency.sh (IDLE_SKEW, COMMIT_INTERVAL,
# BENCH_REV). One warm-up run of each (discarded), then BLOCKS blocks of A B B A. QUIET_LOAD
# (default 2.5) waits up to QUIET_MAX_S (default 120) before each run for the 1-minute load
# average to fall below it; the load before each run is recorded either way.
# Output: bench/results/$NAME.json (per side: median and spread of exact p50/p99/p99.9 and of
# the hypervisor's steal over the measured runs, and the pooled samples' quantiles), raw lines bench/results/raw/$NAME-runs.jsonl,
# per-action samples bench/results/raw/$NAME-<run>.ms, plot bench/results/$NAME.png.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-20000}"; SECS="${2:-60}"; BLOCKS="${3:-3}"
A="${A:-IDLE_SKEW=2s}"; B="${B:-IDLE_SKEW=300ms}"; NAME="${NAME:-latency_ab}"
QUIET_LOAD="${QUIET_LOAD:-2.5}"; QUIET_MAX_S="${QUIET_MAX_S:-120}"
RAW="$RESULTS/raw"; mkdir -p "$RAW"
# One broker for the whole series, so its JIT is warm after the warm-up runs (bench/latency.sh
# starts and stops its own broker only when none is up; a cold broker per run took more CPU
# than tidemark and saturated this 2-core host even at 10k/s).
broker_up
trap broker_down EXIT
RUNS="$RAW/$NAME-runs.jsonl"; : > "$RUNS"
n=0
run_one() { # SIDE PHASE
  local side=$1 phase=$2 cfg line
  cfg="$([ "$side" = A ] && echo "$A" || echo "$B")"
  wait_quiet
  n=$((n + 1))
  local out; out="$(mktemp)"
  blog "run $n: side $side ($cfg), $phase, load $(loadavg), steal ${QUIET_STEAL}% (waited ${QUIET_WAITED}s)"
  # shellcheck disable=SC2086 # the assignments are meant to split
  env $cfg LATENCY_OUT="$out" LATENCY_RAW="$RAW/$NAME-$n.ms" bash "$BENCH/latency.sh" "$RATE" "$SECS" >/dev/null
  line="$(tail -1 "$out")"; rm -f "$out"
  python3 -c 'import json, sys
r = json.loads(sys.argv[1]); r.update(side=sys.argv[2], config=sys.argv[3], phase=sys.argv[4], run=int(sys.argv[5]))
o = r["outputs"]
if o["keys_with_two_payloads"] or o["distinct_keys"] == 0:
    sys.exit("run %d: outputs failed the check: %s" % (r["run"], o))
print(json.dumps(r))' "$line" "$side" "$cfg" "$phase" "$n" >> "$RUNS"
}
run_one A warmup; run_one B warmup
for _ in $(seq 1 "$BLOCKS"); do for side in A B B A; do run_one "$side" measured; done; done
python3 "$BENCH/lib/latency_ab.py" "$RUNS" "$RAW/$NAME" "$RESULTS/$NAME.json" "$RESULTS/$NAME.png"
cat "$RESULTS/$NAME.json"
