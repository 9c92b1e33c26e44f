#!/usr/bin/env bash
# Outbox scan cost (issue 15 item 2: completed rows expire without a full-table scan, pending
# rows are found without decoding completed ones; memory and time measured with 1 M rows, 1 %
# pending). Builds the committed example (state/examples/outbox_scan.rs), refuses a dirty
# state/ unless ALLOW_DIRTY=1, runs it REPS times (each a fresh store of N rows), and writes
# every run with the git revision to results/outbox_scan.json, plotted in .png: time and
# bytes read to find the pending rows through the pending index against reading every row,
# the expiry of the older half of the final rows, and each phase's peak RSS.
#
#   bench/outbox_scan.sh [N=1000000] [REPS=3] [DIR=/tmp/tidemark-outbox-scan]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
N="${1:-1000000}"; REPS="${2:-3}"; DIR="${3:-/tmp/tidemark-outbox-scan}"
if [ -n "$(git status --porcelain -- state)" ] && [ "${ALLOW_DIRTY:-0}" != 1 ]; then
  echo "outbox_scan: state/ has uncommitted changes; commit first (or ALLOW_DIRTY=1)" >&2
  exit 2
fi
REV="$(git rev-parse --short HEAD)"
cargo build --release -p tidemark-state --example outbox_scan >&2
RUNS=/tmp/outbox_scan.runs.jsonl; : > "$RUNS"
for i in $(seq 1 "$REPS"); do
  echo "[bench] outbox_scan run $i/$REPS: $N rows (load average $(cut -d' ' -f1 /proc/loadavg))" >&2
  "$CARGO_TARGET_DIR/release/examples/outbox_scan" "$N" "$DIR" >> "$RUNS"
done
mkdir -p bench/results
python3 - "$RUNS" "$REV" "$N" "$REPS" <<'PY' > bench/results/outbox_scan.json
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rev, n, reps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
first = runs[0]
print(json.dumps({
    "command": f"bench/outbox_scan.sh {n} {reps}",
    "git_rev": rev,
    "rows": n,
    "row_bytes": round(first["full_scan_bytes"] / max(first["full_scan_rows"], 1)),
    "pending": first["pending"],
    "runs": runs,
    "bytes_read": {"pending_index": first["pending"] * round(first["full_scan_bytes"] / max(first["full_scan_rows"], 1)),
                   "full_scan": first["full_scan_bytes"]},
}, indent=2))
PY
python3 bench/lib/footprint_plot.py outbox bench/results/outbox_scan.json bench/results/outbox_scan.png
cat bench/results/outbox_scan.json
