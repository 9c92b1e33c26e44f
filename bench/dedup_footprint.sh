#!/usr/bin/env bash
# Dedup footprint at volume (issue 15, SPEC §5: at most ~48 bytes per entry on disk after
# compaction, expiry by compaction, never by scans). Builds the committed example, refuses a
# dirty tree unless ALLOW_DIRTY=1, writes N entries (default 50 M) into a fresh store, and
# records bytes per entry, batched lookup cost per id and the time compaction takes to expire
# them all, with the git revision, in results/dedup_footprint.json (plot: .png).
#
#   bench/dedup_footprint.sh [N=50000000] [DIR=/tmp/tidemark-dedup-footprint]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
N="${1:-50000000}"
DIR="${2:-/tmp/tidemark-dedup-footprint}"
if [ -n "$(git status --porcelain -- state)" ] && [ "${ALLOW_DIRTY:-0}" != 1 ]; then
  echo "dedup_footprint: state/ has uncommitted changes; commit first (or ALLOW_DIRTY=1)" >&2
  exit 2
fi
REV="$(git rev-parse --short HEAD)"
cargo build --release -p tidemark-state --example dedup_footprint >&2
OUT="$(/usr/bin/time -f '{"max_rss_kb":%M,"cpu_s":%U}' -o /tmp/dedup_footprint.time \
  "$CARGO_TARGET_DIR/release/examples/dedup_footprint" "$N" "$DIR")"
mkdir -p bench/results
python3 - "$OUT" "$REV" <<'PY' > bench/results/dedup_footprint.json
import json, sys
r = json.loads(sys.argv[1]); r["git_rev"] = sys.argv[2]
r.update(json.load(open("/tmp/dedup_footprint.time")))
r["target_bytes_per_entry"] = 48
r["verdict"] = "met" if r["bytes_per_entry"] <= 48 else "missed"
print(json.dumps(r, indent=2))
PY
cat bench/results/dedup_footprint.json
python3 bench/lib/footprint_plot.py dedup bench/results/dedup_footprint.json bench/results/dedup_footprint.png
