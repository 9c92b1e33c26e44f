#!/usr/bin/env bash
# Bounded-state soak (SPEC §5, issue 15 item 6): one tidemark process fed at a steady paced
# rate for a long time with short retentions, sampling the state directory's size on disk and
# the process's RSS. After the first retention period both must stop growing: dedup entries,
# windows, SKU lines and completed outbox rows expire as fast as new ones arrive.
#
#   bench/soak.sh [RATE=20000] [DURATION_S=1800]
#
# Env: DEDUP_RETENTION (10m), WINDOW_RETENTION (5m), EVENT_BYTES (512), PARTITIONS (4), BASELINE_WINDOWS (15, velocity_spike),
# NAME (soak): results in bench/results/$NAME.json and .png, raw samples in
# bench/results/raw/$NAME-* (gzipped; $NAME-maps.jsonl splits the RSS by allocator). The binary is HEAD built in a clean worktree (see
# ensure_tidemark in bench/lib/common.sh for TIDEMARK_BIN/TIDEMARK_REV, BENCH_REV, ALLOW_DIRTY).
# The input topics keep 10 minutes of log (the processor keeps up, so nothing unread is
# deleted); the broker's disk is reported beside tidemark's but is not what is judged.
#
# HEAP_PROFILE=1 says what a growing RSS is made of: the binary is built with the system
# allocator (BUILD_FEATURES=sysalloc) and runs with jemalloc preloaded, profiling on (package
# libjemalloc-dev, which also has jeprof). Its RSS is jemalloc's, not comparable with a
# mimalloc run's; what it adds is bench/results/raw/$NAME-heap.txt: the estimated live heap at
# every dump and, from jeprof, what grew after the settle by allocating function.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
RATE="${1:-20000}"; DURATION_S="${2:-1800}"; PARTITIONS="${PARTITIONS:-4}"
DEDUP_RETENTION="${DEDUP_RETENTION:-10m}"; WINDOW_RETENTION="${WINDOW_RETENTION:-5m}"
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
if [ -n "${HEAP_PROFILE:-}" ]; then
  [ -e "$JEMALLOC" ] && command -v jeprof >/dev/null || { blog "HEAP_PROFILE needs $JEMALLOC and jeprof: apt-get install libjemalloc-dev"; exit 2; }
  export BUILD_FEATURES=sysalloc
fi
ensure_tidemark; broker_up
scenario_begin soak
HTTP=$(free_port)
scenario_topology
python3 - "$WORK/t.toml" "$DEDUP_RETENTION" "$WINDOW_RETENTION" <<'PY'
import re, sys
path, dedup, window = sys.argv[1:]
t = open(path).read()
t = re.sub(r'dedup_retention = "[^"]*"', f'dedup_retention = "{dedup}"', t)
t = re.sub(r'(\[windows\.dashboard\][^\[]*?)retention = "[^"]*"', lambda m: m.group(1) + f'retention = "{window}"', t, flags=re.S)
open(path, "w").write(t)
PY
"$BIN" validate "$WORK/t.toml" >&2
# Ten minutes of input log on the broker (segments roll every minute so they can go).
for topic in "$TAG.orders" "$TAG.inventory" "$TAG.sku-repartition"; do
  java -Xmx256m -cp "${TIDEMARK_CACHE:-$HOME/.cache/tidemark}/kafka-4.4.0/libs/*" -Dlog4j2.level=error \
    org.apache.kafka.tools.ConfigCommand --bootstrap-server "$BOOT" --alter --entity-type topics --entity-name "$topic" \
    --add-config retention.ms=600000,segment.ms=60000 >/dev/null 2>&1 || blog "could not shorten retention of $topic"
done
if [ -n "${HEAP_PROFILE:-}" ]; then
  # A dump every 2^32 bytes allocated (about every 30 s at 20k/s); one sample per 512 KiB.
  mkdir -p "$WORK/heap"
  TM_ENV="LD_PRELOAD=$JEMALLOC MALLOC_CONF=prof:true,lg_prof_sample:19,lg_prof_interval:32,prof_prefix:$WORK/heap/tm"
fi
start_tidemark "$WORK/t.toml" "$WORK/state" "$TAG" "$HTTP" "$WORK/tm.log" "$WORK/tm.pid"
wait_ready "$HTTP" 120 || { cat "$WORK/tm.log" >&2; exit 1; }
python3 "$BENCH/lib/sampler.py" "$WORK/samples.jsonl" --url "http://127.0.0.1:$HTTP/metrics" \
  --pidfile "processor=$WORK/tm.pid" --pid "broker=$BROKER_PID" & SP=$!; PIDS+=($SP)
# The processor's RSS split by who mapped it (Rust's mimalloc, glibc's arenas for RocksDB and
# librdkafka, files), every 30 s: says which allocator a creeping RSS comes from.
python3 "$BENCH/lib/maps_sampler.py" "$WORK/maps.jsonl" --pidfile "$WORK/tm.pid" --every 30 & MP=$!; PIDS+=($MP)
# Disk every 10 s: tidemark's state directory (du, what the volume holds), its own gauge,
# and the broker's data directory.
(
  while :; do
    state=$(du -sb "$WORK/state" 2>/dev/null | cut -f1); broker=$(du -sb "$KAFKA_RUN/data" 2>/dev/null | cut -f1)
    gauge=$(curl -sf "127.0.0.1:$HTTP/metrics" | awk '/^tidemark_state_disk_bytes/{s+=$2} END{print s+0}')
    echo "{\"t\": $(now_s), \"state_bytes\": ${state:-0}, \"gauge_bytes\": ${gauge:-0}, \"broker_bytes\": ${broker:-0}}"
    sleep 10
  done
) > "$WORK/disk.jsonl" & PIDS+=($!)
a=$(now_s)
blog "soak: ${RATE}/s for ${DURATION_S}s (dedup retention $DEDUP_RETENTION, window retention $WINDOW_RETENTION, ${EVENT_BYTES:-512} B events)"
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" --events $(( RATE * DURATION_S )) \
  --rate "$RATE" --paced --start now --seed 77 --max-lateness 4m --event-bytes "${EVENT_BYTES:-512}" \
  2> >(stamp > "$WORK/gen.log") >/dev/null
b=$(now_s)
sleep 15
kill "$SP" "$MP" 2>/dev/null || true; wait "$SP" "$MP" 2>/dev/null || true
mkdir -p "$RESULTS/raw"
N="${NAME:-soak}"
gzip -9c "$WORK/samples.jsonl" > "$RESULTS/raw/$N-samples.jsonl.gz"; cp "$WORK/disk.jsonl" "$RESULTS/raw/$N-disk.jsonl"
cp "$WORK/maps.jsonl" "$RESULTS/raw/$N-maps.jsonl" 2>/dev/null || true
gzip -9c "$WORK/gen.log" > "$RESULTS/raw/$N-gen.log.gz"
META=$(python3 -c "import json,sys; print(json.dumps({'rate': int(sys.argv[1]), 'duration_s': int(sys.argv[2]), 'dedup_retention': sys.argv[3], 'window_retention': sys.argv[4], 'event_bytes': int(sys.argv[5]), 'partitions': int(sys.argv[6]), 'start': float(sys.argv[7]), 'end': float(sys.argv[8]), 'machine': json.loads(sys.argv[9])}))" \
  "$RATE" "$DURATION_S" "$DEDUP_RETENTION" "$WINDOW_RETENTION" "${EVENT_BYTES:-512}" "$PARTITIONS" "$a" "$b" "$MACHINE")
if [ -n "${HEAP_PROFILE:-}" ]; then
  python3 "$BENCH/lib/heap_growth.py" "$WORK/heap" "$BIN" "$a" \
    "$(cd "$BENCH/lib" && python3 -c 'import soak, sys; print(soak.settle_s(*sys.argv[1:]))' "$DEDUP_RETENTION" "$WINDOW_RETENTION")" "$RESULTS/raw/$N-heap.txt" "$RESULTS/raw/$N-heap.jsonl" || blog "heap report failed"
fi
python3 "$BENCH/lib/soak.py" "$RESULTS/$N.json" "$RESULTS/$N.png" --samples "$WORK/samples.jsonl" \
  --disk "$WORK/disk.jsonl" --gen "$WORK/gen.log" --actions "$WORK/actions.jsonl" --maps "$WORK/maps.jsonl" --meta "$META"
