#!/usr/bin/env python3
"""Medians, ratios (tidemark / Kafka Streams) with their spread, machine facts and a PNG.

    summarize_throughput.py RUNS.jsonl GEN.json OUT.json
"""
import json, os, platform, statistics, subprocess, sys

runs_path, gen_path, out = sys.argv[1:4]
runs = [json.loads(l) for l in open(runs_path) if l.strip()]
measured = [r for r in runs if r["phase"] == "measured"]
systems = ["tidemark", "ks-alos", "ks-eos"]
metrics = ["events_per_s", "cpu_s_per_million", "cpu_s_per_million_incl_broker", "peak_rss_mb", "wall_s"]


def machine():
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
    mem = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    return {"nproc": os.cpu_count(), "cpu_model": model, "mem_gib": round(mem / 2**20, 1),
            "kernel": platform.release(), "java": subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]}


med = {s: {m: statistics.median([r[m] for r in measured if r["system"] == s]) for m in metrics}
       for s in systems if any(r["system"] == s for r in measured)}
ratios = {}
for ks in ("ks-alos", "ks-eos"):
    if ks not in med or "tidemark" not in med:
        continue
    t = [r for r in measured if r["system"] == "tidemark"]
    k = [r for r in measured if r["system"] == ks]
    rr = {}
    for m, better_high in (("events_per_s", True), ("cpu_s_per_million", False), ("cpu_s_per_million_incl_broker", False),
                           ("peak_rss_mb", False)):
        # throughput: tidemark / KS (higher = tidemark better); cost metrics: KS / tidemark (higher = tidemark better)
        f = (lambda a, b: a / b) if better_high else (lambda a, b: b / a)
        pairs = [f(a[m], b[m]) for a in t for b in k]
        rr[m] = {"median_ratio": round(f(med["tidemark"][m], med[ks][m]), 2), "min": round(min(pairs), 2), "max": round(max(pairs), 2)}
    ratios[f"tidemark_vs_{ks}"] = rr
res = {"bench": "throughput_compare", "generator": json.load(open(gen_path)), "runs": runs, "medians": med,
       "ratios": ratios, "ratio_note": "events_per_s: tidemark/KS; cpu and rss: KS/tidemark (so > 1 means tidemark better); min/max over all tidemark×KS run pairs",
       "steal_pct_max": max((r["steal_pct"] for r in runs), default=0), "machine": machine()}
json.dump(res, open(out, "w"), indent=1)
print(json.dumps({"medians": med, "ratios": ratios, "steal_pct_max": res["steal_pct_max"]}, indent=1))

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=False)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
fig, axes = plt.subplots(1, 3, figsize=(13, 4))
for ax, (m, title) in zip(axes, [("events_per_s", "drain throughput (events/s)"),
                                 ("cpu_s_per_million_incl_broker", "CPU s per million events\n(processor + broker)"),
                                 ("peak_rss_mb", "peak RSS of the processor (MiB)")]):
    names = [s for s in systems if s in med]
    ax.bar(names, [med[s][m] for s in names], color=["#2a7", "#37c", "#c73"][: len(names)], alpha=0.7)
    for i, s in enumerate(names):
        ys = [r[m] for r in measured if r["system"] == s]
        ax.scatter([i] * len(ys), ys, color="k", s=12, zorder=3)
    ax.set_title(title, fontsize=10)
g = res["generator"]
fig.suptitle(f"{g.get('orders_records')} order records, ~1 KiB; medians (bars) and each run (dots); {res['machine']['nproc']} cores", fontsize=10)
fig.tight_layout()
fig.savefig(out.replace(".json", ".png"), dpi=110)
