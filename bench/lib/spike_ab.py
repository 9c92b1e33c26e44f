#!/usr/bin/env python3
"""Per-run measures, summary and plot of bench/spike_ab.sh (the spike row, tidemark against Kafka
Streams EOS in alternating A-B-B-A blocks, issue 16's method).

    spike_ab.py run --system S --phase P --block B --run N --load L --marks M.json --actions A.jsonl
                    --samples S.jsonl --gen GEN.log [--latency KS.latency.jsonl --lag KS.lag.jsonl]
                    [--raw-out PREFIX] [--caught-up-ms 1000] [--min-seconds 5] [--budget-s 10]
                    → one JSON line on stdout (exit 3 when the output check failed)
    spike_ab.py summary RUNS.jsonl OUT.json OUT.png [--meta JSON] [--raw-dir DIR]

`run` reads one spike.sh run's RAW_OUT copies (plain or .gz, so it can recompute a line from the
kept raw files): the receiver's log, the sampler's lines, the generator's stamped progress, the
marks, and for Kafka Streams its dispatcher's per-second latency log and its `--lag-out` lines.
Times are epoch seconds inside, seconds after the spike's start (`t_rel`) or end in the line.

- offered: what the generator sent in the spike window (its wall-clock schedule: spike_start to
  spike_end after its start) — records and rate, beside the requested BASE × FACTOR; when it
  finished against its schedule (a generator that cannot keep up sends late, never less);
- peak_p99_ms: the highest per-second append→2xx p99 from 10 s after the generator's start to
  the end (lib/caught_up.py: exact per action for tidemark from the receiver's log, the
  dispatcher's per-second HdrHistogram for Kafka Streams), and when it happened;
- peak_backlog_age_s (tidemark): max over input partitions (orders, inventory) and samples of
  tidemark_backlog_age_seconds (caught_up.input_backlog_age);
  Kafka Streams has no such gauge: its lag is the measure;
- peak_lag_records / peak_lag_s_of_base (÷ BASE: seconds of base input): tidemark's input lag
  (tidemark_consumer_lag_records), Kafka Streams' committed lag of orders (its sku-repartition
  lag beside it);
- caught_up_after_spike_end_s: the one rule (lib/caught_up.py) applied from the spike's start:
  the first second of the last stretch to the end of the observation in which every second with
  actions has p99 < CAUGHT_UP_MS (>= MIN_SECONDS such seconds), minus the spike's end; 0 when
  the system never went above the threshold after the spike started (`never_above`); None when
  it did not happen within the run (`caught_up.reason`). `caught_up.gap_s` is its resolution;
- back_to_own_level_after_spike_end_s: the same with max(CAUGHT_UP_MS, 1.2 × the system's highest
  per-second p99 from 10 s after the start to the spike) as the ceiling (<=): back to its own
  pre-spike level (the 20 % slack: that highest second is itself a tail value). Reported beside the rule because a system whose steady state is above the
  threshold (tidemark's default idle_skew of 2 s: ~2.5–2.9 s p99 with no inventory records)
  cannot meet the rule, spike or not;
- lag_below_1s_of_input_after_spike_end_s: when the lag went below BASE records (one second of
  base input) for good, minus the spike's end (reference, same basis for both); for tidemark
  also backlog_age_below_1s_after_spike_end_s (the criterion spike.sh used to report: reference
  only);
- consumed_in_spike_per_s: records consumed during the spike window (tidemark records_total;
  Kafka Streams committed orders offsets) per second, beside drain_needed_for_budget_per_s =
  offered spike rate × (1 − BUDGET_S / SPIKE_S): the drain that keeps the age of the record being
  read at the spike's end within the budget (for 60 s at 200 k/s: ≥ 167 k/s);
- within_budget: peak_p99_ms <= BUDGET_S and, for tidemark, peak_backlog_age_s <= BUDGET_S;
- outputs (checked every run): no key POSTed with two payloads (failure = exit 3), re-POSTs with
  the same payload counted, the normalised key set (window starts relative to the aligned start,
  ALIGN_S) written to PREFIX.keys.txt.gz for the summary's comparison; complete = the lag was
  below one second of base input at the end (everything offered was consumed).

The summary compares key sets of complete runs with the first complete measured tidemark run
(inputs are the same records only with ALIGN_S; the logs still differ in append times, which
decide the merge order and so, rarely, a window near its grace limit; Kafka Streams merges by
arrival, see bench/README.md): differences are recorded and reported, never hidden, and do not
stop the series (KEYS_MUST_MATCH=1 in spike_ab.sh does).
"""
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_summary as ab  # noqa: E402
import caught_up as cu  # noqa: E402
from ab_summary import fmt_s, rnd  # noqa: E402
from caught_up import opt, spread  # noqa: E402

SKIP_S = 10
# "back to its own level": the ceiling is 1.2 × the highest per-second p99 before the spike (that
# highest second is itself a tail value of a noisy series; without slack ordinary noise after the
# spike would read as "not back")
OWN_SLACK = 1.2
SPEC = {"base": 20000, "spike_rate": 200000, "spike_s": 60, "budget_s": 10}


def run(args):
    system = opt(args, "--system")
    marks = json.load(open(opt(args, "--marks")))
    thr = float(opt(args, "--caught-up-ms", marks.get("caught_up_ms", 1000)))
    min_s = int(opt(args, "--min-seconds", "5"))
    budget = float(opt(args, "--budget-s", "10"))
    t0 = float(marks["t0"])
    s0, s1 = t0 + marks["spike_start"], t0 + marks["spike_end"]
    tg, tend = t0 + marks["gen_end"], t0 + marks["end"]
    base, factor, spike_s = float(marks["base"]), float(marks["factor"]), float(marks["spike_s"])
    acts = sorted(cu.load_jsonl(opt(args, "--actions")), key=lambda a: a["t"])
    lat = cu.load_jsonl(opt(args, "--latency"))
    samples = cu.load_jsonl(opt(args, "--samples"))
    ks_lag = cu.load_jsonl(opt(args, "--lag"))
    gen = cu.gen_progress(opt(args, "--gen"))

    pts = cu.per_second(system, acts, lat, since=t0, until=tend + 5)
    if system == "tidemark" and acts and cu.missing_src(acts) == len(acts):
        sys.exit("tidemark POSTs carry no tidemark-source-append-time header: no exact latency")
    measured = [x for x in pts if x[0] >= t0 + SKIP_S]
    pre = [p for t, n, p in pts if t0 + SKIP_S <= t <= s0]
    peak = max(measured, key=lambda x: x[2], default=None)
    rule = cu.caught_up(pts, thr, after=s0, min_seconds=min_s)
    ceiling = max([thr] + [OWN_SLACK * p for p in pre])
    own = cu.caught_up(pts, ceiling, after=s0, min_seconds=min_s, inclusive=True)

    def after_end(c):
        return None if c["at"] is None else round(max(0.0, c["at"] - s1), 2)

    # lag (records) and, for tidemark, backlog age and consumed records
    if system == "tidemark":
        lag = cu.lag_tidemark(samples)
        rep = []
        ages = [(s["t"], a) for s in samples if s.get("up") and (a := cu.input_backlog_age(s)) is not None]
        consumed = [(s["t"], cu.records_total(s)) for s in samples if s.get("up") and cu.records_total(s) is not None]
    else:
        kl = cu.lag_ks(ks_lag)
        lag = [(t, o if c > 0 else None) for t, o, r, c in kl]
        rep = [(t, r) for t, o, r, c in kl]
        ages = []
        consumed = [(t, c) for t, o, r, c in kl]
    lag_run = [(t, v) for t, v in lag if t >= t0]
    peak_lag = max(((t, v) for t, v in lag_run if v is not None), key=lambda x: x[1], default=(None, None))
    stop_series = cu.lag_series(system, samples, ks_lag)  # Kafka Streams: orders + sku-repartition
    lag_ok = cu.settled(stop_series, lambda v: v < base, after=s0)
    peak_age = max(ages, key=lambda x: x[1], default=(None, None))
    age_ok = cu.settled(ages, lambda v: v < 1, after=max(s1, peak_age[0] or 0)) if ages else None
    c0, c1 = cu.value_at(consumed, s0), cu.value_at(consumed, s1)
    consumed_in_spike = (c1 - c0) / (s1 - s0) if c0 is not None and c1 is not None and s1 > s0 else None

    off_spike = cu.count_between(gen, s0, s1)
    off_rate = (off_spike or {}).get("rate_per_s")
    needed = off_rate * max(0.0, 1 - budget / spike_s) if off_rate is not None else None
    last_lag = next((v for t, v in reversed(stop_series) if v is not None), None)
    complete = last_lag is not None and last_lag < base

    outputs, keys = cu.outputs(acts, marks.get("align_base_ms"))
    consumed_total = None
    if consumed:
        vals = [v for _, v in consumed if v is not None]
        consumed_total = (vals[-1] - vals[0]) if system == "tidemark" and vals else (vals[-1] if vals else None)
    from timeseries import resources
    res = resources(samples, consumed_total)

    # without --raw-out (recomputing from the raw copies) nothing is written
    keys_file = ab.raw_copies(args, opt(args, "--raw-out"), keys, cu.compact_action, cu.compact_sample)

    rel = lambda t: None if t is None else round(t - s0, 2)  # noqa: E731
    line = {
        "run": int(opt(args, "--run", "0")), "system": system, "phase": opt(args, "--phase", "standalone"),
        "block": int(opt(args, "--block", "0")), "loadavg_before": None if opt(args, "--load") is None else float(opt(args, "--load")), "tag": marks.get("tag"),
        "args": {k: marks.get(k) for k in ("base", "pre_s", "spike_s", "post_s", "factor", "events", "event_bytes", "partitions",
                                            "min_units", "factor_rule", "align_base_ms", "drain_s", "stop_rule")},
        "marks_epoch": {"t0": t0, "spike_start": s0, "spike_end": s1, "gen_end": tg, "end": tend},
        "requested_spike_per_s": base * factor,
        "offered_spike_records": (off_spike or {}).get("records"), "offered_spike_per_s": off_rate,
        "offered_pre": cu.count_between(gen, t0, s0), "offered_post": cu.count_between(gen, s1, tg),
        "offered_total": gen[-1][1] if gen else None,
        "gen_end_s": round(marks["gen_end"], 2), "gen_behind_schedule_s": round(marks["gen_end"] - marks["pre_s"] - marks["spike_s"] - marks["post_s"], 2),
        "peak_p99_ms": peak[2] if peak else None, "peak_p99_at_s": rel(peak[0]) if peak else None,
        "pre_spike": {"seconds_with_actions": len(pre), "per_second_p99_median_ms": statistics.median(pre) if pre else None,
                      "per_second_p99_max_ms": max(pre) if pre else None},
        "pre_spike_p99_median_ms": statistics.median(pre) if pre else None,
        "caught_up": {k: (rel(v) if k in ("at", "last_above_at") else v) for k, v in rule.items()},
        "caught_up_after_spike_end_s": after_end(rule), "caught_up_gap_s": rule["gap_s"],
        "never_above_after_spike_start": rule["at"] is not None and rule["last_above_at"] is None,
        "caught_up_ms": thr,
        "back_to_own_level_after_spike_end_s": after_end(own), "own_ceiling_ms": ceiling,
        "peak_lag_records": peak_lag[1], "peak_lag_at_s": rel(peak_lag[0]),
        "peak_lag_s_of_base": rnd(peak_lag[1] / base) if peak_lag[1] is not None else None,
        "peak_repartition_lag_records": max((v for t, v in rep if t >= t0), default=None) if rep else None,
        "lag_below_1s_of_input_after_spike_end_s": None if lag_ok is None else round(max(0.0, lag_ok - s1), 2),
        "peak_backlog_age_s": peak_age[1], "peak_backlog_age_at_s": rel(peak_age[0]),
        "backlog_age_below_1s_after_spike_end_s": None if age_ok is None else round(max(0.0, age_ok - s1), 2),
        "consumed_in_spike_per_s": None if consumed_in_spike is None else round(consumed_in_spike),
        "drain_needed_for_budget_per_s": None if needed is None else round(needed),
        "budget_s": budget,
        "within_budget": (peak is not None and peak[2] <= budget * 1000
                          and (system != "tidemark" or (peak_age[1] is not None and peak_age[1] <= budget))),
        "complete": complete, "lag_at_end_records": last_lag,
        "observed_after_spike_end_s": round(tend - s1, 2), "stopped_by_rule": marks.get("stopped_by_rule"),
        "outputs": outputs, "keys_file": keys_file,
        "cpu_s_processor": res["cpu_s_processor"], "cpu_s_broker": res["cpu_s_broker"], "peak_rss_mb": res["peak_rss_mb"],
        "loadavg_mean": res["loadavg_mean"], "loadavg_max": res["loadavg_max"], "steal_pct": res["steal_pct"],
        "per_second_p99": [[rel(t), n, p] for t, n, p in pts],
        "lag_series": [[rel(t), v] for t, v in lag_run],
        "backlog_age_series": [[rel(t), v] for t, v in ages if t >= t0],
    }
    print(json.dumps(line))
    sys.exit(0 if outputs["ok"] else 3)


MEASURES = (
    ("offered_spike_per_s", "records/s the generator sent in the spike window (requested: BASE × FACTOR)", False),
    ("offered_spike_records", "records sent in the spike window", False),
    ("gen_behind_schedule_s", "generator finished this long after its schedule", False),
    ("peak_p99_ms", "peak per-second append→2xx p99 (ms)", False),
    ("peak_backlog_age_s", "peak backlog age, s (tidemark only)", False),
    ("peak_lag_records", "peak input lag, records (tidemark: consumer lag; Kafka Streams: committed orders lag)", False),
    ("peak_lag_s_of_base", "peak lag ÷ BASE (seconds of base input)", False),
    ("caught_up_after_spike_end_s", "spike end → caught up (per-second p99 < threshold to the end); never = not within the run", True),
    ("caught_up_gap_s", "resolution of the above: seconds between the last second above and the first below", False),
    ("back_to_own_level_after_spike_end_s", "spike end → per-second p99 ≤ max(threshold, 1.2 × own highest pre-spike per-second p99)", True),
    ("lag_below_1s_of_input_after_spike_end_s", "spike end → lag below BASE records for good (reference)", True),
    ("backlog_age_below_1s_after_spike_end_s", "spike end → backlog age < 1 s for good (tidemark only; reference)", True),
    ("consumed_in_spike_per_s", "records/s consumed during the spike window", False),
    ("drain_needed_for_budget_per_s", "drain that keeps the backlog within the budget: offered × (1 − budget / spike)", False),
    ("pre_spike_p99_median_ms", "median per-second p99 before the spike (its own steady state)", False),
    ("observed_after_spike_end_s", "observed this long after the spike's end", False),
    ("loadavg_before", "1-minute load average before the run", False),
    ("loadavg_mean", "mean 1-minute load average over the run", False),
    ("steal_pct", "CPU time the hypervisor gave to others over the run, % of this VM's CPU time (/proc/stat steal)", False),
    ("cpu_s_processor", "processor CPU seconds over the run", False),
    ("peak_rss_mb", "processor peak RSS, MB", False),
)
TIDEMARK_ONLY = ("peak_backlog_age_s", "backlog_age_below_1s_after_spike_end_s")


def verdicts(out, meta, systems):
    v = []
    a = meta
    spec_scale = (a.get("base") == SPEC["base"] and a.get("base", 0) * a.get("factor", 0) == SPEC["spike_rate"]
                  and a.get("spike_s") == SPEC["spike_s"])
    req = a.get("base", 0) * a.get("factor", 0)
    for s in systems:
        m = out["systems"][s]
        p99, age, off = m["peak_p99_ms"], m.get("peak_backlog_age_s"), m["offered_spike_per_s"]
        if not p99 or p99["median"] is None:
            v.append(f"{s}: spike within the 10 s budget: NOT MEASURED (no actions)")
            continue
        ok = p99["median"] <= SPEC["budget_s"] * 1000 and (s != "tidemark" or (age and age["median"] is not None
                                                                               and age["median"] <= SPEC["budget_s"]))
        within = m["within_budget_runs"]
        detail = (f"peak per-second p99 median {p99['median'] / 1000:.1f} s ({p99['min'] / 1000:.1f}–{p99['max'] / 1000:.1f})"
                  + (f", peak backlog age median {age['median']:.1f} s ({age['min']:.1f}–{age['max']:.1f})"
                     if s == "tidemark" and age and age["median"] is not None else "")
                  + f"; {within} of {p99['n']} runs within")
        reached = off["median"] if off else None
        drain = m["consumed_in_spike_per_s"]["median"] if m.get("consumed_in_spike_per_s") else None
        need = m["drain_needed_for_budget_per_s"]["median"] if m.get("drain_needed_for_budget_per_s") else None
        rates = (f"spike offered {reached / 1000:.0f} k/s of {req / 1000:.0f} k/s requested" if reached else "spike rate not recorded") + \
            (f", consumed {drain / 1000:.1f} k/s during it against ≥ {need / 1000:.1f} k/s needed to stay within the budget"
             if drain is not None and need is not None else "")
        if spec_scale and reached is not None and reached >= 0.95 * SPEC["spike_rate"]:
            word = "MET" if ok else "MISSED"
            v.append(f"{s}: backlog inside the 10 s budget through 60 s at 200 k/s on 20 k/s: {word} ({detail}; {rates})")
        elif not ok:
            v.append(f"{s}: backlog inside the 10 s budget: MISSED — outside it already at this run's "
                     f"{(reached or req) / 1000:.0f} k/s spike on {a.get('base', 0) / 1000:g} k/s for {a.get('spike_s')} s "
                     f"(the target's 200 k/s is harder on the same host) ({detail}; {rates})")
        else:
            v.append(f"{s}: backlog inside the 10 s budget: NOT SHOWN at the target's scale — within it at this run's "
                     f"{(reached or req) / 1000:.0f} k/s spike on {a.get('base', 0) / 1000:g} k/s for {a.get('spike_s')} s, "
                     f"not at 200 k/s on 20 k/s ({detail}; {rates})")
        c = m["caught_up_after_spike_end_s"]
        note = m.get("caught_up_note", "")
        v.append(f"{s}: spike end → caught up (per-second p99 < {meta.get('caught_up_ms', 1000):g} ms to the end): median "
                 f"{fmt_s(c['median'])}, {c['n'] - c['never']} of {c['n']} runs caught up" + (f" — {note}" if note else ""))
    v.append("scaled out if needed: NOT EXERCISED (one process per system on one 2-core host)")
    return v


def summary(args):
    runs_path, out_json, out_png = args[:3]
    meta = json.loads(opt(args, "--meta", "{}"))
    runs, measured, systems = ab.load_runs(runs_path)
    out = {**ab.header("spike_ab", meta, runs, measured), "measures": {m: d for m, d, _ in MEASURES}, "systems": {}}
    for s in systems:
        rs = [r for r in measured if r["system"] == s]
        m = {}
        for k, _, never in MEASURES:
            if s != "tidemark" and k in TIDEMARK_ONLY:
                continue
            m[k] = spread([r.get(k) for r in rs], none_is_never=never)
        m["within_budget_runs"] = sum(1 for r in rs if r["within_budget"])
        m["complete_runs"] = sum(1 for r in rs if r["complete"])
        pk = m.get("pre_spike_p99_median_ms")
        thr = rs[0]["caught_up_ms"] if rs else 1000
        if pk and pk["median"] is not None and pk["median"] >= thr:
            m["caught_up_note"] = (f"its per-second p99 before the spike is already {pk['median']:.0f} ms (median of runs) "
                                   f"≥ {thr:.0f} ms: the rule cannot be met, spike or not; see back_to_own_level_after_spike_end_s")
        out["systems"][s] = m
    out["ratios_ks_over_tidemark"] = ab.ratios_ks_over_tidemark(
        out["systems"], measured, systems,
        ("peak_p99_ms", "peak_lag_records", "caught_up_after_spike_end_s", "back_to_own_level_after_spike_end_s",
         "lag_below_1s_of_input_after_spike_end_s", "consumed_in_spike_per_s"))
    out["keys"] = ab.compare_keys(runs, opt(args, "--raw-dir"))
    out["verdicts"] = verdicts(out, meta, systems)
    note = ab.steal_note(out["systems"], systems)
    if note:
        out["verdicts"].append(note)
    out["runs"] = ab.without(runs, ("per_second_p99", "lag_series", "backlog_age_series"))
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
    fig, axes = plt.subplots(3, 1, figsize=(12, 13), gridspec_kw={"height_ratios": [1.2, 1, 1]})
    ax1, ax2, ax3 = axes
    ax2.sharex(ax1)
    spike_s = meta.get("spike_s", 60)
    base = meta.get("base", 1) or 1
    thr = measured[0]["caught_up_ms"] if measured else 1000
    for r in measured:
        c = ab.color(r["system"])
        ab.p99_line(ax1, r["per_second_p99"], 5, color=c, alpha=.45, lw=.8)  # no actions for 5 s: a gap
        ax2.plot([t for t, v in r["lag_series"]], [math.nan if v is None else v / base for t, v in r["lag_series"]],
                 color=c, alpha=.45, lw=.8)
        if r["system"] == "tidemark" and r.get("backlog_age_series"):
            ax2.plot([t for t, v in r["backlog_age_series"]], [v for t, v in r["backlog_age_series"]], color=c, alpha=.45,
                     lw=.8, ls=":")
    for s in systems:
        ax1.plot([], [], color=ab.color(s), label=f"{s} (one line per run)")
        ax2.plot([], [], color=ab.color(s), label=f"{s}: lag ÷ base rate")
    if "tidemark" in systems:
        ax2.plot([], [], color=ab.color("tidemark"), ls=":", label="tidemark: backlog age (s)")
    for ax in (ax1, ax2):
        ax.axvspan(0, spike_s, color="gray", alpha=.1)
        ax.grid(alpha=.3)
    ax1.axhline(thr, color="green", ls="--", lw=.8, label=f"caught-up threshold {thr:g} ms")
    ax1.axhline(10_000, color="red", ls="--", lw=.8, label="10 s budget")
    ax1.set_yscale("log")
    ax1.set_ylabel("append→2xx p99 per second (ms)")
    ax1.set_xlabel("seconds since the spike's start (shaded: the spike)")
    ax1.legend(fontsize=7)
    ax2.axhline(10, color="red", ls="--", lw=.8, label="10 s")
    ax2.set_yscale("symlog", linthresh=1)
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("s of base input / s")
    ax2.set_xlabel("seconds since the spike's start")
    ax2.legend(fontsize=7)
    ms = ("peak_p99_ms", "peak_backlog_age_s", "peak_lag_s_of_base", "caught_up_after_spike_end_s",
          "back_to_own_level_after_spike_end_s", "lag_below_1s_of_input_after_spike_end_s")
    labels = ("peak p99\n(s)", "peak backlog\nage (s)", "peak lag ÷ base\n(s of input)", "spike end →\ncaught up (s)",
              "spike end →\nown level (s)", "spike end →\nlag < 1 s (s)")

    def value(r, m):  # seconds, like every other column
        x = r.get(m)
        return None if x is None else x / 1000 if m == "peak_p99_ms" else x
    vals = [v for r in measured for m in ms if (v := value(r, m)) is not None]
    ab.dot_strip(ax3, measured, systems, ms, labels, max(vals + [10.0]) * 1.5,
                 skip=lambda s, m: s != "tidemark" and m in TIDEMARK_ONLY, value=value, floor=0.05,
                 never=lambda m: m in ("caught_up_after_spike_end_s", "back_to_own_level_after_spike_end_s",
                                       "lag_below_1s_of_input_after_spike_end_s"))
    ax3.axhline(10, color="red", ls="--", lw=.8, label="10 s budget")
    ax3.set_ylabel("seconds (never: at the top)")
    ax3.legend(fontsize=7)
    fig.suptitle(f"spike: {meta.get('base', '?')}/s base, {meta.get('spike_s', '?')} s at ×{meta.get('factor', '?')}, "
                 f"{len(measured)} measured runs (A-B-B-A); tidemark {meta.get('tidemark_rev', '?')}, "
                 f"Kafka Streams {meta.get('kstreams_rev', '?')}", fontsize=9)
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
