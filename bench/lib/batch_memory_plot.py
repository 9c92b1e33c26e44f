#!/usr/bin/env python3
"""Plot of one `tidemark batch close` run of bench/batch_memory.sh: RSS, the scratch dedup
store on disk, and records read, over time.

    batch_memory_plot.py SAMPLES RESULT_JSON PNG

SAMPLES: one line per sample, `unix_time rss_kib dedup_store_bytes records_read`, `-` for a
value not available at that moment; lines with another shape are skipped. RESULT_JSON gets `rss_series` (min/max/last MiB, samples) and
`rate_per_minute` (records/s of each minute) added; the PNG has both panels.
"""
import json
import sys

from timeseries import ensure_mpl


def load(path):
    rows = []
    for line in open(path):
        parts = line.split()
        if len(parts) != 4 or not parts[1].isdigit():
            continue
        t, rss_kib = float(parts[0]), int(parts[1])
        dedup = int(parts[2]) if parts[2].isdigit() else None
        records = int(parts[3]) if parts[3].isdigit() else None
        rows.append((t, rss_kib * 1024, dedup, records))
    return rows


def per_minute(rows):
    """Records/s of each whole minute since the first sample that has a record count."""
    counted = [(t, n) for t, _, _, n in rows if n is not None]
    if not counted:
        return []
    t0, out, minute = counted[0][0], [], 1
    start = counted[0]
    for t, n in counted:
        if t - t0 >= minute * 60:
            out.append(round((n - start[1]) / (t - start[0])))
            start, minute = (t, n), minute + 1
    return out


def main():
    samples, result_path, png = sys.argv[1:4]
    rows = load(samples)
    result = json.load(open(result_path))
    mib = 2 ** 20
    rss = [r for _, r, _, _ in rows]
    result["rss_series"] = {
        "samples": len(rss),
        "every_s": 5,
        "min_mib": round(min(rss) / mib, 1) if rss else None,
        "max_mib": round(max(rss) / mib, 1) if rss else None,
        "last_mib": round(rss[-1] / mib, 1) if rss else None,
    }
    result["rate_per_minute"] = per_minute(rows)
    with open(result_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    plt = ensure_mpl()
    t0 = rows[0][0] if rows else 0
    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    minutes = [(t - t0) / 60 for t, _, _, _ in rows]
    axes[0].plot(minutes, [r / mib for r in rss], color="tab:orange", label=f"{'shadow' if 'shadow' in result else 'batch close'} RSS")
    dedup = [(m, d / mib) for m, (_, _, d, _) in zip(minutes, rows) if d is not None]
    axes[0].plot([m for m, _ in dedup], [d for _, d in dedup], ".", color="tab:blue", label="scratch dedup store on disk")
    target = result.get("target_max_rss_mib", 1024)
    axes[0].axhline(target, color="tab:red", linestyle="--", label="target RSS")
    axes[0].set_ylim(0, max([target] + [r / mib for r in rss]) * 1.08)
    axes[0].set_ylabel("MiB")
    counted = [(m, n / 1e6) for m, (_, _, _, n) in zip(minutes, rows) if n is not None]
    axes[1].plot([m for m, _ in counted], [n for _, n in counted], color="tab:green", label="records read")
    axes[1].set_ylabel("million records")
    axes[1].set_xlabel("minutes since the first sample")
    for ax in axes:
        ax.legend(loc="upper left")
        ax.grid(alpha=0.3)
    what = "tidemark shadow" if "shadow" in result else "batch close"
    fig.suptitle(f"{what} over {result.get('events_generated', 0) / 1e6:.0f} M events, "
                 f"{result.get('git_rev', '')}: max RSS {result.get('max_rss_mib')} MiB, "
                 f"{result.get('wall_s')} s", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=90)


if __name__ == "__main__":
    main()
