#!/usr/bin/env bash
# Events/s through `tidemark run` for a pre-generated log on the local real broker.
#
#   bench/throughput.sh [EVENTS] [PARTITIONS]      (defaults: 1000000 events, 4 partitions)
#
# Generates a seeded log of ~1 KiB events (1 % duplicates, 2 % late, 0.1 % malformed) into a
# fresh topic, then times one `tidemark run --exit-at-end` over it from an empty state, and
# appends a JSON line to bench/results/throughput.jsonl (events/s, CPU seconds, peak RSS).
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-1000000}"
PARTITIONS="${2:-4}"
. scripts/env.sh
cargo build --release --bin tidemark >&2
BIN="$CARGO_TARGET_DIR/release/tidemark"
export KAFKA_PORT="${KAFKA_PORT:-19092}"
bash scripts/kafka/kafka.sh status || bash scripts/kafka/kafka.sh start
BOOT="127.0.0.1:$KAFKA_PORT"
RUN="bench-$(date +%s)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
sed -e "s/topic = \"orders\"/topic = \"$RUN.orders\"/" -e "s/topic = \"inventory\"/topic = \"$RUN.inventory\"/" \
    -e "s/tidemark\./$RUN./" -e "s/partitions = 4/partitions = $PARTITIONS/" \
    topology/examples/orders.toml > "$WORK/topology.toml"
"$BIN" topics --bootstrap "$BOOT" --topology "$WORK/topology.toml" >&2
echo "[bench] generating $EVENTS events" >&2
"$BIN" gen --bootstrap "$BOOT" --orders-topic "$RUN.orders" --inventory-topic "$RUN.inventory" \
    --events "$EVENTS" --rate 20000 --seed 1 --inventory-every 0 > "$WORK/gen.json"
echo "[bench] processing" >&2
/usr/bin/time -f '%e %U %S %M' -o "$WORK/time" "$BIN" run --bootstrap "$BOOT" --topology "$WORK/topology.toml" \
    --state-dir "$WORK/state" --group "$RUN" --exit-at-end --log warn 2> "$WORK/run.log"
read -r wall user sys rss_kb < "$WORK/time"
records=$(grep -o 'processed [0-9]* records' "$WORK/run.log" | grep -o '[0-9]*')
python3 - "$records" "$wall" "$user" "$sys" "$rss_kb" "$EVENTS" "$PARTITIONS" <<'PY' | tee -a bench/results/throughput.jsonl
import json, sys, platform, os
records, wall, user, sys_s, rss, events, parts = sys.argv[1:]
records, wall, user, sys_s = int(records), float(wall), float(user), float(sys_s)
print(json.dumps({
    "bench": "throughput", "records": records, "partitions": int(parts),
    "wall_s": wall, "events_per_s": round(records / wall), "cpu_s": round(user + sys_s, 2),
    "cpu_s_per_million": round((user + sys_s) / records * 1e6, 2), "peak_rss_mb": round(int(rss) / 1024, 1),
    "note": "wall time includes process start, group join and the final commit",
    "machine": f"{os.cpu_count()} cores, {platform.machine()}",
}))
PY
