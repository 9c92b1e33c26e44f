#!/usr/bin/env python3
"""Summary and plot of bench/drain_ab.sh: two tidemark revisions' drains in A-B-B-A order.

    drain_ab.py RUNS.jsonl GEN.json REV_A REV_B RESULT.json PLOT.png

Measured runs only (warm-ups are listed, not counted). Per revision: median, min and max of
events/s and CPU µs per event, peak RSS; the ratio B/A of the medians. The outputs must agree:
every run (warm-ups included) POSTs the key set of the first measured run (same hash, same
number of distinct keys), else the script exits 1 and writes no result. A POST re-sent with
the same Idempotency-Key (the dispatcher retries one whose answer it did not get: a timeout, a
reset connection) is allowed by the action contract; such re-sends are counted per run
(`resent`) and in `outputs`, not hidden.
"""
import json
import statistics
import sys

from timeseries import ensure_mpl

runs_path, gen_path, rev_a, rev_b, out_json, out_png = sys.argv[1:]
runs = [json.loads(line) for line in open(runs_path) if line.strip()]
measured = [r for r in runs if r["phase"] == "measured"]
ref = measured[0]
bad = [r for r in runs if (r["distinct_keys"], r["keys_sha256"]) != (ref["distinct_keys"], ref["keys_sha256"])]
if bad:
    sys.exit(f"drain_ab: action keys differ from the first measured run ({ref['distinct_keys']} keys): {bad}")
for r in runs:
    r["resent"] = r["posts"] - r["distinct_keys"]


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


per_rev = {}
for rev in (rev_a, rev_b):
    rs = [r for r in measured if r["rev"] == rev]
    per_rev[rev] = {
        "events_per_s": spread([r["events_per_s"] for r in rs]),
        "cpu_us_per_event": spread([r["cpu_us_per_event"] for r in rs]),
        "peak_rss_mb": spread([r["peak_rss_mb"] for r in rs]),
        "loadavg_before": spread([r["loadavg_before"] for r in rs]),
    }
a, b = per_rev[rev_a], per_rev[rev_b]
result = {
    "command": f"bench/drain_ab.sh {rev_a} {rev_b} {ref['events']} {len(measured) // 4}",
    "order": [r["rev"] for r in measured],
    "events": ref["events"],
    "generator": json.load(open(gen_path)) if gen_path else None,
    "outputs": {"distinct_keys": ref["distinct_keys"], "keys_sha256": ref["keys_sha256"], "key_sets_equal_in_every_run": True,
                "resent_posts": {f"{r['rev']} {r['phase']} #{i}": r["resent"] for i, r in enumerate(runs) if r["resent"]}},
    "revisions": per_rev,
    "ratio_b_over_a": {
        "events_per_s": round(b["events_per_s"]["median"] / a["events_per_s"]["median"], 3),
        "cpu_us_per_event": round(b["cpu_us_per_event"]["median"] / a["cpu_us_per_event"]["median"], 3),
    },
    "runs": runs,
}
json.dump(result, open(out_json, "w"), indent=2)

plt = ensure_mpl()
if plt:
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, r in enumerate(measured):
        ax.bar(i, r["events_per_s"] / 1000, color="tab:blue" if r["rev"] == rev_a else "tab:orange")
    ax.set_xticks(range(len(measured)), [r["rev"] for r in measured], rotation=45, fontsize=7)
    ax.set_ylabel("drain, thousand events/s")
    ax.set_title(f"{rev_a} (blue) vs {rev_b} (orange), A-B-B-A, {ref['events']} events")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
