#!/usr/bin/env python3
"""Summarises a bounded-state soak (bench/soak.sh) and plots it.

    soak.py RESULT.json PLOT.png --samples S.jsonl --disk D.jsonl --gen GEN.log --actions A.jsonl [--maps M.jsonl] --meta JSON

Verdict ("flat"): after the settling time (the longer retention plus two minutes: by then
the first entries have expired and compaction has had a turn) the state directory's size and
the processor's RSS are judged over the rest of the run:
- growth: least-squares slope over the judged span, extrapolated to a whole hour, as a share
  of the judged mean; flat when below 10 % per hour for both;
- the judged span's last-third mean is compared with its first-third mean (ratio reported);
- the processor kept up: the maximum backlog age over the judged span is below 10 s.
The RSS is also split by who mapped it (maps_sampler.py: mimalloc for Rust, glibc's arenas
for RocksDB and librdkafka, files) and each part judged the same way, so a growth names its
allocator. Samples are kept raw next to the result (bench/results/raw/).
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timeseries import ensure_mpl, gen_progress, load_jsonl, opt  # noqa: E402


def seconds(span):
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[span[-1]]
    return float(span[:-1]) * unit


def settle_s(dedup_retention, window_retention):
    """The settling time: the longer retention plus two minutes."""
    return max(seconds(dedup_retention), seconds(window_retention)) + 120


def slope(points):
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    den = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / den if den else 0.0


def judge(points, t_from, what):
    span = [(t, v) for t, v in points if t >= t_from]
    if len(span) < 6:
        return {"what": what, "samples": len(span), "flat": False, "why": "too few samples after settling"}
    mean = sum(v for _, v in span) / len(span)
    per_hour = slope(span) * 3600
    third = max(1, len(span) // 3)
    first = sum(v for _, v in span[:third]) / third
    last = sum(v for _, v in span[-third:]) / third
    growth = per_hour / mean if mean else 0.0
    return {
        "what": what,
        "samples": len(span),
        "mean": round(mean),
        "min": round(min(v for _, v in span)),
        "max": round(max(v for _, v in span)),
        "slope_per_hour": round(per_hour),
        "growth_per_hour_share": round(growth, 4),
        "last_third_over_first_third": round(last / first, 4) if first else None,
        "flat": abs(growth) < 0.10,
    }


def main():
    result_path, png = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    meta = json.loads(opt(args, "--meta", "{}"))
    samples = load_jsonl(opt(args, "--samples"))
    disk = load_jsonl(opt(args, "--disk"))
    gen = gen_progress(opt(args, "--gen"))
    actions = load_jsonl(opt(args, "--actions"))
    t0 = meta.get("start") or (samples[0]["t"] if samples else 0)
    end = meta.get("end") or (samples[-1]["t"] if samples else t0)
    settle = settle_s(meta.get("dedup_retention", "5m"), meta.get("window_retention", "10m"))

    state = [(d["t"] - t0, d["state_bytes"]) for d in disk if d.get("state_bytes")]
    broker = [(d["t"] - t0, d["broker_bytes"]) for d in disk if d.get("broker_bytes")]
    rss = [(s["t"] - t0, s["proc"]["processor"]["rss_kb"] * 1024) for s in samples
           if s.get("proc", {}).get("processor", {}).get("rss_kb")]
    age = [(s["t"] - t0, max(s["backlog_age"].values())) for s in samples if s.get("backlog_age")]
    # What RocksDB says it holds in memory (tidemark_state_memory_bytes{kind}), beside the RSS.
    store_kinds = ("memtables", "block_cache", "table_readers")
    store_mem = {k: [(s["t"] - t0, s["counters"][f"state_memory_bytes{{kind={k}}}"]) for s in samples
                     if f"state_memory_bytes{{kind={k}}}" in s.get("counters", {})] for k in store_kinds}
    # What the tasks hold in memory (tidemark_task_entries{kind}): names a climbing part.
    entries = {}
    for s in samples:
        for name, v in s.get("counters", {}).items():
            if name.startswith("task_entries{kind="):
                entries.setdefault(name[len("task_entries{kind="):-1], []).append((s["t"] - t0, v))
    maps_path = opt(args, "--maps")
    maps = load_jsonl(maps_path) if maps_path and os.path.exists(maps_path) else []
    mapped = {}
    for m in maps:
        for k, v in m["by"].items():
            mapped.setdefault(k, []).append((m["t"] - t0, v))
    # glibc's two kinds of arena together: RocksDB and librdkafka allocate from both.
    if maps:
        mapped["glibc"] = [(m["t"] - t0, m["by"].get("glibc_main", 0) + m["by"].get("glibc_arenas", 0)) for m in maps]
    rate = []
    for (ta, na), (tb, nb) in zip(gen, gen[1:]):
        if na is not None and nb is not None and tb > ta:
            rate.append((tb - t0, (nb - na) / (tb - ta)))
    judged_age = [v for t, v in age if settle <= t <= end - t0]
    produced = next((n for _, n in reversed(gen) if n is not None), 0)
    result = {
        "scenario": "soak",
        "meta": meta,
        "settle_s": settle,
        "produced_order_records": produced,
        "achieved_rate": round(produced / (end - t0)) if end > t0 else None,
        "actions_received": len(actions),
        "state_disk": judge(state, settle, "state directory bytes (du)"),
        "rss": judge(rss, settle, "processor RSS bytes"),
        "store_memory": {k: judge(v, settle, f"state store {k} bytes") for k, v in store_mem.items() if v},
        "rss_by_mapping": {k: judge(v, settle, f"RSS in {k} mappings") for k, v in mapped.items()},
        "task_entries": {k: judge(v, settle, f"{k} entries held by the tasks") for k, v in entries.items()},
        "broker_disk": judge(broker, settle, "broker data bytes (input topics keep 10 min)"),
        "max_backlog_age_s_after_settling": round(max(judged_age), 2) if judged_age else None,
    }
    kept_up = result["max_backlog_age_s_after_settling"] is not None and result["max_backlog_age_s_after_settling"] < 10
    result["verdict"] = {
        "state_disk_flat": result["state_disk"]["flat"],
        "rss_flat": result["rss"]["flat"],
        "kept_up": kept_up,
        "pass": result["state_disk"]["flat"] and result["rss"]["flat"] and kept_up,
    }
    with open(result_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(json.dumps(result["verdict"]))

    plt = ensure_mpl()
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    mib = 2 ** 20
    axes[0].plot([t / 60 for t, _ in state], [v / mib for _, v in state], label="state directory (du)")
    axes[0].set_ylabel("MiB on disk")
    axes[1].plot([t / 60 for t, _ in rss], [v / mib for _, v in rss], color="tab:orange", label="processor RSS")
    for k, v in store_mem.items():
        if v:
            axes[1].plot([t / 60 for t, _ in v], [x / mib for _, x in v], linewidth=1, label=f"store {k}")
    for k in ("mimalloc", "glibc"):
        if mapped.get(k):
            axes[1].plot([t / 60 for t, _ in mapped[k]], [x / mib for _, x in mapped[k]], linestyle="--",
                         linewidth=1, label=f"RSS in {k} mappings")
    axes[1].set_ylabel("MiB RSS")
    axes[2].plot([t / 60 for t, _ in age], [v for _, v in age], color="tab:red", label="backlog age (max over partitions)")
    axes[2].set_ylabel("backlog age (s)")
    ax_rate = axes[2].twinx()
    ax_rate.plot([t / 60 for t, _ in rate], [v for _, v in rate], color="tab:gray", alpha=0.5, label="offered events/s")
    ax_rate.set_ylabel("offered events/s")
    for ax in axes:
        ax.axvline(settle / 60, color="k", linestyle=":", linewidth=1)
        ax.legend(loc="upper left")
        ax.grid(alpha=0.3)
    axes[2].set_xlabel("minutes since the generator started (dotted: end of settling, judged after)")
    fig.suptitle(f"soak: {meta.get('rate')}/s for {meta.get('duration_s')} s, dedup retention "
                 f"{meta.get('dedup_retention')}, window retention {meta.get('window_retention')} — "
                 f"{meta.get('machine', {}).get('tidemark_binary', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=90)


if __name__ == "__main__":
    main()
