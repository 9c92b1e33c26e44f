#!/usr/bin/env bash
# CPU profile of one drain: `tidemark run --exit-at-end` over a pre-generated orders log, under
# `perf record` with DWARF call graphs, folded into a flamegraph and a table of inclusive costs
# on the stream thread.
#
#   bench/profile.sh [EVENTS=2000000]
#
# The run is the drain of bench/throughput_compare.sh: ~1 KiB events (1 % duplicates, 2 % late,
# 0.1 % malformed), 4 partitions, only velocity_spike in `act` mode posting to a local receiver,
# from an empty state and a fresh group. The binary is a committed revision (BENCH_REV, default
# HEAD, built by bench/lib/build_rev.sh; TIDEMARK_BIN/TIDEMARK_REV or ALLOW_DIRTY=1 as in
# lib/common.sh). The generated topics are deleted at the end.
# Needs: perf, and inferno (`cargo install inferno`: inferno-collapse-perf, inferno-flamegraph).
# Env: KAFKA_PORT (39092; 19092 profiles on the dev broker), PARTITIONS (4), PERF_FREQ (499 Hz),
#      CALL_GRAPH (dwarf,16384), NAME (flamegraph_drain).
# Output: results/$NAME.svg (every thread, one tower per thread name), results/$NAME.folded.gz
# (the folded stacks it was drawn from) and results/$NAME.summary.md (revision, command, load
# average, inclusive costs on the stream thread; bench/lib/profile_summary.py).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
EVENTS="${1:-2000000}"
PARTITIONS="${PARTITIONS:-4}"; PERF_FREQ="${PERF_FREQ:-499}"; CALL_GRAPH="${CALL_GRAPH:-dwarf,16384}"
NAME="${NAME:-flamegraph_drain}"
PERF="${PERF:-perf}"
PATH="$PATH:$HOME/.cargo/bin"
for tool in "$PERF" inferno-collapse-perf inferno-flamegraph; do
  command -v "$tool" >/dev/null || { blog "missing $tool (perf from linux-tools; cargo install inferno)"; exit 1; }
done
ensure_tidemark; broker_up
TAG="prof-$(date +%s)"
WORK="$(mktemp -d /tmp/bench-$TAG.XXXX)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  delete_topics "$TAG\\..*"; broker_down; rm -rf "$WORK"; rm -f "$BIN"
}
trap cleanup EXIT
RX_PORT=$(free_port)
python3 "$BENCH/lib/receiver.py" "$RX_PORT" "$WORK/actions.jsonl" & PIDS+=($!)
topology_file "$WORK/t.toml" "$TAG" "$PARTITIONS" act "http://127.0.0.1:$RX_PORT/actions" 50 3.0 15
"$BIN" topics --bootstrap "$BOOT" --topology "$WORK/t.toml" >&2
START="$(date -u -d '-30 min' +%Y-%m-%dT%H:%M:%SZ)"
blog "generating $EVENTS events into $TAG.orders"
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" --events "$EVENTS" \
  --rate 20000 --seed 1 --start "$START" --inventory-every 0 --event-bytes 1024 > "$WORK/gen.json"
sync; sleep 5
LOAD_BEFORE="$(cat /proc/loadavg)"
CMD=("$BIN" run --bootstrap "$BOOT" --topology "$WORK/t.toml" --state-dir "$WORK/state" --group "$TAG" --exit-at-end --log warn)
blog "draining under perf record -F $PERF_FREQ --call-graph $CALL_GRAPH"
t0=$(now_s)
TIDEMARK_WEBHOOK_SECRET=bench-signing-key "$PERF" record -F "$PERF_FREQ" --call-graph "$CALL_GRAPH" -o "$WORK/perf.data" -- \
  "${CMD[@]}" 2> "$WORK/run.log" >/dev/null
wall=$(rel "$(now_s)" "$t0")
LOAD_AFTER="$(cat /proc/loadavg)"
grep -v '^\[ perf record' "$WORK/run.log" | tail -3 >&2 || true
blog "folding stacks ($(du -h "$WORK/perf.data" | cut -f1) of samples)"
"$PERF" script -i "$WORK/perf.data" 2>/dev/null | inferno-collapse-perf --all > "$WORK/folded.txt"
gzip -9c "$WORK/folded.txt" > "$RESULTS/$NAME.folded.gz"
inferno-flamegraph --title "tidemark drain, $EVENTS events, $BIN_INFO" --width 1600 < "$WORK/folded.txt" > "$RESULTS/$NAME.svg"
# The stream thread is the process's main thread: its name is the binary's (15 characters).
COMM="$(basename "$BIN" | cut -c1-15)"
python3 "$BENCH/lib/profile_summary.py" "$WORK/folded.txt" "$COMM" \
  --meta "revision=$BIN_INFO" --meta "events=$EVENTS" --meta "wall_s_under_perf=$wall" \
  --meta "command=perf record -F $PERF_FREQ --call-graph $CALL_GRAPH -- tidemark run --exit-at-end (topology: velocity_spike act, $PARTITIONS partitions)" \
  --meta "loadavg_before=$LOAD_BEFORE" --meta "loadavg_after=$LOAD_AFTER" \
  --meta "processed=$(grep -o 'processed [0-9]* records' "$WORK/run.log" | head -1)" | tee "$RESULTS/$NAME.summary.md"
blog "wrote $RESULTS/$NAME.svg ($(du -h "$RESULTS/$NAME.svg" | cut -f1)), $NAME.folded.gz and $NAME.summary.md"
