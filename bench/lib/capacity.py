#!/usr/bin/env python3
"""Summary and plot of bench/capacity.sh: one tidemark instance against two on one core.

    capacity.py RUNS.jsonl GEN.json RESULT.json PLOT.png --rev REV --core N --broker-cpus LIST --command CMD \
        [--drain-ref DRAIN_VS_KS.json]

Measured runs only (warm-ups are listed, not counted). Per configuration (1pod, 2pods): median,
min and max of events/s, CPU µs per event, the core's busy fraction, the broker's CPU µs per
event, peak RSS, steal. Then:
- capacity per core: 1pod's median events/s (and events per CPU-second);
- scaling efficiency at 2 instances: 2pods' events/s over 1pod's (of the medians and per block);
- pods for a 200 k/s spike: a drain of >= 5/6 × 200 k/s keeps the backlog inside the 10 s budget
  through 60 s of it (the spike row's arithmetic); pods of one such core each, at the measured
  efficiency, and the broker CPU that drain implies at the measured broker cost per event;
- with --drain-ref, both systems' CPU per event from the drain row (unpinned), for reference: Kafka
  Streams' events per CPU-second beside tidemark's one core (derived, not run here).
The outputs must agree: every run POSTs the key set of the first measured run, else exit 1 and no
result. Re-sent POSTs (same Idempotency-Key) are counted, not hidden.
"""
import argparse
import json
import math
import os
import statistics
import sys

from caught_up import spread
from timeseries import ensure_mpl

CONFIGS = ("1pod", "2pods")
SPIKE_RATE, BUDGET_S, SPIKE_S = 200_000, 10, 60
NEEDED = SPIKE_RATE * (1 - BUDGET_S / SPIKE_S)  # 166,667/s: the record read at the spike's end is <= 10 s old
MEASURES = ("steady_events_per_s", "steady_cpu_us_per_event", "steady_core_busy", "events_per_s", "cpu_us_per_event", "core_busy",
            "wall_s", "broker_us_per_event", "peak_rss_mb", "steal_pct", "loadavg_before")


def corr(xs, ys):
    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    return round(statistics.correlation(xs, ys), 2)


def _series(path):
    """[(t, records consumed, CPU ticks)] of one pod's sampler file (ticks None when not sampled)."""
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            x = json.loads(line)
            n = (x.get("counters") or {}).get("records_total")
            if n is not None:
                out.append((x["t"], n, ((x.get("proc") or {}).get("pod") or {}).get("cpu_ticks")))
    return out


def _at(series, t, i):
    """Field i of a series at time t, linear between samples, flat outside them (0 before the first
    sample of a counter that starts at 0 is the same as its first value: the pod had not begun)."""
    if t <= series[0][0]:
        return series[0][i]
    for (t0, *a), (t1, *b) in zip(series, series[1:]):
        if t0 <= t <= t1:
            va, vb = a[i - 1], b[i - 1]
            return va + (vb - va) * (t - t0) / (t1 - t0) if t1 > t0 else vb
    return series[-1][i]


def steady_window(sample_files, events, tck, lo=0.1, hi=0.9):
    """The drain rate and CPU per event between the moments the pods together had consumed lo and hi of
    the log (their /metrics records_total, sampled every 0.5 s): a run's start (state open, group
    join, first fetch) and its end (the merge's last promise, the drain check, the exit) are not in
    it. None when a pod was not sampled or the counters never reached hi of the log."""
    series = [_series(p) for p in sample_files if os.path.exists(p)]
    if len(series) != len(sample_files) or not all(series):
        return None
    grid = sorted({t for s in series for t, _n, _c in s})
    total = [(t, sum(_at(s, t, 1) for s in series)) for t in grid]

    def crossing(target):
        for (t0, a), (t1, b) in zip(total, total[1:]):
            if a < target <= b:
                return t0 + (t1 - t0) * (target - a) / (b - a)
        return None
    t_lo, t_hi = crossing(lo * events), crossing(hi * events)
    if t_lo is None or t_hi is None or t_hi <= t_lo:
        return None
    n = (hi - lo) * events
    out = {"from": lo, "to": hi, "window_s": round(t_hi - t_lo, 2), "events_per_s": round(n / (t_hi - t_lo))}
    if all(c is not None for s in series for _t, _n, c in s):
        cpu = sum(_at(s, t_hi, 2) - _at(s, t_lo, 2) for s in series) / tck
        out.update(cpu_us_per_event=round(cpu / n * 1e6, 2), core_busy=round(cpu / (t_hi - t_lo), 3))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs")
    p.add_argument("gen")
    p.add_argument("out_json")
    p.add_argument("out_png")
    p.add_argument("--rev", required=True)
    p.add_argument("--core", required=True)
    p.add_argument("--broker-cpus", required=True)
    p.add_argument("--command", required=True)
    p.add_argument("--drain-ref", help="a drain_vs_ks result: both systems' CPU per event, for reference")
    a = p.parse_args()

    with open(a.runs) as f:
        runs = [json.loads(x) for x in f if x.strip()]
    measured = [r for r in runs if r["phase"] == "measured"]
    ref = measured[0]
    bad = [r["run"] for r in runs if (r["distinct_keys"], r["keys_sha256"]) != (ref["distinct_keys"], ref["keys_sha256"])]
    if bad:
        sys.exit(f"capacity: action keys of runs {bad} differ from the first measured run's ({ref['distinct_keys']} keys)")
    blocks = sorted({r["block"] for r in measured})
    for r in runs:
        for k in ("events_per_s", "cpu_us_per_event", "core_busy"):
            r["steady_" + k] = (r.get("steady") or {}).get(k)
    # The basis of the verdicts: the steady window (10–90 % of the log) when every measured run has it,
    # else the whole run (start and exit included), said in the result.
    P = "steady_" if all(r["steady_cpu_us_per_event"] is not None for r in measured) else ""
    basis = ("10–90 % of the log consumed (the pods' /metrics, every 0.5 s): start and exit excluded" if P else
             "whole runs, start and exit included (no steady window in some run)")

    per = {}
    for c in CONFIGS:
        rs = [r for r in measured if r["config"] == c]
        per[c] = {m: spread([r[m] for r in rs], none_is_never=False) for m in MEASURES if all(r[m] is not None for r in rs)}
        per[c]["runs"] = len(rs)
        per[c]["steal_vs_events_per_s_r"] = corr([r["steal_pct"] for r in rs], [r[P + "events_per_s"] for r in rs])
    one, two = per["1pod"], per["2pods"]

    def per_block(measure, num, den):
        out = []
        for b in blocks:
            x = [r[measure] for r in measured if r["block"] == b and r["config"] == num]
            y = [r[measure] for r in measured if r["block"] == b and r["config"] == den]
            out.append(round(statistics.median(x) / statistics.median(y), 3) if x and y else None)
        return out

    ev, cu = P + "events_per_s", P + "cpu_us_per_event"
    cap = one[ev]["median"]
    eff = two[ev]["median"] / cap
    cpu_ratio = one[cu]["median"] / two[cu]["median"]
    per_pod_at_scale = cap * min(eff, 1.0)
    pods_ideal = math.ceil(NEEDED / cap)
    pods = math.ceil(NEEDED / per_pod_at_scale)
    broker_cores = one["broker_us_per_event"]["median"] * NEEDED / 1e6
    busy = one[P + "core_busy"]["median"]

    verdicts = [
        f"capacity per core: {cap / 1000:.1f}k events/s (one instance alone on CPU {a.core}, the broker on CPU {a.broker_cpus}; "
        f"{one[cu]['median']:.1f} µs CPU per event = {1e6 / one[cu]['median'] / 1000:.1f}k events "
        f"per CPU-second; the core {busy * 100:.0f} % busy" + (" — the core is the limit)" if busy >= 0.9 else
                                                                " — not the limit: the instance also waits, on the broker or fsync)"),
        f"scaling efficiency at 2 instances on the same core: {eff:.2f} of one instance's events/s "
        f"(per block {', '.join(f'{x:.2f}' for x in per_block(ev, '2pods', '1pod'))}); CPU per event "
        f"{two[cu]['median']:.1f} vs {one[cu]['median']:.1f} µs ({cpu_ratio:.2f}). "
        "What splitting costs on one host; contention only two hosts have (network, the broker at twice the fetch rate) is not in it",
        f"a 200 k/s spike inside the 10 s budget needs a drain of >= {NEEDED / 1000:.1f}k/s: {pods} pods of one such core "
        f"at {min(eff, 1.0):.2f} efficiency ({pods_ideal} if splitting cost nothing), assuming the 2-instance efficiency "
        f"holds at that count and the topics have at least {pods} partitions (4 in these runs)",
        f"the broker: {one['broker_us_per_event']['median']:.1f} µs CPU per event drained (fetch, the repartition hop, "
        f"transactions) -> ~{broker_cores:.1f} cores at {NEEDED / 1000:.0f}k/s for the processors' side alone, before "
        "the producers' 200 k/s of appends",
    ]
    reference = None
    if a.drain_ref:
        with open(a.drain_ref) as f:
            d = json.load(f)["systems"]
        reference = {s: {"events_per_s": d[s]["events_per_s"]["median"], "cpu_us_per_event": d[s]["cpu_us_per_event"]["median"],
                         "events_per_cpu_s": round(1e6 / d[s]["cpu_us_per_event"]["median"])} for s in d}
        tm, ks = reference.get("tidemark"), reference.get("ks-eos")
        if tm:
            verdicts.append(f"the drain row (results/{os.path.basename(a.drain_ref)}, unpinned, the broker sharing both cores): tidemark "
                            f"{tm['events_per_s'] / 1000:.1f}k/s at {tm['cpu_us_per_event']:.1f} µs per event; on one core of its own "
                            f"{cap / tm['events_per_s']:.2f}× of that")
        if ks:
            verdicts.append(f"Kafka Streams EOS, from the same drain row's CPU per event (not pinned, not run here): "
                            f"{ks['cpu_us_per_event']:.0f} µs = {ks['events_per_cpu_s'] / 1000:.1f}k events per CPU-second, "
                            f"against tidemark's {1e6 / one[cu]['median'] / 1000:.1f}k here "
                            f"({ks['cpu_us_per_event'] / one[cu]['median']:.1f}×); at that cost "
                            f"{math.ceil(NEEDED * ks['cpu_us_per_event'] / 1e6)} fully busy cores would be needed for the spike's drain")
    steal = [per[c]["steal_pct"]["median"] for c in CONFIGS]
    verdicts.append(f"host: steal median {steal[0]:.1f} % (1pod), {steal[1]:.1f} % (2pods); r(steal, events/s) "
                    f"{one['steal_vs_events_per_s_r']} / {two['steal_vs_events_per_s_r']}")
    verdicts.insert(0, f"basis: {basis}; whole runs: 1 instance {one['events_per_s']['median'] / 1000:.1f}k/s, "
                       f"2 instances {two['events_per_s']['median'] / 1000:.1f}k/s (wall {one['wall_s']['median']:.1f} / "
                       f"{two['wall_s']['median']:.1f} s)")
    if len(blocks) < 5:
        verdicts.insert(0, f"{len(blocks)} block(s): a plumbing check, not issue 16's method (>= 5 blocks)")

    with open(a.gen) as f:
        gen = json.load(f)
    result = {
        "bench": "capacity", "command": a.command, "tidemark_revision": a.rev,
        "processor_cpu": a.core, "broker_cpus": a.broker_cpus, "events": ref["events"], "blocks": len(blocks),
        "order": [r["config"] for r in measured], "generator": gen,
        "outputs": {"distinct_keys": ref["distinct_keys"], "keys_sha256": ref["keys_sha256"],
                    "key_sets_equal_in_every_run": True,
                    "resent_posts": {f"run {r['run']} {r['config']}": r["resent"] for r in runs if r["resent"]}},
        "configs": per,
        "basis": basis,
        "capacity_per_core_events_per_s": cap,
        "scaling_efficiency_2_instances": {"ratio_of_medians": round(eff, 3),
                                           "per_block": per_block(ev, "2pods", "1pod"),
                                           "cpu_per_event_1_over_2": round(cpu_ratio, 3)},
        "spike_200k": {"drain_needed_per_s": round(NEEDED), "pods_of_one_core": pods,
                       "pods_if_splitting_cost_nothing": pods_ideal, "broker_cores_for_the_drain": round(broker_cores, 2)},
        "drain_row_reference": reference,
        "verdicts": verdicts,
        "runs": runs,
    }
    with open(a.out_json, "w") as f:
        json.dump(result, f, indent=2)
    for v in verdicts:
        print("[capacity]", v, file=sys.stderr)

    plt = ensure_mpl()
    if not plt:
        return
    colors = {"1pod": "tab:blue", "2pods": "tab:purple"}
    fig, axes = plt.subplots(1, 3, figsize=(11, 4))
    for ax, m, label in zip(axes, (ev, cu, "broker_us_per_event"),
                            ("drain, thousand events/s", "processor CPU µs per event", "broker CPU µs per event")):
        scale = 1000 if m == ev else 1
        for i, c in enumerate(CONFIGS):
            ys = [r[m] / scale for r in measured if r["config"] == c]
            ax.scatter([i + 0.05 * ((k % 5) - 2) for k in range(len(ys))], ys, color=colors[c], alpha=.7, s=18)
            ax.hlines(statistics.median(ys), i - 0.2, i + 0.2, color=colors[c], lw=2)
        ax.set_xticks(range(len(CONFIGS)), ["1 instance", "2 instances"])
        ax.set_xlim(-0.6, len(CONFIGS) - 0.4)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(label)
    fig.suptitle(f"tidemark {a.rev}, {ref['events']:,} events, processor on CPU {a.core}, broker on CPU {a.broker_cpus}; "
                 f"{len(blocks)} A-B-B-A blocks", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out_png, dpi=110)


if __name__ == "__main__":
    main()
