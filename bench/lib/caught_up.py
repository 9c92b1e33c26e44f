#!/usr/bin/env python3
"""The one "caught up" rule of the A-B-B-A scenario series (bench/spike_ab.sh, bench/catchup_ab.sh,
issue 16), for tidemark and Kafka Streams alike, and what the series needs around it.

Rule: a system is caught up from the first second of the last stretch, up to the end of what was
observed, in which every second with actions has an append→2xx p99 below THRESHOLD (default
1000 ms). The stretch must hold at least MIN_SECONDS (5) seconds with actions, so a run whose
actions stopped cannot pass on one lucky second. Seconds without actions neither pass nor fail:
the true moment lies between the last second above the threshold and the first second of the
stretch (`gap_s`, the resolution of that measurement).

Per-second append→2xx p99 (both exact, both grouped by the second the POST was answered):
- tidemark: per action from the receiver's log (lib/receiver.py: receive time − the
  `tidemark-source-append-time` header, the broker append time of the record that fired it),
  nearest-rank p99 of the actions answered in that second;
- Kafka Streams: its dispatcher's per-second HdrHistogram lines (`--latency-out`: POST answered −
  the triggering record's append time, which the baseline carries in the action record's
  `tm.append_ms` header); the baseline sends no append time to the receiver.

The lag ("input not yet consumed", a reference beside the rule, and the second branch of the
stop rule below), in records:
- tidemark: the sum over input partitions of `tidemark_consumer_lag_records` (lib/sampler.py;
  the SKU repartition topic is left out there, it always trails by a commit of progress marks);
- Kafka Streams: committed-offset lag of orders + sku-repartition from App's `--lag-out`.

    caught_up.py hold --since EPOCH [--actions A.jsonl | --latency KS.latency.jsonl]
                      [--threshold-ms 1000] [--hold-s 20] [--min-seconds 5]
                      [--lag-samples S.jsonl | --lag-ks KS.lag.jsonl] [--lag-below N] [--lag-hold-s 60]

`hold` is the stop rule STOP_RULE=caught_up of spike.sh and catchup.sh, the same for both systems:
exit 0 when, now, either (a) the last HOLD_S seconds (all after SINCE) hold at least MIN_SECONDS
seconds with actions and every one of them has p99 < THRESHOLD, or (b) every lag reading of the
last LAG_HOLD_S seconds (all after SINCE, at least 80 % of them present) is below LAG_BELOW
records. Otherwise exit 1. (b) ends a run whose lag has drained but whose per-second p99 stays
above the threshold anyway (tidemark with its default idle_skew of 2 s has a steady-state p99 of
~2.5–2.9 s in these scenarios: no inventory records, so the merge waits for the idle promise); the
run then ends "not caught up" under the rule, after LAG_HOLD_S seconds of evidence.
"""
import gzip
import hashlib
import json
import re
import sys
import time
from datetime import datetime


def load_jsonl(path):
    out = []
    if not path:
        return out
    try:
        f = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
        with f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a line being written
    except OSError:
        pass
    return out


def opt(args, key, default=None):
    return args[args.index(key) + 1] if key in args else default


def pick(xs, p):
    """Nearest-rank quantile of a sorted list (as HdrHistogram and latency.sh)."""
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None


def per_second_tidemark(actions, since=None, until=None):
    """[(end of second, epoch s; actions; p99 ms)] from the receiver's log; actions without the
    source-append-time header are left out (count them with missing_src)."""
    secs = {}
    for a in actions:
        if a.get("src") is None:
            continue
        t = a["t"] / 1000
        if (since is not None and t < since) or (until is not None and t > until):
            continue
        secs.setdefault(a["t"] // 1000, []).append(a["t"] - a["src"])
    return [(s + 1.0, len(v), pick(sorted(v), .99)) for s, v in sorted(secs.items())]


def missing_src(actions):
    return sum(1 for a in actions if a.get("src") is None)


def per_second_ks(lines, since=None, until=None):
    """[(epoch s of the line, actions, p99 ms)] from the dispatcher's per-second latency log."""
    out = []
    for k in lines:
        if not k.get("n"):
            continue
        t = k["t"] / 1000
        if (since is not None and t < since) or (until is not None and t > until):
            continue
        out.append((t, k["n"], k["p99_ms"]))
    return sorted(out)


def per_second(system, actions, latency_lines, since=None, until=None):
    if system == "tidemark":
        return per_second_tidemark(actions, since, until)
    return per_second_ks(latency_lines, since, until)


def caught_up(points, threshold_ms, after, min_seconds=5, inclusive=False):
    """The rule on [(t, n, p99)] with t >= after. Returns {"at": epoch of the first second of
    the stretch or None, "last_above_at": the last second above before it (None: never above),
    "gap_s", "seconds_in_stretch", "reason" when "at" is None}. inclusive: p99 <= threshold
    passes (the "back to its own level" variant), else p99 < threshold."""
    pts = [(t, p) for t, n, p in points if t >= after]
    cand, count, last_bad = None, 0, None
    for t, p in pts:
        if p < threshold_ms or (inclusive and p <= threshold_ms):
            if cand is None:
                cand, count = t, 0
            count += 1
        else:
            cand, last_bad = None, t
    out = {"at": None, "last_above_at": last_bad, "gap_s": None, "seconds_in_stretch": count if cand is not None else 0,
           "seconds_with_actions": len(pts), "threshold_ms": threshold_ms}
    if not pts:
        out["reason"] = "no second with actions in the observed span"
    elif cand is None:
        out["reason"] = "the last second with actions was still at or above the threshold"
    elif count < min_seconds:
        out["reason"] = f"only {count} second(s) with actions below the threshold after the last one above (need {min_seconds})"
    else:
        out["at"] = cand
        out["gap_s"] = None if last_bad is None else round(cand - last_bad, 3)
    return out


def settled(series, ok, after):
    """[(t, value)] in time order: the first t >= after from which ok(value) holds for every later
    reading (a None value fails); None if the last reading fails or there is none."""
    cand = None
    for t, v in series:
        if t < after:
            continue
        if v is not None and ok(v):
            if cand is None:
                cand = t
        else:
            cand = None
    return cand


INPUT_SOURCES = ("orders", "inventory")


def input_backlog_age(sample):
    """The highest tidemark_backlog_age_seconds of the input partitions (orders, inventory) in one
    sampler line, None when it has none. The sampler also keeps the combine-repartition topic's
    ages: progress marks arrive there at every upstream commit, so its age never settles at 0
    (1.0–1.7 s while healthy, docs/operations.md) and is no measure of being behind the input."""
    ages = [v for k, v in (sample.get("backlog_age") or {}).items() if k.split("[", 1)[0] in INPUT_SOURCES]
    return max(ages) if ages else None


def lag_tidemark(samples):
    """[(t, input lag in records or None)] from sampler lines (full or compact)."""
    out = []
    for s in samples:
        lag = s.get("lag") or {}
        out.append((s["t"], sum(lag.values()) if s.get("up") and lag else None))
    return out


def lag_ks(lines):
    """[(t, orders lag, sku-repartition lag, orders committed)] from --lag-out lines."""
    return [(r["t"] / 1000, r["orders_end"] - r["orders_committed"], r["repartition_end"] - r["repartition_committed"],
             r["orders_committed"]) for r in lines]


def lag_series(system, samples, ks_lag_lines):
    """[(t, lag records)]: tidemark its input lag; Kafka Streams orders + sku-repartition, and
    None until the application committed anything on orders (it has not started consuming)."""
    if system == "tidemark":
        return lag_tidemark(samples)
    return [(t, (o + r) if c > 0 else None) for t, o, r, c in lag_ks(ks_lag_lines)]


def gen_progress(path):
    """[(epoch, cumulative order records)] from the stamped generator log (`EPOCH gen: N/TOTAL
    order records (R/s)`), plain or gzipped (lib/timeseries.py gen_progress, which reads plain
    files only)."""
    pts = []
    if not path:
        return pts
    try:
        f = gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")
        with f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1] == "gen:" and "/" in parts[2]:
                    try:
                        pts.append((float(parts[0]), int(parts[2].split("/")[0])))
                    except ValueError:
                        pass
    except OSError:
        pass
    return pts


def count_between(gen, a, b):
    """Records the generator sent between epochs a and b (its progress lines, ~1 s apart)."""
    ins = [(t, n) for t, n in gen if a <= t <= b]
    if len(ins) < 2:
        return None
    return {"records": ins[-1][1] - ins[0][1], "seconds": round(ins[-1][0] - ins[0][0], 2),
            "rate_per_s": round((ins[-1][1] - ins[0][1]) / max(1e-9, ins[-1][0] - ins[0][0]))}


def value_at(series, t):
    """The last (t_i, v) reading with t_i <= t (None if there is none)."""
    best = None
    for ti, v in series:
        if ti <= t:
            best = v
        else:
            break
    return best


def spread(xs, none_is_never=True):
    """Median and min–max of per-run values. With none_is_never, None (did not happen within the
    run) counts as +inf (so a median can be "never"); else None values are left out."""
    import math
    import statistics
    if not none_is_never:
        xs = [x for x in xs if x is not None]
    if not xs:
        return None
    vals = [math.inf if x is None else x for x in xs]
    med = statistics.median(vals)
    return {"median": None if math.isinf(med) else round(med, 3), "min": None if math.isinf(min(vals)) else min(vals),
            "max": None if math.isinf(max(vals)) else max(vals), "n": len(vals), "never": sum(1 for x in xs if x is None),
            "values": xs}


KEY_WINDOW = re.compile(r"^(.*:window:)(.+)$")


def parse_ms(text):
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def normalise_key(key, base_ms):
    """`rule:v1:SKU:window:<RFC 3339 start>` → `rule:v1:SKU:window:+<s after base>`: with the
    generator's start aligned (ALIGN_S), two runs of the same input give the same normalised keys
    whatever minute they ran in."""
    if base_ms is None:
        return key
    m = KEY_WINDOW.match(key)
    if not m:
        return key
    ms = parse_ms(m.group(2))
    return key if ms is None else f"{m.group(1)}+{(ms - base_ms) / 1000:g}s"


def body_hash(a):
    if "h" in a:
        return a["h"]
    body = a.get("body") if isinstance(a.get("body"), str) else json.dumps(a.get("body"), sort_keys=True)
    return hashlib.sha1((body or "").encode()).hexdigest()[:12]


def outputs(actions, base_ms):
    """The per-run output check: no key POSTed with two different payloads (hard), re-POSTs of
    a key with the same payload (counted), and the normalised key set (for comparisons)."""
    payloads = {}
    for a in actions:
        payloads.setdefault(a["key"], set()).add(body_hash(a))
    two = sorted(k for k, v in payloads.items() if len(v) > 1)
    keys = sorted({normalise_key(k, base_ms) for k in payloads})
    return {"posts": len(actions), "distinct_keys": len(payloads), "reposts_same_payload": len(actions) - len(payloads),
            "keys_with_two_payloads": len(two), "examples_two_payloads": two[:5], "ok": not two,
            "normalised_keys_sha256": hashlib.sha256("\n".join(keys).encode()).hexdigest(),
            "keys_normalised": base_ms is not None}, keys


def compact_action(a):
    return {"t": a["t"], "key": a["key"], "src": a.get("src"), "h": body_hash(a)}


def compact_sample(s):
    """What the summarisers read from a sampler line (drops the histograms: latency comes from
    the receiver's log)."""
    c = {k: s[k] for k in ("t", "up", "backlog_age", "lag", "proc", "stat", "loadavg") if k in s}
    rt = (s.get("counters") or {}).get("records_total", s.get("records_total"))
    if rt is not None:
        c["records_total"] = rt
    return c


def records_total(s):
    return (s.get("counters") or {}).get("records_total", s.get("records_total"))


def hold(args):
    since = float(opt(args, "--since"))
    thr = float(opt(args, "--threshold-ms", "1000"))
    hold_s = float(opt(args, "--hold-s", "20"))
    min_s = int(opt(args, "--min-seconds", "5"))
    now = time.time()
    if now - since >= hold_s:
        if opt(args, "--actions"):
            pts = per_second_tidemark(load_jsonl(opt(args, "--actions")), since=max(since, now - hold_s), until=now)
            pts = [x for x in pts if x[0] <= now]  # complete seconds only
        else:
            pts = per_second_ks(load_jsonl(opt(args, "--latency")), since=max(since, now - hold_s), until=now)
        if len(pts) >= min_s and all(p < thr for _, _, p in pts):
            return 0
    below = opt(args, "--lag-below")
    lag_hold = float(opt(args, "--lag-hold-s", "60"))
    if below is not None and now - since >= lag_hold:
        if opt(args, "--lag-samples"):
            series = lag_tidemark(load_jsonl(opt(args, "--lag-samples")))
        elif opt(args, "--lag-ks"):
            series = [(t, (o + r) if c > 0 else None) for t, o, r, c in lag_ks(load_jsonl(opt(args, "--lag-ks")))]
        else:
            series = []
        recent = [v for t, v in series if t >= max(since, now - lag_hold)]
        if len(recent) >= 0.8 * lag_hold and all(v is not None and v < float(below) for v in recent):
            return 0
    return 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "hold":
        sys.exit(hold(sys.argv[2:]))
    sys.exit(__doc__)
