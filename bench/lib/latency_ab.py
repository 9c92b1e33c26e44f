"""Summary and plot of bench/latency_ab.sh: per side, the spread of each run's exact
append→2xx quantiles, and the quantiles of all measured samples pooled.

    latency_ab.py RUNS.jsonl RAW_PREFIX OUT.json OUT.png
"""
import json
import statistics
import sys

runs_path, raw_prefix, out_json, out_png = sys.argv[1:]
runs = [json.loads(l) for l in open(runs_path) if l.strip()]


def pick(xs, p):
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else None


summary = {"bench": "latency_ab", "rate": runs[0]["rate"], "seconds": runs[0]["seconds"], "sides": {}, "runs": []}
samples = {}
for r in runs:
    ms = [int(x) for x in open(f"{raw_prefix}-{r['run']}.ms") if x.strip()]
    exact = r.get("end_to_end_exact_ms", {})
    summary["runs"].append({k: r.get(k) for k in ("run", "side", "config", "phase", "build", "loadavg_at_end", "steal_pct", "merge_broken_promises", "outputs")}
                           | {"p50_ms": exact.get("p50"), "p99_ms": exact.get("p99"), "p999_ms": exact.get("p999")})
    if r["phase"] != "measured":
        continue
    samples.setdefault(r["side"], []).extend(ms)
    side = summary["sides"].setdefault(r["side"], {"config": r["config"], "build": r["build"], "p50_ms": [], "p99_ms": [], "p999_ms": [],
                                                   "steal_pct": [], "broken_promises": 0})
    for q in ("p50", "p99", "p999"):
        side[f"{q}_ms"].append(exact.get(q))
    side["steal_pct"].append(r.get("steal_pct"))  # runs since latency.sh records it; None before
    side["broken_promises"] += r.get("merge_broken_promises") or 0
for name, side in summary["sides"].items():
    for q in ("p50_ms", "p99_ms", "p999_ms", "steal_pct"):
        side[q] = spread(side[q])
    pooled = sorted(samples[name])
    side["pooled_ms"] = {"count": len(pooled), "p50": pick(pooled, .5), "p99": pick(pooled, .99), "p999": pick(pooled, .999), "max": pooled[-1] if pooled else None}
json.dump(summary, open(out_json, "w"), indent=1)

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, ax = plt.subplots(figsize=(8, 4.5))
for name in sorted(samples):
    xs = sorted(samples[name])
    ax.plot(xs, [i / len(xs) for i in range(len(xs))], label=f"{name}: {summary['sides'][name]['config']}")
ax.axvline(50, color="grey", linestyle="--", label="target p99 50 ms")
ax.set_xscale("log")
ax.set_xlabel("append → 2xx, ms (exact, every action of the measured runs)")
ax.set_ylabel("fraction of actions")
ax.set_title(f"Action latency at {summary['rate']}/s, alternating A-B-B-A")
ax.legend()
fig.tight_layout()
fig.savefig(out_png, dpi=110)
