#!/usr/bin/env bash
# Sustainable throughput by step ramp: one tidemark process, open-loop paced input stepping
# through RATES; a step passes when the consumer lag does not grow over its last JUDGE_S
# seconds (least-squares growth over that span < one second of input), backlog age stays
# < 10 s and p99 append→2xx over that span is < 10 s (a span without any action — the velocity
# rule fires on changes of rate, so high steady steps may have none — is judged on the
# backlog age alone, and says so in `latency_basis`). Reports the highest passing rate.
#
#   bench/steady.sh ["RATES"="20000 30000 40000 50000 60000"] [STEP_S=120] [JUDGE_S=60]
#
# Quick run: `bench/steady.sh "20000 30000 40000" 40 20`. Env: KEEP_GOING=1 continues past the
# first failing step; EVENT_BYTES (1024), PARTITIONS (4), MIN_UNITS, FACTOR_RULE.
# Each step is a fresh `tidemark gen --paced --start now` (event times = wall time), so the
# generator itself is the offered-rate limit: its achieved rate is recorded per step.
# Output: bench/results/${NAME:-steady}.json and .png (NAME env).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATES="${1:-20000 30000 40000 50000 60000}"; STEP_S="${2:-120}"; JUDGE_S="${3:-60}"; PARTITIONS="${PARTITIONS:-4}"
ensure_tidemark; broker_up
scenario_begin steady
scenario_tidemark
sleep 2
: > "$WORK/steps.jsonl"
i=0
for r in $RATES; do
  i=$((i + 1))
  a=$(now_s)
  blog "step $i: ${r}/s for ${STEP_S}s (judged over the last ${JUDGE_S}s)"
  "$BIN" gen --bootstrap "$BOOT" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" --events $(( r * STEP_S )) \
    --rate "$r" --paced --start now --seed $((30 + i)) --inventory-every 0 --event-bytes "${EVENT_BYTES:-1024}" \
    2> >(stamp > "$WORK/gen-$i.log") >/dev/null
  b=$(now_s)
  sleep 1
  echo "{\"rate\": $r, \"start\": $a, \"end\": $b, \"judge_s\": $JUDGE_S, \"gen\": \"$WORK/gen-$i.log\"}" >> "$WORK/steps.jsonl"
  # judge this step now (to stop early); the final summary re-judges every step
  if ! python3 "$BENCH/lib/timeseries.py" steady "$WORK/partial.json" "$WORK/partial.png" --samples "$WORK/samples.jsonl" \
       --steps <(tail -1 "$WORK/steps.jsonl") > /dev/null 2>&1; then blog "judging failed"; fi
  pass=$(python3 -c "import json; print(json.load(open('$WORK/partial.json'))['steps'][0]['pass'])" 2>/dev/null || echo False)
  blog "step $i (${r}/s): pass=$pass"
  if [ "$pass" != True ] && [ -z "${KEEP_GOING:-}" ]; then break; fi
done
kill "$SP" 2>/dev/null || true; wait "$SP" 2>/dev/null || true
META=$(python3 -c "import json,sys; print(json.dumps({'title': sys.argv[1], 'rates': sys.argv[2].split(), 'step_s': int(sys.argv[3]), 'judge_s': int(sys.argv[4]), 'event_bytes': int(sys.argv[5]), 'partitions': int(sys.argv[6]), 'machine': json.loads(sys.argv[7])}))" \
  "steps of ${STEP_S}s, judged over the last ${JUDGE_S}s" "$RATES" "$STEP_S" "$JUDGE_S" "${EVENT_BYTES:-1024}" "$PARTITIONS" "$MACHINE")
python3 "$BENCH/lib/timeseries.py" steady "$RESULTS/${NAME:-steady}.json" "$RESULTS/${NAME:-steady}.png" --samples "$WORK/samples.jsonl" \
  --steps "$WORK/steps.jsonl" --meta "$META"
