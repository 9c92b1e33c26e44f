#!/usr/bin/env bash
# Memory of `tidemark batch close` over a long range (issue 15 item 3: <= 1 GiB RSS over
# 100 M events). Generates N order events (`tidemark gen`, seeded) into a fresh orders topic
# on the broker, closes their business day over the whole range under `/usr/bin/time -v`,
# and records the git revision, max RSS, wall time and events/s in
# bench/results/batch_memory.json. Measures a committed build unless ALLOW_DIRTY=1.
#
#   bench/batch_memory.sh [N=2000000]
#   BOOTSTRAP (default 127.0.0.1:19092), EVENT_BYTES (default 256), PARTITIONS (default 4),
#   NAME (result file bench/results/$NAME.json, default batch_memory), BENCH_REV,
#   KEEP_TOPIC=1 (leave the generated topics on the broker and print their tag),
#   REUSE_TAG=TAG (close the topics a KEEP_TOPIC=1 run left, without generating: two
#   revisions compared on the very same input; deleted at the end unless KEEP_TOPIC=1),
#   MODE=shadow (measure `tidemark shadow --range end` over the same log instead of the
#   close; SHADOW_ARGS adds flags, e.g. `--actions-max-records 0`; the checksum is then the
#   sha256 of its JSON report).
# Every 5 s the close's RSS, its scratch dedup store's size and the records read are sampled
# (bench/results/raw/$NAME-samples.txt.gz) and plotted (bench/results/$NAME.png).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
N="${1:-2000000}"
BOOT="${BOOTSTRAP:-127.0.0.1:19092}"
EVENT_BYTES="${EVENT_BYTES:-256}"
KAFKA_HOME="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}/kafka-4.4.0"
# The binary: HEAD (or BENCH_REV) built in a clean worktree; the working tree's own build only
# with ALLOW_DIRTY=1, labelled +dirty.
BIN="$(mktemp /tmp/tidemark-batch-memory.XXXX)"
if [ "${ALLOW_DIRTY:-0}" = 1 ]; then
  REV="$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+dirty')"
  cargo build --release --bin tidemark >&2
  cp -p "$CARGO_TARGET_DIR/release/tidemark" "$BIN"
else
  REV="$(git rev-parse --short "${BENCH_REV:-HEAD}")"
  cp -p "$(bench/lib/build_rev.sh "$REV")" "$BIN"
fi
WORK="$(mktemp -d /tmp/batch-memory.XXXX)"
TAG="${REUSE_TAG:-batchmem-$(date +%s)}"
# The generated log is GBs at 100 M events: deleted with the run unless KEEP_TOPIC=1.
cleanup() {
  rm -rf "$WORK" "$BIN"
  if [ "${KEEP_TOPIC:-0}" = 1 ]; then
    echo "batch_memory: kept the topics $TAG.* (REUSE_TAG=$TAG to close them again)" >&2
  else
    java -Xmx256m -cp "$KAFKA_HOME/libs/*" -Dlog4j2.level=error org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "$BOOT" --delete --topic "$TAG\..*" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# The example topology with this run's topics.
sed -e "s/topic = \"orders\"/topic = \"$TAG.orders\"/" -e "s/topic = \"inventory\"/topic = \"$TAG.inventory\"/" \
  -e "s/topic = \"tidemark\./topic = \"$TAG./" topology/examples/orders.toml > "$WORK/t.toml"
if [ -n "${PARTITIONS:-}" ]; then sed -i "s/partitions = 4/partitions = $PARTITIONS/" "$WORK/t.toml"; fi
"$BIN" topics --bootstrap "$BOOT" --topology "$WORK/t.toml" >&2

# Event times from 2026-11-28T00:00Z (Tokyo business day 2026-11-28) at 20k/s of simulated
# time: 100 M events span 83 min, all of one day.
if [ -z "${REUSE_TAG:-}" ]; then
  echo "batch_memory: generating $N events into $TAG.orders" >&2
  "$BIN" gen --bootstrap "$BOOT" --seed 42 --events "$N" --rate 20000 --start 2026-11-28T00:00:00Z \
    --inventory-every 0 --event-bytes "$EVENT_BYTES" --orders-topic "$TAG.orders" --inventory-topic "$TAG.inventory" >&2
else
  echo "batch_memory: closing the existing $TAG.orders again" >&2
fi

# The whole log: from offset 0 to each partition's end.
ENDS="$(java -Xmx256m -cp "$KAFKA_HOME/libs/*" -Dlog4j2.level=error org.apache.kafka.tools.GetOffsetShell \
  --bootstrap-server "$BOOT" --topic "$TAG.orders" --time -1 | sort -t: -k2 -n \
  | awk -F: '{printf "%s%s:%s", (NR>1?",":""), $2, $3}')"
FROM="$(echo "$ENDS" | sed -E 's/:[0-9]+/:0/g')"
echo "batch_memory: closing 2026-11-28 over $FROM .. $ENDS" >&2

MODE="${MODE:-close}"
if [ "$MODE" = shadow ]; then
  # shellcheck disable=SC2086 # SHADOW_ARGS is a list of flags
  /usr/bin/time -v -o "$WORK/time.txt" "$BIN" shadow --bootstrap "$BOOT" --topology "$WORK/t.toml" \
    --range "$ENDS" --from "$FROM" --json "$WORK/shadow.json" ${SHADOW_ARGS:-} > "$WORK/shadow.txt" 2> "$WORK/close.log" &
else
  /usr/bin/time -v -o "$WORK/time.txt" "$BIN" batch close --bootstrap "$BOOT" --topology "$WORK/t.toml" \
    --business-day 2026-11-28 --from "$FROM" --to "$ENDS" > "$WORK/manifest.json" 2> "$WORK/close.log" &
fi
TIMED=$!
# The close itself is the child of /usr/bin/time.
CLOSE=""
for _ in $(seq 50); do CLOSE="$(pgrep -P "$TIMED" | head -1)"; [ -n "$CLOSE" ] && break; sleep 0.1; done
while [ -n "$CLOSE" ] && kill -0 "$CLOSE" 2>/dev/null; do
  rss="$(awk '/VmRSS/{print $2}' "/proc/$CLOSE/status" 2>/dev/null || true)"
  # The scratch store the close has open (one per partition, deleted after it).
  store="$(find "/proc/$CLOSE/fd" -maxdepth 1 -lname '*tidemark-scratch-dedup-*' -printf '%l\n' 2>/dev/null \
    | grep -o '.*/tidemark-scratch-dedup-[^/]*' | head -1 || true)"
  dedup="$([ -n "$store" ] && du -sb "$store" 2>/dev/null | cut -f1 || true)"
  read_n="$(tail -1 "$WORK/close.log" 2>/dev/null | grep -o '[0-9]*/[0-9]* records' | cut -d/ -f1 || true)"
  echo "$(date +%s.%N) ${rss:--} ${dedup:--} ${read_n:--}" >> "$WORK/samples.txt"
  sleep 5
done
wait "$TIMED" || { tail -20 "$WORK/close.log" >&2; exit 1; }
if [ "$MODE" = shadow ]; then
  # The shadow's figures in the close manifest's shape, so one summary reads both.
  python3 - "$WORK/shadow.json" "${SHADOW_ARGS:-}" <<'PY' > "$WORK/manifest.json"
import hashlib, json, sys
raw = open(sys.argv[1], "rb").read()
r = json.loads(raw)
print(json.dumps({
    "command": "tidemark shadow --range <end offsets> --from <0 per partition> " + sys.argv[2],
    "accounting": {"records": r["records"], "applied": r["batch"]["applied"], "duplicates": r["batch"]["duplicates"]},
    "checksum": "sha256:" + hashlib.sha256(raw).hexdigest(),
    "shadow": {"unexplained": r["unexplained"], "actions_compared": r["actions"]["compared"],
               "comparisons": [[c["name"], c["keys"], c["mismatches"]] for c in r["comparisons"]]},
}))
PY
  cat "$WORK/shadow.txt" >&2
fi

python3 - "$WORK/time.txt" "$WORK/manifest.json" "$REV" "$N" "$EVENT_BYTES" <<'PY' > "bench/results/${NAME:-batch_memory}.json"
import json, re, sys
time_txt, manifest, rev, n, event_bytes = sys.argv[1:]
t = open(time_txt).read()
def field(name):
    return re.search(re.escape(name) + r": (.*)", t).group(1).strip()
wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
parts = [float(x) for x in wall.split(":")]
wall_s = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
rss_kb = int(field("Maximum resident set size (kbytes)"))
m = json.loads(open(manifest).read().strip().splitlines()[-1])
records = m["accounting"]["records"]
print(json.dumps({
    "git_rev": rev,
    "command": m.get("command", "tidemark batch close --business-day 2026-11-28 over the whole generated log"),
    "events_generated": int(n),
    "event_bytes": int(event_bytes),
    "records_read": records,
    "applied": m["accounting"]["applied"],
    "duplicates": m["accounting"]["duplicates"],
    "max_rss_mib": round(rss_kb / 1024, 1),
    "wall_s": round(wall_s, 2),
    "user_s": float(field("User time (seconds)")),
    "events_per_s": round(records / wall_s) if wall_s else None,
    "target_max_rss_mib": 1024,
    "checksum": m["checksum"],
    **({"shadow": m["shadow"]} if "shadow" in m else {}),
    "loadavg_1m": float(open("/proc/loadavg").read().split()[0]),
}, indent=2))
PY
mkdir -p bench/results/raw
gzip -c "$WORK/samples.txt" > "bench/results/raw/${NAME:-batch_memory}-samples.txt.gz"
python3 bench/lib/batch_memory_plot.py "$WORK/samples.txt" "bench/results/${NAME:-batch_memory}.json" \
  "bench/results/${NAME:-batch_memory}.png"
cat "bench/results/${NAME:-batch_memory}.json"
