#!/usr/bin/env python3
"""Per-run measures, summary and plot of bench/catchup_ab.sh (the catch-up row, tidemark against
Kafka Streams EOS in alternating A-B-B-A blocks, issue 16's method); `run` also writes the result
of a Kafka Streams run of bench/catchup.sh.

    catchup_ab.py run --system S --marks M.json --actions A.jsonl --samples S.jsonl --gen GEN.log
                      [--latency KS.latency.jsonl --lag KS.lag.jsonl --ks-log KS.log]
                      [--phase P --block B --run N --load L] [--raw-out PREFIX]
                      [--caught-up-ms 1000] [--min-seconds 5]
                      [--out RESULT.json [--png PLOT.png] [--machine JSON]]
                      → one JSON line on stdout (exit 3 when the output check failed)
    catchup_ab.py summary RUNS.jsonl OUT.json OUT.png [--meta JSON] [--raw-dir DIR]

`run` reads one catchup.sh run's files (RAW_OUT copies, plain or .gz): the receiver's log, the
sampler's lines, the live generator's stamped progress, the marks (epochs of the live start, the
processor start and the end of the observation; N, LIVE_RATE, the aligned start), and for Kafka
Streams its dispatcher's per-second latency log, its `--lag-out` lines and its `[ks]` stderr lines.
Times are from the processor's start (tidemark's exec, the JVM's exec: start-up counts for both).

- time_to_caught_up_s: the one rule (lib/caught_up.py) from the processor's start: the first
  second of the last stretch to the end of the observation in which every second with actions
  has append→2xx p99 < CAUGHT_UP_MS (>= MIN_SECONDS such seconds); None when it did not happen
  within the run (`caught_up.reason`), `caught_up_gap_s` its resolution;
- net_drain_rate_per_s = N / that time (catchup.sh's definition), processed_rate_per_s =
  (N + live records offered in that time) / that time;
- the lag as reference, same basis for both (lib/caught_up.py lag_series): time until the lag
  stayed below LIVE_RATE records (one second of input) to the end, and the net and processed rates
  over that time; for tidemark also the criterion catchup.sh reports (backlog age < 1 s on every input
  partition and lag < LIVE_RATE, `time_to_backlog_age_below_1s_s`), for Kafka Streams the JVM's
  start → state RUNNING;
- live_p99_after_drain: the per-second p99s from 10 s after the lag drained to the end (median,
  max): the system's own live level; if it is at or above the threshold the rule cannot be met in
  this scenario (tidemark's default idle_skew of 2 s: ~2.5–2.9 s), which the summary says;
- outputs (checked every run): no key POSTed with two payloads (failure = exit 3), re-POSTs with the
  same payload counted, and the normalised key set restricted to windows starting inside the
  backlog's event-time span (the live part's length differs between runs) written to
  PREFIX.keys.txt.gz; complete = the lag was below one second of input at the end.
"""
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_summary as ab  # noqa: E402
import caught_up as cu  # noqa: E402
from ab_summary import fmt_s  # noqa: E402
from caught_up import opt, spread  # noqa: E402

SPEC = {"n": 12_000_000, "live_rate": 20_000, "target_s": 90}
SPEC["processed_needed_per_s"] = (SPEC["n"] + SPEC["target_s"] * SPEC["live_rate"]) / SPEC["target_s"]  # 153,333
SPEC["net_needed_per_s"] = SPEC["n"] / SPEC["target_s"]  # 133,333
AFTER_DRAIN_SKIP_S = 10


def window_offset_s(normalised_key):
    """+120s → 120.0 from a normalised key (None when it is not one)."""
    tail = normalised_key.rsplit(":+", 1)
    if len(tail) != 2 or not tail[1].endswith("s"):
        return None
    try:
        return float(tail[1][:-1])
    except ValueError:
        return None


def run(args):
    system = opt(args, "--system")
    marks = json.load(open(opt(args, "--marks")))
    thr = float(opt(args, "--caught-up-ms", marks.get("caught_up_ms", 1000)))
    min_s = int(opt(args, "--min-seconds", "5"))
    ts, t0, tend = float(marks["processor_start_epoch"]), float(marks["t0"]), float(marks["end_epoch"])
    n_backlog, live = int(marks["backlog_events"]), float(marks["live_rate"])
    acts = sorted(cu.load_jsonl(opt(args, "--actions")), key=lambda a: a["t"])
    lat = cu.load_jsonl(opt(args, "--latency"))
    samples = cu.load_jsonl(opt(args, "--samples"))
    ks_lag = cu.load_jsonl(opt(args, "--lag"))
    gen = cu.gen_progress(opt(args, "--gen"))

    pts = cu.per_second(system, acts, lat, since=ts, until=tend + 5)
    if system == "tidemark" and acts and cu.missing_src(acts) == len(acts):
        sys.exit("tidemark POSTs carry no tidemark-source-append-time header: no exact latency")
    rule = cu.caught_up(pts, thr, after=ts, min_seconds=min_s)
    lag = cu.lag_series(system, samples, ks_lag)
    lag_t = cu.settled(lag, lambda v: v < live, after=ts + 1)
    if system == "tidemark":
        consumed = [(s["t"], cu.records_total(s)) for s in samples if s.get("up") and cu.records_total(s) is not None]
        ages = [(s["t"], cu.input_backlog_age(s),
                 sum((s.get("lag") or {}).values()) if s.get("lag") else None) for s in samples if s.get("up")]
        age_t = cu.settled([(t, (a, l)) for t, a, l in ages], lambda v: v[0] is not None and v[1] is not None and v[0] < 1
                           and v[1] < live, after=ts + 1)
    else:
        consumed = [(t, c) for t, o, r, c in cu.lag_ks(ks_lag)]
        age_t = None

    def rates(at):
        if at is None:
            return None, None, None, None
        dt = at - ts
        off = cu.count_between(gen, ts, at)
        live_n = (off or {}).get("records", 0)
        c0 = consumed[0][1] if consumed and system == "tidemark" else 0
        c1 = cu.value_at(consumed, at)
        return (round(dt, 2), round(n_backlog / dt) if dt > 0 else None, round((n_backlog + live_n) / dt) if dt > 0 else None,
                None if c1 is None or dt <= 0 else round((c1 - c0) / dt))

    t_rule, net_rule, proc_rule, cons_rule = rates(rule["at"])
    t_lag, net_lag, proc_lag, cons_lag = rates(lag_t)
    after = [p for t, n, p in pts if lag_t is not None and t >= lag_t + AFTER_DRAIN_SKIP_S]
    peak = max(pts, key=lambda x: x[2], default=None)
    running = None
    if system != "tidemark":
        from timeseries import ks_log_events
        ev = [t for t, kind, f in ks_log_events(opt(args, "--ks-log")) if kind == "state" and f[-1:] == ["RUNNING"] and t >= ts]
        running = round(min(ev) - ts, 2) if ev else None
    last_lag = next((v for t, v in reversed(lag) if v is not None), None)
    complete = last_lag is not None and last_lag < live

    outputs, keys = cu.outputs(acts, marks.get("align_base_ms"))
    span = n_backlog / live
    backlog_keys = [k for k in keys if (window_offset_s(k) is not None and window_offset_s(k) < span)]
    outputs["backlog_window_keys"] = len(backlog_keys)
    from timeseries import resources
    total = None
    if consumed:
        vals = [v for _, v in consumed if v is not None]
        total = (vals[-1] - vals[0]) if system == "tidemark" and vals else (vals[-1] if vals else None)
    res = resources(samples, total)

    # without --raw-out (recomputing from the raw copies) nothing is written
    keys_file = ab.raw_copies(args, opt(args, "--raw-out"), backlog_keys, cu.compact_action, cu.compact_sample)

    rel = lambda t: None if t is None else round(t - ts, 2)  # noqa: E731
    line = {
        "run": int(opt(args, "--run", "0")), "system": system, "phase": opt(args, "--phase", "standalone"),
        "block": int(opt(args, "--block", "0")), "loadavg_before": None if opt(args, "--load") is None else float(opt(args, "--load")),
        "tag": marks.get("tag"),
        "args": {k: marks.get(k) for k in ("backlog_events", "live_rate", "max_s", "align_base_ms", "backlog_start", "live_start",
                                            "min_units", "factor_rule", "stop_rule", "partitions", "event_bytes")},
        "marks_epoch": {"live_start": t0, "processor_start": ts, "end": tend},
        "backlog_produce_s": marks.get("backlog_produce_s"),
        "time_to_caught_up_s": t_rule, "caught_up": {k: (rel(v) if k in ("at", "last_above_at") else v) for k, v in rule.items()},
        "caught_up_gap_s": rule["gap_s"], "caught_up_ms": thr,
        "net_drain_rate_per_s": net_rule, "processed_rate_per_s": proc_rule, "consumed_rate_per_s": cons_rule,
        "time_to_lag_below_1s_of_input_s": t_lag, "net_drain_rate_by_lag_per_s": net_lag,
        "processed_rate_by_lag_per_s": proc_lag, "consumed_rate_by_lag_per_s": cons_lag,
        "time_to_backlog_age_below_1s_s": rel(age_t),
        "ks_running_after_start_s": running,
        "peak_p99_ms": peak[2] if peak else None, "peak_p99_at_s": rel(peak[0]) if peak else None,
        "live_p99_after_drain": {"seconds_with_actions": len(after), "per_second_p99_median_ms": statistics.median(after) if after else None,
                                 "per_second_p99_max_ms": max(after) if after else None},
        "live_p99_after_drain_median_ms": statistics.median(after) if after else None,
        "peak_lag_records": max((v for t, v in lag if v is not None and t >= ts), default=None),
        "live_offered": cu.count_between(gen, ts, tend),
        "complete": complete, "lag_at_end_records": last_lag,
        "observed_s": round(tend - ts, 2), "stopped_by_rule": marks.get("stopped_by_rule"),
        "outputs": outputs, "keys_file": keys_file, "state_dir_mb": marks.get("state_dir_mb"),
        "cpu_s_processor": res["cpu_s_processor"], "cpu_s_broker": res["cpu_s_broker"], "peak_rss_mb": res["peak_rss_mb"],
        "loadavg_mean": res["loadavg_mean"], "loadavg_max": res["loadavg_max"], "steal_pct": res["steal_pct"],
        "per_second_p99": [[rel(t), k, p] for t, k, p in pts],
        "lag_series": [[rel(t), v] for t, v in lag if t >= ts - 2],
    }
    print(json.dumps(line))
    out = opt(args, "--out")
    if out:  # a catchup.sh run of Kafka Streams: this line is its result
        res_json = {"scenario": "catchup", "system": system, "machine": json.loads(opt(args, "--machine", "null")),
                    "method": __doc__.split("\n\n")[2], **{k: v for k, v in line.items() if k not in ("per_second_p99", "lag_series")},
                    "series": {"per_second_p99": line["per_second_p99"], "lag": line["lag_series"]}}
        json.dump(res_json, open(out, "w"), indent=1, ensure_ascii=False)
        if opt(args, "--png"):
            plot(opt(args, "--png"), [line], [system], {"n": n_backlog, "live_rate": live, "caught_up_ms": thr})
    sys.exit(0 if outputs["ok"] else 3)


MEASURES = (
    ("time_to_caught_up_s", "processor start → caught up (per-second p99 < threshold to the end); never = not within the run", True),
    ("caught_up_gap_s", "resolution of the above (seconds between the last second above and the first below)", False),
    ("net_drain_rate_per_s", "N / time to caught up", False),
    ("processed_rate_per_s", "(N + live records offered) / time to caught up", False),
    ("time_to_lag_below_1s_of_input_s", "processor start → lag below LIVE_RATE records for good (reference)", True),
    ("net_drain_rate_by_lag_per_s", "N / time to lag below one second of input (reference)", False),
    ("processed_rate_by_lag_per_s", "(N + live records offered) / time to lag below one second of input (reference)", False),
    ("time_to_backlog_age_below_1s_s", "processor start → backlog age < 1 s and lag < LIVE_RATE for good (tidemark only; "
                                       "catchup.sh's own criterion, reference)", True),
    ("ks_running_after_start_s", "JVM start → state RUNNING (Kafka Streams only)", False),
    ("live_p99_after_drain_median_ms", "median per-second p99 from 10 s after the lag drained (its own live level)", False),
    ("peak_p99_ms", "peak per-second append→2xx p99 (ms)", False),
    ("peak_lag_records", "peak lag (records)", False),
    ("observed_s", "observed for (s after the processor start)", False),
    ("backlog_produce_s", "backlog produced in (s)", False),
    ("loadavg_before", "1-minute load average before the run", False),
    ("loadavg_mean", "mean 1-minute load average over the run", False),
    ("steal_pct", "CPU time the hypervisor gave to others over the run, % of this VM's CPU time (/proc/stat steal)", False),
    ("cpu_s_processor", "processor CPU seconds over the run", False),
    ("peak_rss_mb", "processor peak RSS, MB", False),
    ("state_dir_mb", "state directory at the end, MB", False),
)
TIDEMARK_ONLY = ("time_to_backlog_age_below_1s_s",)
KS_ONLY = ("ks_running_after_start_s",)


def k_s(x):
    return "n/a" if x is None else f"{x / 1000:.1f} k/s"


def verdicts(out, meta, systems):
    v = []
    n, live = meta.get("n"), meta.get("live_rate")
    spec_scale = n == SPEC["n"] and live == SPEC["live_rate"]
    thr = meta.get("caught_up_ms", 1000)
    need = SPEC["processed_needed_per_s"]
    for s in systems:
        m = out["systems"][s]
        t = m["time_to_caught_up_s"]
        if t is None:
            v.append(f"{s}: caught up ≤ 90 s: NOT MEASURED (no measured run)")
            continue
        caught = t["n"] - t["never"]
        lagref = m["time_to_lag_below_1s_of_input_s"]
        ref = (f"reference: lag below one second of input after median {fmt_s(lagref['median'])} "
               f"({lagref['n'] - lagref['never']} of {lagref['n']} runs), processed "
               f"{k_s((m.get('processed_rate_by_lag_per_s') or {}).get('median'))} over that time") if lagref else ""
        own = m.get("live_p99_after_drain_median_ms")
        own_note = (f"; its own per-second p99 after the lag drained was {own['median']:.0f} ms (median of runs) ≥ {thr:g} ms: "
                    "the rule cannot be met in this scenario" if own and own["median"] is not None and own["median"] >= thr else "")
        if t["median"] is None:
            where = "at 12 M + 20 k/s" if spec_scale else (f"already at this run's {n / 1e6:g} M + {live / 1000:g} k/s, so not at "
                                                             "12 M + 20 k/s either")
            v.append(f"{s}: 12 M backlog + live 20 k/s caught up ≤ 90 s: MISSED — not caught up under the rule "
                     f"(per-second p99 < {thr:g} ms to the end) in {t['never']} of {t['n']} runs {where}{own_note} ({ref})")
            continue
        proc = (m.get("processed_rate_per_s") or {}).get("median")
        detail = (f"median {t['median']:.1f} s ({t['min']:.1f}–{fmt_s(t['max'])}), caught up in {caught} of {t['n']} runs; "
                  f"net drain {k_s((m.get('net_drain_rate_per_s') or {}).get('median'))}, processed {k_s(proc)}; {ref}")
        if spec_scale:
            word = "MET" if t["median"] <= SPEC["target_s"] else "MISSED"
            v.append(f"{s}: 12 M backlog + live 20 k/s caught up ≤ 90 s: {word} ({detail})")
        elif proc is not None and proc < need:
            v.append(f"{s}: 12 M backlog + live 20 k/s caught up ≤ 90 s: MISSED (projected: it processed {k_s(proc)} while "
                     f"catching up at {n / 1e6:g} M + {live / 1000:g} k/s; 12 M + 20 k/s in 90 s needs ≥ {need / 1000:.0f} k/s "
                     f"processed, net ≥ {SPEC['net_needed_per_s'] / 1000:.0f} k/s) ({detail})")
        else:
            v.append(f"{s}: 12 M backlog + live 20 k/s caught up ≤ 90 s: NOT SHOWN at the target's scale — caught up at "
                     f"{n / 1e6:g} M + {live / 1000:g} k/s ({detail})")
    return v


def summary(args):
    runs_path, out_json, out_png = args[:3]
    meta = json.loads(opt(args, "--meta", "{}"))
    runs, measured, systems = ab.load_runs(runs_path)
    out = {**ab.header("catchup_ab", meta, runs, measured),
           "target": {"row": "12 M backlog + live 20 k/s: caught up ≤ 90 s", **SPEC},
           "measures": {m: d for m, d, _ in MEASURES}, "systems": {}}
    for s in systems:
        rs = [r for r in measured if r["system"] == s]
        m = {}
        for k, _, never in MEASURES:
            if (s != "tidemark" and k in TIDEMARK_ONLY) or (s == "tidemark" and k in KS_ONLY):
                continue
            m[k] = spread([r.get(k) for r in rs], none_is_never=never)
        m["complete_runs"] = sum(1 for r in rs if r["complete"])
        out["systems"][s] = m
    out["ratios_ks_over_tidemark"] = ab.ratios_ks_over_tidemark(
        out["systems"], measured, systems,
        ("time_to_caught_up_s", "time_to_lag_below_1s_of_input_s", "net_drain_rate_per_s", "net_drain_rate_by_lag_per_s",
         "peak_p99_ms", "live_p99_after_drain_median_ms"))
    out["keys"] = ab.compare_keys(runs, opt(args, "--raw-dir"))
    out["keys"]["scope"] = "action keys of windows that start inside the backlog's event-time span (the live part's length differs per run)"
    out["verdicts"] = verdicts(out, meta, systems)
    note = ab.steal_note(out["systems"], systems)
    if note:
        out["verdicts"].append(note)
    out["runs"] = ab.without(runs, ("per_second_p99", "lag_series"))
    with open(out_json, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    plot(out_png, measured, systems, meta)
    return out


def plot(path, measured, systems, meta):
    try:
        from timeseries import ensure_mpl
        plt = ensure_mpl()
    except Exception:  # no matplotlib and no pip: the JSON is the result
        return
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(12, 13), gridspec_kw={"height_ratios": [1.2, 1, 1]})
    ax2.sharex(ax1)
    live = meta.get("live_rate") or 1
    thr = meta.get("caught_up_ms", 1000)
    for r in measured:
        c = ab.color(r["system"])
        ab.p99_line(ax1, r["per_second_p99"], 5, color=c, alpha=.45, lw=.8)
        ax2.plot([t for t, v in r["lag_series"]], [math.nan if v is None else v / live for t, v in r["lag_series"]],
                 color=c, alpha=.45, lw=.8)
    for s in systems:
        ax1.plot([], [], color=ab.color(s), label=f"{s} (one line per run)")
        ax2.plot([], [], color=ab.color(s), label=f"{s}: lag ÷ live rate")
    ax1.axhline(thr, color="green", ls="--", lw=.8, label=f"caught-up threshold {thr:g} ms")
    ax1.set_yscale("log")
    ax1.set_ylabel("append→2xx p99 per second (ms)")
    ax1.set_xlabel("seconds since the processor's start")
    ax1.legend(fontsize=7)
    ax1.grid(alpha=.3)
    ax2.axhline(1, color="green", ls="--", lw=.8, label="one second of input")
    ax2.set_yscale("symlog", linthresh=1)
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("s of live input")
    ax2.set_xlabel("seconds since the processor's start")
    ax2.legend(fontsize=7)
    ax2.grid(alpha=.3)
    ms = ("time_to_caught_up_s", "time_to_lag_below_1s_of_input_s", "time_to_backlog_age_below_1s_s")
    labels = ("caught up\n(p99 < threshold)", "lag < 1 s of input\n(reference)", "tidemark backlog age < 1 s\n(reference)")
    vals = [r[m] for r in measured for m in ms if r.get(m) is not None]
    ab.dot_strip(ax3, measured, systems, ms, labels, max(vals + [SPEC["target_s"]]) * 1.5,
                 skip=lambda s, m: s != "tidemark" and m in TIDEMARK_ONLY)
    ax3.axhline(SPEC["target_s"], color="red", ls="--", lw=.8, label="90 s (the target, at 12 M + 20 k/s)")
    ax3.set_ylabel("seconds after the processor's start (never: at the top)")
    ax3.legend(fontsize=7)
    fig.suptitle(f"catch-up: {meta.get('n', '?')} backlog + live {meta.get('live_rate', '?')}/s, {len(measured)} run(s); "
                 f"tidemark {meta.get('tidemark_rev', '?')}, Kafka Streams {meta.get('kstreams_rev', '?')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "run":
        run(rest)
    elif cmd == "summary":
        summary(rest)
    else:
        sys.exit(__doc__)
