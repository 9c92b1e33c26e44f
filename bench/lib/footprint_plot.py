#!/usr/bin/env python3
"""Plots of the two state micro-benchmarks (issue 15 items 1 and 2), from their result files.

    footprint_plot.py dedup  results/dedup_footprint.json results/dedup_footprint.png
    footprint_plot.py outbox results/outbox_scan.json     results/outbox_scan.png

dedup: bytes per entry on disk against the 48-byte target, batched lookup cost, and the time
to write, compact and expire the entries. outbox: per run, the time and the bytes read to
find the pending rows through the pending index against reading every row, the expiry time,
and each phase's peak RSS over the RSS before it (when the run recorded it).
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timeseries import ensure_mpl  # noqa: E402


def dedup(r, png):
    plt = ensure_mpl()
    fig, ax = plt.subplots(1, 3, figsize=(12, 4))
    ax[0].bar(["measured", "target"], [r["bytes_per_entry"], r.get("target_bytes_per_entry", 48)], color=["tab:blue", "tab:gray"])
    ax[0].set_ylabel("bytes per dedup entry on disk")
    ax[0].set_title(f"{r['entries'] / 1e6:.0f} M entries after compaction")
    for i, v in enumerate([r["bytes_per_entry"], r.get("target_bytes_per_entry", 48)]):
        ax[0].annotate(f"{v:g} B", (i, v), ha="center", va="bottom")
    ax[1].bar(["batched lookup"], [r["lookup_ns_per_id"] / 1e3], color="tab:orange")
    ax[1].set_ylabel("µs per id")
    ax[1].set_title(f"{r['lookups'] / 1e6:g} M lookups, {r['lookup_hits'] / max(r['lookups'], 1):.0%} hits")
    phases = [("write", r["write_s"]), ("compact", r["compact_s"]), ("expire all", r["expire_s"])]
    ax[2].bar([p for p, _ in phases], [v for _, v in phases], color="tab:green")
    ax[2].set_ylabel("seconds")
    ax[2].set_title(f"expiry leaves {r['sst_bytes_after_expiry']} B of SSTs")
    fig.suptitle(f"dedup footprint — git {r.get('git_rev', '?')}, peak RSS {r.get('max_rss_kb', 0) / 1024:.0f} MiB")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def outbox(r, png):
    plt = ensure_mpl()
    runs = r["runs"]
    has_mem = all("pending_scan_memory" in run for run in runs)
    fig, ax = plt.subplots(1, 3 if has_mem else 2, figsize=(13 if has_mem else 9, 4))
    labels = [f"run {i + 1}" for i in range(len(runs))]
    w = 0.25
    xs = range(len(runs))
    for k, (key, name) in enumerate([("pending_scan_ms", "pending rows (index)"), ("full_scan_ms", "every row"), ("expire_ms", "expire older half")]):
        ax[0].bar([x + (k - 1) * w for x in xs], [run[key] for run in runs], w, label=name)
    ax[0].set_xticks(list(xs), labels)
    ax[0].set_ylabel("ms")
    ax[0].set_title(f"{r['rows'] / 1e6:g} M rows, {r['pending'] / 1e3:g} k pending")
    ax[0].legend(fontsize=8)
    b = r["bytes_read"]
    ax[1].bar(["pending index", "every row"], [b["pending_index"] / 1e6, b["full_scan"] / 1e6], color=["tab:blue", "tab:orange"])
    ax[1].set_yscale("log")
    ax[1].set_ylabel("MB read and decoded (log)")
    if has_mem:
        for k, (key, name) in enumerate([("pending_scan_memory", "pending rows"), ("full_scan_memory", "every row"), ("expire_memory", "expire")]):
            ax[2].bar([x + (k - 1) * w for x in xs], [(run[key]["peak_rss_kb"] - run[key]["rss_before_kb"]) / 1024 for run in runs], w, label=name)
        ax[2].set_xticks(list(xs), labels)
        ax[2].set_ylabel("peak RSS over the RSS before the phase, MiB")
        ax[2].legend(fontsize=8)
    fig.suptitle(f"outbox scans — git {r.get('git_rev', '?')}")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


if __name__ == "__main__":
    kind, result, png = sys.argv[1:4]
    {"dedup": dedup, "outbox": outbox}[kind](json.load(open(result)), png)
