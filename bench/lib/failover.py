#!/usr/bin/env python3
"""The failover benchmark's helpers (bench/failover.sh): sampling two tidemark processes,
per-run summaries, the combined result and its plot.

    failover.py sample OUT.jsonl --url NAME=URL ... [--interval 0.5]
    failover.py owned METRICS.txt SOURCE            # partitions of SOURCE owned on a /metrics page
    failover.py ks-owned KS.log SOURCE_TOPIC [BEFORE_MS] # same from the baseline's `[ks] t=... tasks` lines
    failover.py run RUN.json --system tidemark|tidemark-standby|ks-eos --actions A.jsonl --t0 EPOCH --tk EPOCH
                 --affected "0 2" --partitions 4 --gen-start ISO [--samples S.jsonl]
                 [--ks-log-b B.log --ks-latency-a A.jsonl --ks-latency-b B.jsonl --ks-lag-b B.lag.jsonl]
                 [--tm-log-b B.log --tm-log-a A.log] [--meta JSON]
    failover.py report RESULT.json PLOT.png RUN.json ... [--meta JSON]

tidemark-standby is tidemark with `--standbys all`: summarised as tidemark, plus the survivor's
standby gauges and its hand-over log lines.

SKU → SKU repartition partition: tidemark places a SKU with FNV-1a 64 of its UTF-8 bytes
modulo the partition count (src/engine/derive.rs `sku_partition`); the Kafka Streams baseline
writes the repartition topic with the producer's default partitioner (no StreamPartitioner in
Topo.java: murmur2 of the serialized key, & 0x7fffffff, modulo the count), both computed here.
An action's SKU is its payload's "sku" field (else the key's `rule:vN:SKU:window:START`).
"""
import json, math, os, re, sys, time, urllib.request
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prom import samples  # noqa: E402
from timeseries import ensure_mpl, load_jsonl, opt  # noqa: E402

M32 = 0xFFFFFFFF


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def murmur2(data):
    """Kafka's org.apache.kafka.common.utils.Utils.murmur2 (signed 32-bit result)."""
    n, m, r = len(data), 0x5BD1E995, 24
    h = (0x9747B28C ^ n) & M32
    for i in range(n // 4):
        k = data[4 * i] | data[4 * i + 1] << 8 | data[4 * i + 2] << 16 | data[4 * i + 3] << 24
        k = (k * m) & M32
        k ^= k >> r
        k = (k * m) & M32
        h = (h * m) & M32
        h ^= k
    rem, base = n % 4, n & ~3
    if rem == 3:
        h ^= data[base + 2] << 16
    if rem >= 2:
        h ^= data[base + 1] << 8
    if rem >= 1:
        h ^= data[base]
        h = (h * m) & M32
    h ^= h >> 13
    h = (h * m) & M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


# Kafka's own test vectors (UtilsTest.testMurmur2)
for _s, _h in (("21", -973932308), ("foobar", -790332482), ("a-little-bit-long-string", -985981536),
               ("a-little-bit-longer-string", -1486304829), ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
               ("abc", 479470107)):
    assert murmur2(_s.encode()) == _h, _s
assert fnv1a64("a") == 0xAF63DC4C8601EC8C and fnv1a64("foobar") == 0x85944171F73967E8


def sku_partition(system, sku, n):
    if system.startswith("tidemark"):
        return fnv1a64(sku) % n
    return (murmur2(sku.encode()) & 0x7FFFFFFF) % n


KEY = re.compile(r"^(?P<rule>[^:]+):v(?P<ver>\d+):(?P<sku>.*):window:(?P<start>.+)$")


def parse_action(a):
    m = KEY.match(a["key"])
    sku = None
    try:
        sku = json.loads(a["body"]).get("sku")
    except (ValueError, AttributeError):
        pass
    if sku is None and m:
        sku = m.group("sku")
    return sku, (m.group("start") if m else None)


def iso_ms(s):
    return int(datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() * 1000)


# --- sample ---------------------------------------------------------------------------------
def parse_page(page):
    s = {"owned": {}, "age": {}, "counts": {}, "restores": 0.0, "records": 0.0}
    sb = {}
    for name, labels, v in samples(page):
        key = f"{labels.get('source', '?')}[{labels.get('partition', '?')}]"
        if name == "tidemark_partition_owned":
            s["owned"][key] = v
        elif name == "tidemark_backlog_age_seconds":
            s["age"][key] = v
        elif name == "tidemark_input_partitions":
            s["counts"][labels.get("source", "?")] = v
        elif name.startswith("tidemark_snapshot_restores_total"):
            s["restores"] += v
        elif name == "tidemark_records_total":
            s["records"] = v
        elif name in ("tidemark_standby_partitions", "tidemark_standby_lag_records", "tidemark_standby_warm",
                      "tidemark_standby_promotions_total", "tidemark_standby_rows_waiting"):
            sb[name[len("tidemark_standby_"):]] = sb.get(name[len("tidemark_standby_"):], 0.0) + v
    if sb:
        s["standby"] = sb
    return s


def sample(args):
    out = args[0]
    urls = dict(a.split("=", 1) for a in [args[i + 1] for i, x in enumerate(args) if x == "--url"])
    interval = float(opt(args, "--interval", "0.5"))
    import signal
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with open(out, "a", buffering=1) as f:
        nxt = time.time()
        while not stop:
            rec = {"t": round(time.time(), 3), "loadavg": os.getloadavg()[0]}
            for name, url in urls.items():
                try:
                    rec[name] = {"up": True, **parse_page(urllib.request.urlopen(url, timeout=0.4).read().decode())}
                except Exception:
                    rec[name] = {"up": False}
            f.write(json.dumps(rec) + "\n")
            nxt += interval
            time.sleep(max(0.0, nxt - time.time()))


def owned(args):
    s = parse_page(open(args[0]).read())
    print(" ".join(str(p) for p in sorted(int(k.split("[")[1][:-1]) for k, v in s["owned"].items()
                                             if k.startswith(args[1] + "[") and v >= 1)))


def ks_tasks(path):
    """[(epoch s, {"active": set("topic:p"), "standby": set})] from `[ks] t=MS tasks ...` lines."""
    out = []
    if not path or not os.path.exists(path):
        return out
    for line in open(path, errors="replace"):
        p = line.split()
        if len(p) >= 3 and p[0] == "[ks]" and p[2] == "tasks":
            d = {"active": set(), "standby": set()}
            for f in p[3:]:
                k, _, v = f.partition("=")
                if k in d and v:
                    d[k] = set(v.split(","))
            out.append((int(p[1][2:]) / 1000, d))
    return out


def ks_owned(args):
    before = float(args[2]) / 1000 if len(args) > 2 else 1e18
    rows = [d for t, d in ks_tasks(args[0]) if t <= before]
    act = rows[-1]["active"] if rows else set()
    print(" ".join(str(p) for p in sorted(int(x.rsplit(":", 1)[1]) for x in act if x.rsplit(":", 1)[0] == args[1])))


# --- one run ----------------------------------------------------------------------------------
def settled(rows, pred, after):
    cand = None
    for t, r in rows:
        if t < after:
            continue
        if pred(r):
            cand = t if cand is None else cand
        else:
            cand = None
    return cand


def rnd(x, d=2):
    return None if x is None else round(x, d)


def run(args):
    out = args[0]
    system = opt(args, "--system")
    meta = json.loads(opt(args, "--meta", "{}"))
    t0, tk = float(opt(args, "--t0")), float(opt(args, "--tk"))
    n = int(opt(args, "--partitions", "4"))
    affected = {int(x) for x in opt(args, "--affected", "").split()}
    gen_start = iso_ms(opt(args, "--gen-start"))
    acts = sorted(load_jsonl(opt(args, "--actions")), key=lambda a: a["t"])
    res = {**meta, "system": system, "t0": t0, "kill_at_s": round(tk - t0, 2), "affected_sku_partitions": sorted(affected)}

    # actions: SKU partition, before/after the kill
    per_key, rows = {}, []
    for a in acts:
        sku, start = parse_action(a)
        part = sku_partition(system, sku, n) if sku is not None else None
        rows.append((a["t"] / 1000, a["key"], part, a["body"], sku, start))
        per_key.setdefault(a["key"], set()).add(a["body"])
    before = {k for t, k, *_ in rows if t < tk}
    after = [r for r in rows if r[0] >= tk]
    res["posts"] = len(rows)
    res["posts_before_kill"] = sum(1 for r in rows if r[0] < tk)
    res["distinct_keys"] = len(per_key)
    res["keys_posted_more_than_once"] = sum(1 for k in per_key if sum(1 for r in rows if r[1] == k) > 1)
    res["keys_with_two_payloads"] = sum(1 for v in per_key.values() if len(v) > 1)
    res["reposts_after_kill_of_keys_posted_before"] = sum(1 for r in after if r[1] in before)
    res["unparsed_actions"] = sum(1 for r in rows if r[2] is None)
    aff = [r for r in after if r[2] in affected]
    una = [r for r in after if r[2] is not None and r[2] not in affected]
    res["first_affected_action_after_kill_s"] = rnd(aff[0][0] - tk) if aff else None
    res["first_unaffected_action_after_kill_s"] = rnd(una[0][0] - tk) if una else None
    firsts = [next((r[0] - tk for r in after if r[2] == p), None) for p in sorted(affected)]
    res["every_affected_partition_acting_again_after_kill_s"] = rnd(max(firsts)) if firsts and None not in firsts else None
    # how dense the affected SKUs' actions were before the kill (the wait for the first one after
    # it includes the rule's own pace: a window boundary near the kill would add to it)
    pre = sorted(r[0] for r in rows if r[2] in affected and tk - 20 <= r[0] < tk)
    res["affected_posts_last_10s_before_kill"] = sum(1 for t in pre if t >= tk - 10)
    res["max_gap_between_affected_posts_20s_before_kill_s"] = rnd(max((b - a for a, b in zip([tk - 20] + pre, pre + [tk])), default=None))
    res["first_action_after_kill_per_sku_partition_s"] = {
        str(p): rnd(next((r[0] - tk for r in after if r[2] == p), None)) for p in range(n)}
    # sanity check of the SKU → partition mapping: the affected partitions' actions stop at the
    # kill (the last one before it, the gap), the others' do not
    gaps = {}
    for p in range(n):
        last = max((r[0] for r in rows if r[2] == p and r[0] < tk), default=None)
        nxt = next((r[0] for r in after if r[2] == p), None)
        gaps[str(p)] = {"affected": p in affected, "last_before_kill_s": rnd(last - tk) if last else None,
                        "gap_across_kill_s": rnd(nxt - last) if (last and nxt) else None,
                        "posts_before_kill": sum(1 for r in rows if r[2] == p and r[0] < tk)}
    res["per_sku_partition"] = gaps
    # normalised keys (window start relative to the generator's start) for the cross-run comparison
    res["normalised_keys"] = sorted({f"{r[4]}@{(iso_ms(r[5]) - gen_start) // 1000}" for r in rows if r[5]})
    pre = [(t - t0, 1) for t, *_ in rows]
    res["actions_per_s"] = per_second(pre)
    res["action_marks_rel_kill"] = [rnd(r[0] - tk) for r in aff[:1]]

    if system.startswith("tidemark"):
        victim = opt(args, "--victim", "A")
        survivor = "B" if victim == "A" else "A"
        res["killed_process"], res["surviving_process"] = victim, survivor
        samples = load_jsonl(opt(args, "--samples"))
        series, owned_rows, age_rows = [], [], []
        for s in samples:
            t = s["t"]
            row = {"t": round(t - tk, 2)}
            for name, role in ((victim, "killed"), (survivor, "survivor")):
                p = s.get(name, {})
                if p.get("up"):
                    ages = [v for k, v in p["age"].items() if k.startswith("orders[") and p["owned"].get(k, 0) >= 1]
                    row[f"{role}_age_max_s"] = max(ages) if ages else None
                    row[f"{role}_owned_orders"] = sum(1 for k, v in p["owned"].items() if k.startswith("orders[") and v >= 1)
                    row[f"{role}_owned_sku"] = sum(1 for k, v in p["owned"].items() if k.startswith("sku-repartition[") and v >= 1)
                    row[f"{role}_restores"] = p["restores"]
                    for k, v in p.get("standby", {}).items():
                        row[f"{role}_standby_{k}"] = v
            series.append(row)
            b = s.get(survivor, {})
            if b.get("up"):
                cnt = {k: int(v) for k, v in b["counts"].items()}
                full = bool(cnt) and all(sum(1 for k, v in b["owned"].items() if k.startswith(src + "[") and v >= 1) >= c
                                         for src, c in cnt.items() if c > 0)
                owned_rows.append((t, full))
                # input topics only: the internal repartition topics trail by about one commit of progress marks
                ages = [v for k, v in b["age"].items() if k.split("[")[0] in ("orders", "inventory") and b["owned"].get(k, 0) >= 1]
                age_rows.append((t, full and bool(ages) and max(ages) < 1.0))
        tb = next((t for t, full in owned_rows if t >= tk and full), None)
        res["survivor_owns_every_partition_after_kill_s"] = rnd(tb - tk) if tb else None
        ta = settled(age_rows, lambda ok: ok, tk)
        res["backlog_age_below_1s_every_partition_after_kill_s"] = rnd(ta - tk) if ta else None
        tf = next((t for t, ok in age_rows if t >= tk + 0.5 and ok), None)
        res["backlog_age_first_below_1s_every_partition_after_kill_s"] = rnd(tf - tk) if tf else None
        res["max_survivor_backlog_age_after_kill_s"] = max((r.get("survivor_age_max_s") or 0 for r in series if r["t"] >= 0), default=None)
        res["max_backlog_age_before_kill_s"] = max((max(r.get("killed_age_max_s") or 0, r.get("survivor_age_max_s") or 0)
                                                    for r in series if -30 <= r["t"] < 0), default=None)
        res["survivor_snapshot_restores"] = max((r.get("survivor_restores") or 0 for r in series), default=0)
        res["caught_up_criterion"] = ("the survivor owns every partition of every source (tidemark_partition_owned) and "
                                      "tidemark_backlog_age_seconds < 1 s on each of its orders and inventory partitions, in every later 0.5 s sample")
        logb = opt(args, "--tm-log-b")
        res["survivor_restore_log_lines"] = [l.strip() for l in open(logb, errors="replace") if "restored from snapshot" in l][:20] \
            if logb and os.path.exists(logb) else []
        # where the time went: the killed process's newest snapshot round before the kill, the
        # survivor's snapshot imports (log timestamps, relative to the kill)
        def log_times(path, needle):
            out = []
            if path and os.path.exists(path):
                for l in open(path, errors="replace"):
                    if needle in l:
                        try:
                            out.append((datetime.fromisoformat(l.split()[0].replace("Z", "+00:00")).timestamp(), l))
                        except ValueError:
                            pass
            return out
        rounds = [t for t, _ in log_times(opt(args, "--tm-log-a"), "snapshot round") if t < tk]
        res["newest_snapshot_round_before_kill_age_s"] = rnd(tk - max(rounds)) if rounds else None
        imports = [t for t, _ in log_times(logb, "restored from snapshot") if t >= tk]
        res["snapshot_imports_after_kill_s"] = [rnd(min(imports) - tk), rnd(max(imports) - tk)] if imports else None
        # standby tasks (tidemark-standby): the survivor's hand-overs after the kill, its standby
        # lag (records behind the committed limits) just before the kill, warnings and errors
        hand = log_times(logb, "standby tasks handed to the active tasks")
        res["standby_handovers_after_kill"] = [{"t_s": rnd(t - tk), "line": l.strip()[:400]} for t, l in hand if t >= tk]
        res["standby_handovers_before_kill"] = sum(1 for t, _ in hand if t < tk)
        res["standby_warm_lines"] = [l.strip()[:300] for _, l in log_times(logb, "every standby task caught up")][:4]
        pre = [r for r in series if -10 <= r["t"] < 0]
        res["survivor_standby_lag_records_before_kill_max"] = max((r.get("survivor_standby_lag_records") for r in pre
                                                                    if r.get("survivor_standby_lag_records") is not None), default=None)
        res["survivor_standby_partitions_before_kill"] = next((r.get("survivor_standby_partitions") for r in reversed(pre)
                                                               if r.get("survivor_standby_partitions") is not None), None)
        res["survivor_standby_promotions_after_run"] = max((r.get("survivor_standby_promotions_total") or 0 for r in series), default=None)
        for role, path in (("survivor", logb), ("killed", opt(args, "--tm-log-a"))):
            lines = [l.strip() for l in open(path, errors="replace")] if path and os.path.exists(path) else []
            bad = [l for l in lines if " WARN " in l or " ERROR " in l]
            res[f"{role}_log_warn_error_lines"] = len(bad)
            res[f"{role}_no_standby_partitions"] = [l.split("partition=")[1].split()[0] for l in bad if "no standby" in l and "partition=" in l]
            res[f"{role}_log_warn_error_examples"] = [l[:300] for l in bad if "admin listener off" not in l][:12]
        res["series"] = series
    else:
        tasks = ks_tasks(opt(args, "--ks-log-b"))
        full = lambda d: all(f"{tp}:{p}" in {x.rsplit('.', 1)[-1] for x in d["active"]} for tp in ("orders", "sku-repartition") for p in range(n))
        tb = next((t for t, d in tasks if t >= tk and full(d)), None)
        res["survivor_owns_every_partition_after_kill_s"] = rnd(tb - tk) if tb else None
        res["killed_process"], res["surviving_process"] = "A", "B"
        # when the survivor's task of each affected SKU partition became active: its actions can
        # only be computed from then on (earlier POSTs of affected SKUs are action records the
        # killed process committed before the kill, handed to the survivor's dispatcher)
        per = {str(p): rnd(next((t - tk for t, d in tasks if t >= tk and any(x.endswith(f"sku-repartition:{p}") for x in d["active"])), None))
               for p in sorted(affected)}
        res["affected_sku_tasks_active_on_survivor_after_kill_s"] = per
        res["every_affected_sku_task_active_after_kill_s"] = max(per.values()) if per and None not in per.values() else None
        res["b_task_changes_after_kill"] = [{"t_s": rnd(t - tk), "active": sorted(d["active"]), "standby": sorted(d["standby"])}
                                            for t, d in tasks if t >= tk]
        states = []
        for line in open(opt(args, "--ks-log-b"), errors="replace"):
            p = line.split()
            if len(p) >= 6 and p[0] == "[ks]" and p[2] == "state" and int(p[1][2:]) / 1000 >= tk:
                states.append({"t_s": rnd(int(p[1][2:]) / 1000 - tk), "from": p[3], "to": p[5]})
        res["b_state_changes_after_kill"] = states
        lat = []
        for name in ("a", "b"):
            for k in load_jsonl(opt(args, f"--ks-latency-{name}")):
                lat.append({"inst": name.upper(), "t": k["t"] / 1000, **{x: k[x] for x in ("n", "p50_ms", "p99_ms", "max_ms")}})
        lat.sort(key=lambda k: k["t"])
        lb = [(k["t"], k) for k in lat if k["inst"] == "B" and k["n"]]
        tl = settled(lb, lambda k: k["p99_ms"] < 1000, tk)
        res["p99_below_1s_after_kill_s"] = rnd(tl - tk) if tl else None
        tf = next((t for t, k in lb if t >= (tb or tk) and k["p99_ms"] < 1000), None)
        res["p99_first_below_1s_after_kill_s"] = rnd(tf - tk) if tf else None
        res["caught_up_criterion"] = ("append→2xx p99 < 1 s in every later per-second latency line with actions of "
                                      "instance B's dispatcher (--latency-out): Kafka Streams exposes no backlog age")
        res["max_p99_before_kill_ms"] = max((k["p99_ms"] for k in lat if k["n"] and tk - 30 <= k["t"] < tk), default=None)
        res["max_p99_after_kill_ms"] = max((k["p99_ms"] for k in lat if k["n"] and k["t"] >= tk), default=None)
        lag = [{"t": round(r["t"] / 1000 - tk, 2), "lag": r["orders_end"] - r["orders_committed"] + r["repartition_end"] - r["repartition_committed"]}
               for r in load_jsonl(opt(args, "--ks-lag-b"))]
        res["max_committed_lag_before_kill_records"] = max((r["lag"] for r in lag if -30 <= r["t"] < 0), default=None)
        res["series"] = [{"t": round(k["t"] - tk, 2), "inst": k["inst"], "n": k["n"], "p99_ms": k["p99_ms"]} for k in lat]
        res["lag_series"] = lag
    json.dump(res, open(out, "w"), indent=1)
    print(json.dumps({k: v for k, v in res.items() if k not in ("series", "lag_series", "normalised_keys", "actions_per_s", "b_task_changes_after_kill")}, indent=1))


def per_second(pts):
    c = {}
    for t, w in pts:
        c[int(t)] = c.get(int(t), 0) + w
    return sorted(c.items())


# --- the combined result ------------------------------------------------------------------------
HEAD = ("first_affected_action_after_kill_s", "survivor_snapshot_restores", "every_affected_partition_acting_again_after_kill_s", "survivor_owns_every_partition_after_kill_s",
        "every_affected_sku_task_active_after_kill_s",
        "backlog_age_below_1s_every_partition_after_kill_s", "max_survivor_backlog_age_after_kill_s", "p99_below_1s_after_kill_s", "max_p99_before_kill_ms",
        "reposts_after_kill_of_keys_posted_before", "keys_with_two_payloads")


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else round((xs[m - 1] + xs[m]) / 2, 2)


def report(args):
    result, png, *rest = args
    meta = json.loads(opt(rest, "--meta", "{}"))
    runs = [json.load(open(p)) for p in rest if p.endswith(".json") and os.path.exists(p)]
    target = float(meta.get("target_s", 10))
    res = {"scenario": "failover", **meta, "runs": [], "systems": {}}
    for i, r in enumerate(runs):
        res["runs"].append({k: v for k, v in r.items() if k not in ("series", "lag_series", "normalised_keys", "actions_per_s")})
        res["runs"][-1]["run_index"] = i + 1
    for sysname in sorted({r["system"] for r in runs}):
        rs = [r for r in runs if r["system"] == sysname]
        s = {"runs": len(rs)}
        for k in HEAD:
            vals = [r.get(k) for r in rs if k in r]
            if vals:
                s[k] = {"per_run": vals, "median": median(vals)}
        fa = s.get("first_affected_action_after_kill_s", {}).get("median")
        s["target_s"] = target
        s["first_affected_action_vs_target_ratio"] = round(fa / target, 2) if fa is not None else None
        s["target_met"] = all(v is not None and v <= target for v in s.get("first_affected_action_after_kill_s", {}).get("per_run", [None]))
        res["systems"][sysname] = s
    # the same input (seed 22, event times from the same minute-aligned offset) in every run:
    # normalised keys `SKU@window start − generator start (s)` compared across runs
    cmp = []
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            a, b = set(runs[i]["normalised_keys"]), set(runs[j]["normalised_keys"])
            # windows both runs finished (the last window start either has, minus one window)
            last = min(max((int(k.rsplit("@", 1)[1]) for k in a), default=0), max((int(k.rsplit("@", 1)[1]) for k in b), default=0))
            ac, bc = {k for k in a if int(k.rsplit("@", 1)[1]) < last}, {k for k in b if int(k.rsplit("@", 1)[1]) < last}
            cmp.append({"runs": [i + 1, j + 1], "systems": [runs[i]["system"], runs[j]["system"]], "keys": [len(a), len(b)],
                        "compared_windows_starting_before_s": last, "compared_keys": [len(ac), len(bc)], "all_keys_equal": a == b, "only_first": len(ac - bc),
                        "only_second": len(bc - ac), "equal": ac == bc,
                        "examples_only_first": sorted(ac - bc)[:5], "examples_only_second": sorted(bc - ac)[:5]})
    res["key_set_comparison"] = cmp
    res["key_set_comparison_note"] = ("keys normalised to SKU@(window start − generator start) in s; compared over the windows "
                                      "before the last window both runs' actions reach (a run still behind at its end has that window "
                                      "incomplete and misses later ones); all_keys_equal compares every key; keys_per_window per run below")
    res["keys_per_window"] = {str(i + 1): sorted(__import__("collections").Counter(int(k.rsplit("@", 1)[1]) for k in r["normalised_keys"]).items())
                              for i, r in enumerate(runs)}
    json.dump(res, open(result, "w"), indent=1)
    print(json.dumps({"systems": res["systems"], "key_set_comparison": [{k: v for k, v in c.items() if not k.startswith("examples")} for c in cmp]}, indent=1))

    plt = ensure_mpl()
    # one panel per system present: tidemark-standby, tidemark (backlog age), ks-eos (p99)
    order = [x for x in ("tidemark-standby", "tidemark", "ks-eos") if any(r["system"] == x for r in runs)]
    fig, axes = plt.subplots(len(order), 1, figsize=(11, 3.2 + 2.9 * len(order)), sharex=True, squeeze=False)
    axes = {name: a for name, a in zip(order, axes[:, 0])}
    colors = ["C0", "C1", "C2", "C3", "C4", "C5"]
    for i, r in enumerate(runs):
        c = colors[i % len(colors)]
        fa = r.get("first_affected_action_after_kill_s")
        ax = axes[r["system"]]
        if r["system"].startswith("tidemark"):
            s = r["series"]
            ax.plot([x["t"] for x in s], [x.get("survivor_age_max_s") if x.get("survivor_age_max_s") is not None else math.nan for x in s],
                     color=c, label=f"run {i + 1}: survivor {r['surviving_process']}, max backlog age of its orders partitions")
            ax.plot([x["t"] for x in s], [x.get("killed_age_max_s") if x.get("killed_age_max_s") is not None else math.nan for x in s],
                     color=c, ls=":", alpha=.7, label=f"run {i + 1}: {r['killed_process']} (killed)")
        else:
            s = [x for x in r["series"] if x["n"]]
            for inst, ls in (("B", "-"), ("A", ":")):
                xs = [x for x in s if x["inst"] == inst]
                ax.plot([x["t"] for x in xs], [x["p99_ms"] / 1000 for x in xs], color=c, ls=ls, alpha=1 if inst == "B" else .7,
                        label=f"run {i + 1}: {inst}{' (killed)' if inst == 'A' else ''}, append→2xx p99 per second")
        if fa is not None:
            ax.axvline(fa, color=c, lw=1, ls="-.")
            ax.annotate(f"first affected action, run {i + 1}: {fa:.1f} s", (fa, 0.97 - 0.08 * (i % 4)), xycoords=("data", "axes fraction"),
                        fontsize=7, color=c)
    labels = {"tidemark-standby": "tidemark --standbys all: backlog age (s)", "tidemark": "tidemark (no standbys): backlog age (s)",
              "ks-eos": "Kafka Streams (standby=1): p99 (s)"}
    for name, ax in axes.items():
        lbl = labels[name]
        ax.axvline(0, color="black", lw=1.2, ls="--", label="kill -9")
        ax.axvline(target, color="gray", lw=0.8, ls=":", label=f"{target:g} s target")
        ax.axhline(1, color="gray", lw=0.6)
        ax.set_yscale("symlog", linthresh=1); ax.set_ylim(bottom=0)
        ax.set_ylabel(lbl); ax.grid(alpha=.3); ax.legend(fontsize=7, loc="upper left")
    axes[order[-1]].set_xlabel("seconds since kill -9 of one of the two processes")
    fig.suptitle(meta.get("title", "failover"), fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    cmd, *args = sys.argv[1:]
    {"sample": sample, "owned": owned, "ks-owned": ks_owned, "run": run, "report": report}[cmd](args)


if __name__ == "__main__":
    main()
