#!/usr/bin/env python3
"""Freshness of the combined dashboard rows against their partials (bench/freshness.sh).

Input: two console-consumer dumps, `CreateTime:<ms>\t<key>\t<json>` per line, of the
dashboard partial topic and the combined topic. For each partial (key K|p<n>, as_of A,
produced at t) the lag is the produce time of the first combined record of K with
as_of >= A, minus t. The combined rows' age is produce time minus as_of."""
import json
import sys
from bisect import bisect_left
from collections import defaultdict
from datetime import datetime



def ensure_mpl():
    """matplotlib with the Agg backend (pip-installed for the user when missing)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        import site
        import subprocess
        subprocess.run([sys.executable, "-m", "pip", "install", "--user", "--quiet", "matplotlib"], check=False)
        site.addsitedir(site.getusersitepackages())  # a user site directory created just now
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def ms(iso):
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def load(path):
    rows = []
    for line in open(path):
        parts = line.rstrip("\n").split("\t", 2)
        if len(parts) != 3 or not parts[0].startswith("CreateTime:"):
            continue
        v = json.loads(parts[2])
        rows.append((int(parts[0].split(":", 1)[1]), parts[1], ms(v["as_of"]), v["version"]))
    return rows


def q(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def summary(xs):
    return {"n": len(xs), "p50_ms": q(xs, 0.5), "p90_ms": q(xs, 0.9), "p99_ms": q(xs, 0.99), "max_ms": max(xs) if xs else None}


def main():
    partials_path, combined_path, out_json, out_png, rate, secs, build, load_before, load_after, machine = sys.argv[1:]
    partials, combined = load(partials_path), load(combined_path)
    by_key = defaultdict(list)  # combined key -> [(as_of, produced)] in log order
    for t, key, as_of, _ in combined:
        by_key[key].append((t, as_of))
    for k in by_key:
        by_key[k].sort()
    lags, missing, points = [], 0, []
    for t, key, as_of, _ in partials:
        ck = key.rsplit("|", 1)[0]
        cands = by_key.get(ck, [])
        i = bisect_left(cands, (t - 60_000, -1))  # combined rows produced after the partial (minus slack)
        hit = next((ct for ct, cas in cands[i:] if cas >= as_of), None)
        if hit is None:
            missing += 1
            continue
        lag = max(0, hit - t)
        lags.append(lag)
        points.append((t, lag))
    ages = [t - as_of for t, _, as_of, _ in combined]
    deadline_ms = 5 * 60 * 1000
    res = {
        "bench": "freshness",
        "tidemark_binary": build,
        "rate_events_per_s": float(rate),
        "seconds": float(secs),
        "partials": len(partials),
        "combined": len(combined),
        "partials_without_combined_row": missing,
        "partial_to_combined_lag": summary(lags),
        "combined_row_age": summary(ages),
        "deadline_ms": deadline_ms,
        "within_deadline": bool(lags) and missing == 0 and max(lags) < deadline_ms,
        "loadavg_before": float(load_before),
        "loadavg_after": float(load_after),
        "machine": json.loads(machine),
        "method": "lag = produce time of the first combined record of the key with as_of >= the partial's as_of, "
        "minus the partial's produce time (record CreateTime, set by tidemark's producer); "
        "age = combined record produce time minus its as_of (broker append time of the newest input)",
    }
    json.dump(res, open(out_json, "w"), indent=2)
    print(json.dumps(res))
    plt = ensure_mpl()
    if points:
        t0 = min(t for t, _ in points)
        fig, ax = plt.subplots(figsize=(9, 4))
        ax.scatter([(t - t0) / 1000 for t, _ in points], [l for _, l in points], s=2, alpha=0.4, label="partial → combined (ms)")
        ax.axhline(q(lags, 0.99), color="red", lw=1, label=f"p99 {q(lags, 0.99)} ms")
        ax.set_xlabel("seconds since the first partial")
        ax.set_ylabel("lag (ms)")
        ax.set_title(f"Combined dashboard freshness at {rate} events/s ({build})", fontsize=9)
        ax.legend(loc="upper right")
        fig.tight_layout()
        fig.savefig(out_png, dpi=110)


if __name__ == "__main__":
    main()
