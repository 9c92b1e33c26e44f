#!/usr/bin/env python3
"""Summary and plot of bench/drain_vs_ks.sh: tidemark against Kafka Streams, A-B-B-A drains.

    drain_vs_ks.py RUNS.jsonl GEN.json GEN_WARMUP.json MACHINE_JSON KS_LABEL RESULT.json PLOT.png KEYS_MUST_MATCH COMMAND [STEAL_MAX_PCT]

Measured runs only (warm-ups, and runs discarded for steal above STEAL_MAX_PCT, are listed, not
counted; the discarded ones also under `steal_ceiling`). Per system: median, min and max of the
drained time, events/s, CPU seconds, CPU µs per event, peak RSS and the load average before.
Ratios (> 1 = tidemark better): events/s tidemark / KS; CPU per event and peak RSS KS /
tidemark; each as the ratio of the medians with the min–max over every tidemark × KS pair of
measured runs. Outputs: every run (warm-ups included) must POST the key set of the first
measured run, else the script exits 1 and writes no result (KEYS_MUST_MATCH=0: written, with
`key_sets_equal_in_every_run: false` and the runs that differ). POSTs re-sent with the same
Idempotency-Key are counted per run (`resent`), not hidden.
"""
import json
import statistics
import sys

from timeseries import ensure_mpl

runs_path, gen_path, gen_warm_path, machine, ks, out_json, out_png, must, command = sys.argv[1:10]
steal_max = sys.argv[10] if len(sys.argv) > 10 and sys.argv[10] else None
runs = [json.loads(line) for line in open(runs_path) if line.strip()]
measured = [r for r in runs if r["phase"] == "measured"]
ref = measured[0]
differ = [{"run": r["run"], "system": r["system"], "phase": r["phase"], "distinct_keys": r["distinct_keys"]}
          for r in runs if (r["distinct_keys"], r["keys_sha256"]) != (ref["distinct_keys"], ref["keys_sha256"])]
if differ and must == "1":
    sys.exit(f"drain_vs_ks: action keys differ from the first measured run ({ref['distinct_keys']} keys): {differ}")


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


METRICS = ["drained_s", "events_per_s", "cpu_s", "cpu_us_per_event", "peak_rss_mb", "loadavg_before"]
per_sys = {}
for s in ("tidemark", ks):
    rs = [r for r in measured if r["system"] == s]
    per_sys[s] = {m: spread([r[m] for r in rs]) for m in METRICS}
    if s != "tidemark":
        per_sys[s]["process_wall_s"] = spread([r["process_wall_s"] for r in rs])
        per_sys[s]["warmup_s"] = spread([r["warmup_s"] for r in rs])
    if rs and all("host" in r for r in rs):  # runs recorded since the host counters were added
        per_sys[s]["host"] = {k: spread([r["host"][k] for r in rs]) for k in ("steal_pct", "broker_cpu_s", "busy_cpu_s")}
t_runs = [r for r in measured if r["system"] == "tidemark"]
k_runs = [r for r in measured if r["system"] == ks]


def ratio(metric, higher_better):
    f = (lambda t, k: t / k) if higher_better else (lambda t, k: k / t)
    pairs = [f(t[metric], k[metric]) for t in t_runs for k in k_runs]
    return {"median_ratio": round(f(per_sys["tidemark"][metric]["median"], per_sys[ks][metric]["median"]), 3),
            "min": round(min(pairs), 3), "max": round(max(pairs), 3)}


result = {
    "bench": "drain_vs_ks",
    "command": command,
    "order": [r["system"] for r in measured],
    "events": ref["events"],
    "generator": json.load(open(gen_path)),
    "ks_warmup_generator": json.load(open(gen_warm_path)),
    "machine": json.loads(machine),
    "method": {
        "tidemark": "drained_s = process wall time of `run --exit-at-end` (exec to exit: start-up, drain, every action "
                    "POSTed, shutdown); cpu_s = the process's user+sys, all threads; peak RSS = its maximum RSS",
        ks: "one JVM per run: first drains the warm-up log under its own application id (discarded), closes it, GC, "
            "then the measured instance; drained_s = measured start to orders and sku-repartition committed at "
            "their ends and the last action POSTed; cpu_s = the JVM's process CPU over that span; peak RSS = "
            "VmHWM since the measured start",
    },
    "outputs": {"distinct_keys": ref["distinct_keys"], "keys_sha256": ref["keys_sha256"],
                "key_sets_equal_in_every_run": not differ, "runs_with_other_keys": differ,
                "resent_posts": {f"run {r['run']} {r['system']} {r['phase']}": r["resent"] for r in runs if r["resent"]}},
    "systems": per_sys,
    "steal_ceiling": None if steal_max is None else {
        "max_pct": float(steal_max),
        "discarded": [{"run": r["run"], "system": r["system"], "steal_pct": r["host"]["steal_pct"]}
                      for r in runs if r["phase"] == "discarded-steal"],
        "counted_above_ceiling": [{"run": r["run"], "system": r["system"], "steal_pct": r["host"]["steal_pct"]}
                                  for r in measured if r.get("steal_above_ceiling")],
    },
    "ratios_tidemark_better_above_1": {
        "events_per_s (tidemark / ks)": ratio("events_per_s", True),
        "cpu_us_per_event (ks / tidemark)": ratio("cpu_us_per_event", False),
        "peak_rss_mb (ks / tidemark)": ratio("peak_rss_mb", False),
    },
    "runs": runs,
}
json.dump(result, open(out_json, "w"), indent=2)

plt = ensure_mpl()
if plt:
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    colour = {"tidemark": "tab:green", ks: "tab:blue"}
    for ax, (m, title) in zip(axes, [("events_per_s", "drain, thousand events/s"), ("cpu_us_per_event", "CPU µs per event"),
                                     ("peak_rss_mb", "peak RSS, MiB")]):
        for i, r in enumerate(measured):
            ax.bar(i, r[m] / (1000 if m == "events_per_s" else 1), color=colour[r["system"]])
        ax.set_xticks(range(len(measured)), [("tm" if r["system"] == "tidemark" else "ks") for r in measured], fontsize=7)
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"tidemark (green) vs {ks} (blue), A-B-B-A in run order, {ref['events']} events; "
                 f"ks warm-up in the same JVM discarded", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
