#!/usr/bin/env python3
"""Summary and plot of bench/latency_vs_ks.sh: steady-rate action latency, tidemark against Kafka
Streams EOS, from a spike_ab.sh series run at FACTOR 1 (the same input all along).

    latency_vs_ks.py summary RUNS.jsonl RAW_DIR OUT.json OUT.png --rate R --seconds S [--meta JSON]

The window of every run: from SKIP_S after the generator's start to its end (steady input, the
warm-up seconds left out). Per run, the same for both systems:
- per-second append→2xx p99 over the window (tidemark: exact per action from the receiver's log;
  Kafka Streams: its dispatcher's per-second HdrHistogram): the median second, the 90th-percentile
  second and the worst second, and the share of seconds at or below the target (50 ms);
- kept up: the lag at the generator's end below one second of input (a system that falls behind
  has a p99 that only says how far behind it is by then);
- tidemark also the pooled exact p50/p99/p99.9 over every action of the window (Kafka Streams'
  log has per-second quantiles only, so nothing pooled can be said for it);
- steal, CPU, peak RSS; outputs (no key with two payloads; key sets compared across runs).
Summary: median and min–max per system, Kafka Streams over tidemark of the medians and per block,
verdicts against p99 <= 50 ms at 20 k/s with their ratios.
"""
import gzip
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_summary as ab  # noqa: E402
import caught_up as cu  # noqa: E402
from caught_up import opt, pick, spread  # noqa: E402

TARGET_MS, TARGET_RATE = 50, 20_000
SKIP_S = 10
MEASURES = (
    ("per_second_p99_median_ms", "median over the window's seconds of the per-second p99, ms"),
    ("per_second_p99_p90_ms", "90th percentile over the window's seconds of the per-second p99, ms"),
    ("per_second_p99_max_ms", "worst second's p99, ms"),
    ("share_of_seconds_within_target", "share of the window's seconds with actions whose p99 <= 50 ms"),
    ("pooled_p50_ms", "tidemark: exact p50 over every action of the window, ms"),
    ("pooled_p99_ms", "tidemark: exact p99 over every action of the window, ms"),
    ("pooled_p999_ms", "tidemark: exact p99.9 over every action of the window, ms"),
    ("actions_in_window", "actions POSTed in the window"),
    ("lag_at_gen_end_s_of_input", "lag when the generator ended, in seconds of input"),
    ("offered_per_s", "records the generator sent per second before the (factor-1) spike mark: most of the window"),
    ("steal_pct", "the hypervisor's steal during the run, %"),
    ("cpu_s_processor", "processor CPU seconds per run"),
    ("peak_rss_mb", "processor peak RSS, MiB"),
)
TIDEMARK_ONLY = ("pooled_p50_ms", "pooled_p99_ms", "pooled_p999_ms")


def window_of(r):
    m = r["marks_epoch"]
    return m["t0"] + SKIP_S, m["gen_end"]


def measure(r, raw_dir, rate):
    """The steady-window measures of one spike_ab run line (and its raw copy of the POSTs)."""
    a, b = window_of(r)
    s0 = r["marks_epoch"]["spike_start"]
    secs = [(s0 + t, n, p) for t, n, p in r["per_second_p99"] if t is not None and a <= s0 + t <= b]
    p99s = sorted(p for _t, _n, p in secs)
    out = {"window_s": round(b - a, 1), "seconds_with_actions": len(p99s),
           "per_second_p99_median_ms": statistics.median(p99s) if p99s else None,
           "per_second_p99_p90_ms": pick(p99s, .9), "per_second_p99_max_ms": p99s[-1] if p99s else None,
           "share_of_seconds_within_target": round(sum(1 for p in p99s if p <= TARGET_MS) / len(p99s), 3) if p99s else None,
           "actions_in_window": sum(n for _t, n, _p in secs)}
    lag = [(s0 + t, v) for t, v in r.get("lag_series") or [] if t is not None and v is not None]
    at_end = cu.value_at(lag, b)
    out["lag_at_gen_end_records"] = at_end
    out["lag_at_gen_end_s_of_input"] = None if at_end is None else round(at_end / rate, 2)
    out["kept_up"] = at_end is not None and at_end < rate
    out["offered_per_s"] = (r.get("offered_pre") or {}).get("rate_per_s")
    if r["system"] == "tidemark" and r.get("keys_file"):
        path = os.path.join(raw_dir, r["keys_file"].replace(".keys.txt.gz", ".actions.jsonl.gz"))
        with gzip.open(path, "rt") as f:
            lat = sorted(x["t"] - x["src"] for x in map(json.loads, f)
                         if x.get("src") is not None and a <= x["t"] / 1000 <= b)
        out.update(pooled_p50_ms=pick(lat, .5), pooled_p99_ms=pick(lat, .99), pooled_p999_ms=pick(lat, .999))
    for k in ("steal_pct", "cpu_s_processor", "peak_rss_mb"):
        out[k] = r.get(k)
    return out


def verdicts(out, systems, rate):
    tm = out["systems"].get("tidemark", {})
    v = []
    at = f"at {rate / 1000:g}k/s" + ("" if rate == TARGET_RATE else f" (the target's rate is {TARGET_RATE / 1000:g}k/s)")
    p = (tm.get("pooled_p99_ms") or {}).get("median")
    ps = (tm.get("per_second_p99_median_ms") or {}).get("median")
    if p is not None:
        v.append(f"tidemark p99 {at}: {p:.0f} ms pooled over each run's window (median of runs), per-second p99 median {ps:.0f} ms: "
                 + ("met" if p <= TARGET_MS else f"missed, {p / TARGET_MS:.1f}× the {TARGET_MS} ms target"))
    for s in systems:
        if s == "tidemark":
            continue
        k = out["systems"][s]
        kp = (k.get("per_second_p99_median_ms") or {}).get("median")
        kept = k.get("kept_up_runs")
        line = (f"{s} {at}: per-second p99 median {kp:.0f} ms (median of runs); kept up in {kept} of {k['runs']} runs"
                if kp is not None else f"{s} {at}: no actions in the window")
        if kp is not None:
            line += ": " + ("met" if kp <= TARGET_MS else f"missed, {kp / TARGET_MS:.1f}×")
            if ps:
                line += (f"; Kafka Streams / tidemark of the per-second p99 medians: {kp / ps:.2f}"
                         + (" (Kafka Streams lower)" if kp < ps else " (tidemark lower)"))
        if kept is not None and kept < k["runs"]:
            line += " (a run that did not keep up has a p99 that says how far behind it was, not a steady latency)"
        v.append(line)
    note = ab.steal_note(out["systems"], systems)
    if note:
        v.append(note)
    return v


def summary(args):
    runs_path, raw_dir, out_json, out_png = args[:4]
    rate, seconds = float(opt(args, "--rate")), int(opt(args, "--seconds"))
    meta = json.loads(opt(args, "--meta", "{}"))
    runs, measured, systems = ab.load_runs(runs_path)
    for r in runs:
        r["steady"] = measure(r, raw_dir, rate)
    out = {**ab.header("latency_vs_ks", meta, runs, measured),
           "target": {"row": "p99 append→2xx ≤ 50 ms at 20k/s", "p99_ms": TARGET_MS, "rate": TARGET_RATE},
           "rate": rate, "seconds": seconds, "window": f"generator start + {SKIP_S} s → generator end",
           "measures": dict(MEASURES), "systems": {}}
    for s in systems:
        rs = [r["steady"] for r in measured if r["system"] == s]
        m = {k: spread([x.get(k) for x in rs], none_is_never=False) for k, _ in MEASURES
             if not (s != "tidemark" and k in TIDEMARK_ONLY)}
        m["runs"], m["kept_up_runs"] = len(rs), sum(1 for x in rs if x["kept_up"])
        out["systems"][s] = m
    flat = [{**r, **r["steady"]} for r in measured]
    out["ratios_ks_over_tidemark"] = ab.ratios_ks_over_tidemark(
        out["systems"], flat, systems, ("per_second_p99_median_ms", "per_second_p99_max_ms"))
    out["keys"] = ab.compare_keys(runs, raw_dir)
    out["verdicts"] = verdicts(out, systems, rate)
    if meta.get("method_note"):
        out["verdicts"].insert(0, meta["method_note"])
    out["runs"] = ab.without(runs, ("per_second_p99", "lag_series", "backlog_age_series"))
    with open(out_json, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    for line in out["verdicts"]:
        print("[latency_vs_ks]", line, file=sys.stderr)
    plot(out_png, measured, systems, rate)


def plot(path, measured, systems, rate):
    from timeseries import ensure_mpl
    plt = ensure_mpl()
    if not plt:
        return
    fig, ax = plt.subplots(figsize=(10, 4.5))
    labelled = set()
    for r in measured:
        a, b = window_of(r)
        s0 = r["marks_epoch"]["spike_start"]
        pts = [(s0 + t - r["marks_epoch"]["t0"], n, p) for t, n, p in r["per_second_p99"]
               if t is not None and a <= s0 + t <= b]
        ab.p99_line(ax, pts, 3, color=ab.color(r["system"]), alpha=.5, lw=1,
                    label=None if r["system"] in labelled else r["system"])
        labelled.add(r["system"])
    ax.axhline(TARGET_MS, color="red", ls="--", lw=1, label=f"target {TARGET_MS} ms")
    ax.set_yscale("log")
    ax.set_xlabel("s since the generator's start")
    ax.set_ylabel("per-second append→2xx p99, ms")
    ax.set_title(f"steady {rate / 1000:g}k/s, every measured run (tidemark exact, Kafka Streams HdrHistogram)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    if sys.argv[1:2] != ["summary"]:
        sys.exit(__doc__)
    summary(sys.argv[2:])
