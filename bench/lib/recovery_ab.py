"""Per-run measures, summary and plot of bench/recovery_ab.sh (kill -9 → first action, tidemark
against Kafka Streams EOS, alternating A-B-B-A blocks).

    recovery_ab.py run --system S --phase P --block B --run N --load L --marks M.json
                       --actions A.jsonl [--latency KS.latency.jsonl] --result RUN.json
                       --raw-out PREFIX [--caught-up-ms 1000]      → one JSON line on stdout
    recovery_ab.py summary RUNS.jsonl OUT.json OUT.png [--meta JSON]

`run` reads one recovery.sh run's raw files (RAW_OUT): the receiver's log (every POST: receive
time, Idempotency-Key, the tidemark-source-append-time header, body), Kafka Streams' per-second
latency log, the epoch times of the live start, the kill and the restart. Times are measured
from the kill (the SIGKILL was sent; the restart follows once the process is reaped, ~0.1 s).
"Before the kill" means posted by the killed process (receive time before the restart).

- first_action_s: kill → the first POST after the restart (may re-send an action the killed
  process had decided but not acknowledged);
- first_new_action_s: kill → the first POST of a key never POSTed before the kill;
- caught_up_s: kill → the start of the last stretch, up to the end of the run, in which every
  second with actions has an append→2xx p99 below CAUGHT_UP_MS (one rule for both systems).
  tidemark: exact per action from the receiver's log (receive time − the triggering record's
  append time), grouped by the second of receipt (after the restart: its POSTs only); Kafka
  Streams: its dispatcher's per-second HdrHistogram lines (POST answered − the triggering
  record's append time; the baseline does not send the append time to the receiver). The time
  is the end of the first second of that stretch. None: the last second with actions was still
  above the threshold.
- back_to_pre_kill_s: the same with the system's own ceiling, max(CAUGHT_UP_MS, the highest
  per-second p99 before the kill): back to its own steady state. Reported beside caught_up_s
  because a system whose steady-state p99 is above CAUGHT_UP_MS (tidemark with the default
  idle_skew of 2 s: ~2.9 s) never meets the absolute rule, kill or not.
- reposts_of_keys_seen_before_kill: POSTs after the restart of keys POSTed before the kill.
- pre_kill: the per-second p99s from 10 s after the live start to the kill (the system's
  steady state; if its median is above CAUGHT_UP_MS the rule cannot be met after the kill
  either, and caught_up_s is None for a reason that is not the recovery).

Checks (outputs_ok): no key POSTed with two different payloads, at least one POST after the
restart. The compact raw copy PREFIX.actions.jsonl.gz keeps t, key, src and a hash of the body
of every POST; PREFIX.latency.jsonl (Kafka Streams) is the per-second log as written.
"""
import gzip
import hashlib
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab_summary as ab  # noqa: E402
from caught_up import load_jsonl, opt, pick, settled, spread  # noqa: E402

PRE_KILL_SKIP_S = 10


def body_hash(a):
    """The body's hash (the compact raw copy keeps only the hash, as `h`)."""
    if "h" in a:
        return a["h"]
    body = a.get("body") if isinstance(a.get("body"), str) else json.dumps(a.get("body"), sort_keys=True)
    return hashlib.sha1((body or "").encode()).hexdigest()[:12]


def run(args):
    system = opt(args, "--system")
    marks = json.load(open(opt(args, "--marks")))
    t0, tk, tr = float(marks["t0"]), float(marks["kill"]), float(marks["restart"])
    thr = float(opt(args, "--caught-up-ms", "1000"))
    acts = sorted(load_jsonl(opt(args, "--actions")), key=lambda a: a["t"])
    before = [a for a in acts if a["t"] / 1000 < tr]
    after = [a for a in acts if a["t"] / 1000 >= tr]
    keys_before = {a["key"] for a in before}
    first = after[0]["t"] / 1000 - tk if after else None
    first_new = next((a["t"] / 1000 - tk for a in after if a["key"] not in keys_before), None)
    reposts = [a for a in after if a["key"] in keys_before]

    payloads = {}
    for a in acts:
        payloads.setdefault(a["key"], set()).add(body_hash(a))
    two = sorted(k for k, v in payloads.items() if len(v) > 1)
    outputs = {"posts": len(acts), "distinct_keys": len(payloads), "posts_before_kill": len(before),
               "posts_after_restart": len(after), "keys_with_two_payloads": len(two),
               "examples_two_payloads": two[:5]}
    outputs["ok"] = not two and len(after) > 0

    # per-second append→2xx p99: [(t_end_rel_kill, n, p99_ms, after the restart?)]
    if system == "tidemark":
        # before and after the restart apart, so the second of the restart holds only new POSTs
        secs = {}
        for a in acts:
            if a.get("src") is not None:
                secs.setdefault((a["t"] / 1000 >= tr, a["t"] // 1000), []).append(a["t"] - a["src"])
        per_s = [(round(s + 1 - tk, 3), len(v), pick(sorted(v), .99), aft) for (aft, s), v in sorted(secs.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
        exact = sorted(a["t"] - a["src"] for a in acts if a.get("src") is not None and t0 + PRE_KILL_SKIP_S <= a["t"] / 1000 < tk)
        pre_exact = {"count": len(exact), "p50_ms": pick(exact, .5), "p99_ms": pick(exact, .99)}
        if not secs and acts:
            sys.exit("tidemark POSTs carry no tidemark-source-append-time header: no exact latency")
    else:
        # a line after the restart comes from the restarted JVM (the killed one writes no more)
        per_s = [(round(k["t"] / 1000 - tk, 3), k["n"], k["p99_ms"], k["t"] / 1000 >= tr) for k in load_jsonl(opt(args, "--latency")) if k.get("n")]
        pre_exact = None
    restart_rel = tr - tk
    post = [(t, p) for t, n, p, aft in per_s if aft]
    cu = settled(post, lambda p: p < thr, after=float("-inf"))
    pre = [p for t, n, p, aft in per_s if t0 + PRE_KILL_SKIP_S - tk <= t <= 0 and not aft]
    ceiling = max([thr] + pre)
    own = settled(post, lambda p: p <= ceiling, after=float("-inf"))
    pre_kill = {"seconds_with_actions": len(pre), "per_second_p99_median_ms": statistics.median(pre) if pre else None,
                "per_second_p99_max_ms": max(pre) if pre else None}
    if pre_exact is not None:
        pre_kill["exact"] = pre_exact

    res = json.load(open(opt(args, "--result")))
    if system != "tidemark":
        res = res.get("systems", {}).get(system, res)
    ref_keys = ("history_processing_s", "state_dir_mb_before_live", "metrics_up_after_restart_s",
                "backlog_age_below_1s_after_restart_s", "max_backlog_age_after_restart_s",
                "state_running_after_restart_s", "consuming_again_after_restart_s", "backlog_caught_up_after_restart_s",
                "lag_below_1s_of_input_after_restart_s")
    ref = {k: res[k] for k in ref_keys if k in res}
    if "changelog_restore_after_restart" in res:
        ref["changelog_records_restored"] = res["changelog_restore_after_restart"].get("records_restored")
    r = res.get("resources", {})
    ref["cpu_s_processor"], ref["peak_rss_mb"], ref["loadavg_mean"] = r.get("cpu_s_processor"), r.get("peak_rss_mb"), r.get("loadavg_mean")
    steal = r.get("steal_pct")

    prefix = opt(args, "--raw-out")  # without it (recomputing from the raw copies) nothing is written
    if prefix:
        with gzip.open(prefix + ".actions.jsonl.gz", "wt") as f:
            for a in acts:
                f.write(json.dumps({"t": a["t"], "key": a["key"], "src": a.get("src"), "h": body_hash(a)}) + "\n")
        if opt(args, "--latency"):
            shutil.copyfile(opt(args, "--latency"), prefix + ".latency.jsonl")

    rnd = lambda x: None if x is None else round(x, 2)
    line = {"run": int(opt(args, "--run")), "system": system, "phase": opt(args, "--phase"), "block": int(opt(args, "--block")),
            "loadavg_before": float(opt(args, "--load")), "tag": marks["tag"],
            "restart_after_kill_s": rnd(restart_rel),
            "marks_epoch": {"t0": t0, "kill": tk, "restart": tr},
            "first_action_s": rnd(first), "first_new_action_s": rnd(first_new), "caught_up_s": rnd(cu),
            "caught_up_ms": thr, "back_to_pre_kill_s": rnd(own), "pre_kill_ceiling_ms": ceiling,
            "reposts_of_keys_seen_before_kill": len(reposts), "keys_reposted": len({a["key"] for a in reposts}),
            "pre_kill": pre_kill, "outputs": outputs, "recovery_sh": ref, "steal_pct": steal,
            "per_second_p99": [[t, n, p] for t, n, p, aft in per_s if t >= -PRE_KILL_SKIP_S]}
    print(json.dumps(line))
    sys.exit(0 if outputs["ok"] else 3)


MEASURES = (("first_action_s", "kill → first action POSTed"),
            ("first_new_action_s", "kill → first action not POSTed before the kill"),
            ("caught_up_s", "kill → caught up (per-second append→2xx p99 < threshold to the end)"),
            ("back_to_pre_kill_s", "kill → per-second p99 ≤ max(threshold, its own highest pre-kill per-second p99) to the end"),
            ("reposts_of_keys_seen_before_kill", "POSTs after the restart of keys POSTed before the kill"),
            ("restart_after_kill_s", "kill → restart (process reaped, new one started)"),
            ("loadavg_before", "1-minute load average before the run"),
            ("steal_pct", "CPU time the hypervisor gave to others over the run, % of this VM's CPU time (/proc/stat steal)"))
TARGET_S = 1.0
TARGET_RATIO = 10.0


def fmt_s(x):
    return ab.fmt_s(x, 2)


def summary(args):
    runs_path, out_json, out_png = args[:3]
    meta = json.loads(opt(args, "--meta", "{}"))
    runs, measured, systems = ab.load_runs(runs_path)
    out = {**ab.header("recovery_ab", meta, runs, measured), "systems": {}, "ratios_ks_over_tidemark": {},
           "verdicts": [], "runs": ab.without(runs, ("per_second_p99",))}
    for s in systems:
        rs = [r for r in measured if r["system"] == s]
        out["systems"][s] = {m: spread([r.get(m) for r in rs], none_is_never=m != "steal_pct") for m, _ in MEASURES}
        out["systems"][s]["pre_kill_per_second_p99_median_ms"] = spread([r["pre_kill"]["per_second_p99_median_ms"] for r in rs])
        pk = out["systems"][s]["pre_kill_per_second_p99_median_ms"]
        thr = rs[0]["caught_up_ms"] if rs else 1000
        if pk and pk["median"] is not None and pk["median"] >= thr:
            out["systems"][s]["caught_up_note"] = (f"its steady-state per-second p99 before the kill is already "
                                                   f"{pk['median']:.0f} ms (median of runs) ≥ {thr:.0f} ms: the absolute "
                                                   "rule cannot be met, kill or not; see back_to_pre_kill_s")
        out["systems"][s]["posts_after_restart"] = spread([r["outputs"]["posts_after_restart"] for r in rs])
        # recovery.sh's own numbers of the same runs, for reference (its "caught up" for tidemark is
        # the backlog-age gauge, not the rule above)
        ref = {}
        for k in sorted({k for r in rs for k in r["recovery_sh"]}):
            vals = [r["recovery_sh"].get(k) for r in rs]
            if all(v is None or isinstance(v, (int, float)) for v in vals):
                ref[k] = spread(vals)
        out["systems"][s]["recovery_sh_reference"] = ref
    out["measures"] = {m: d for m, d in MEASURES}
    tm = out["systems"].get("tidemark")
    ks_names = [s for s in systems if s != "tidemark"]
    out["ratios_ks_over_tidemark"] = ab.ratios_ks_over_tidemark(
        out["systems"], measured, systems, ("first_action_s", "first_new_action_s", "caught_up_s", "back_to_pre_kill_s"))

    # verdicts against the row: kill -9 → first action ≤ 1 s, and ≥ 10× faster than Kafka Streams EOS
    if tm:
        for m, what in (("first_action_s", "first action"), ("first_new_action_s", "first new action")):
            t = tm[m]
            within = sum(1 for x in t["values"] if x is not None and x <= TARGET_S)
            if t["median"] is None:
                out["verdicts"].append(f"kill -9 → {what} ≤ {TARGET_S:g} s: MISSED (tidemark: no {what} in most runs)")
            else:
                ok = t["median"] <= TARGET_S
                out["verdicts"].append(
                    f"kill -9 → {what} ≤ {TARGET_S:g} s: {'MET' if ok else 'MISSED'} (tidemark median {t['median']:.2f} s, "
                    f"{t['min']:.2f}–{fmt_s(t['max'])}; {within} of {t['n']} runs ≤ {TARGET_S:g} s"
                    + ("" if ok else f"; {t['median'] / TARGET_S:.1f}× the target") + ")")
            for ks in ks_names:
                e = out["ratios_ks_over_tidemark"][ks][m]
                k = out["systems"][ks][m]
                blocks = [x for x in e["per_block"] if x is not None]
                rng = f"per block {min(blocks):.1f}–{max(blocks):.1f}×" if blocks else "no complete block"
                if e["ratio_of_medians"] is None:
                    out["verdicts"].append(f"kill -9 → {what} ≥ {TARGET_RATIO:g}× faster than {ks}: not measurable "
                                           f"(medians tidemark {fmt_s((tm[m] or {}).get('median'))}, {ks} {fmt_s((k or {}).get('median'))})")
                else:
                    ok = e["ratio_of_medians"] >= TARGET_RATIO
                    out["verdicts"].append(
                        f"kill -9 → {what} ≥ {TARGET_RATIO:g}× faster than {ks}: {'MET' if ok else 'MISSED'} "
                        f"({ks}/tidemark = {e['ratio_of_medians']:.1f}× of the medians, {k['median']:.2f} s / {t['median']:.2f} s; {rng})")
    note = ab.steal_note(out["systems"], systems)
    if note:
        out["verdicts"].append(note)
    with open(out_json, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)

    try:
        from timeseries import ensure_mpl
        plt = ensure_mpl()
    except Exception:  # no matplotlib and no pip: the JSON is the result
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1, 1.4]})
    ms = ("first_action_s", "first_new_action_s", "caught_up_s", "back_to_pre_kill_s")
    labels = ("first action", "first new action", "caught up\n(p99 < threshold)", "back to own\npre-kill p99")
    top = max([r[m] for r in measured for m in ms if r[m] is not None] + [1.0]) * 1.5
    ab.dot_strip(ax1, measured, systems, ms, labels, top)
    ax1.axhline(TARGET_S, color="red", ls="--", lw=.8, label=f"target {TARGET_S:g} s")
    ax1.set_ylabel("seconds after kill -9 (never: at the top)")
    ax1.legend(fontsize=7)
    for r in measured:  # no actions for 2.5 s (the outage): a gap
        ab.p99_line(ax2, r["per_second_p99"], 2.5, color=ab.color(r["system"]), alpha=.5, lw=.8, marker=".", ms=2)
    for s in systems:
        ax2.plot([], [], color=ab.color(s), label=f"{s} (one line per run)")
    thr = measured[0]["caught_up_ms"] if measured else 1000
    ax2.axhline(thr, color="red", ls="--", lw=.8, label=f"caught-up threshold {thr:g} ms")
    ax2.axvline(0, color="gray", lw=.8)
    ax2.set_yscale("log")
    ax2.set_xlabel("seconds since kill -9")
    ax2.set_ylabel("append→2xx p99 per second (ms)")
    ax2.legend(fontsize=7)
    ax2.grid(alpha=.3)
    fig.suptitle(f"kill -9 recovery at {meta.get('rate', '?')}/s, {meta.get('history', '?')} history records, "
                 f"{len(measured)} measured runs (A-B-B-A); tidemark {meta.get('tidemark_rev', '?')}, "
                 f"Kafka Streams {meta.get('kstreams_rev', '?')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "run":
        run(rest)
    elif cmd == "summary":
        summary(rest)
    else:
        sys.exit(__doc__)
