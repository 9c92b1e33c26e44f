#!/usr/bin/env python3
"""Samples a processor's Prometheus /metrics page and /proc once a second into JSON lines.

    sampler.py OUT.jsonl [--url http://127.0.0.1:PORT/metrics] [--pidfile NAME=PATH ...]
               [--pid NAME=PID ...] [--interval 1.0]

One line per tick:
  {"t": epoch s, "up": bool,
   "hist": {"end_to_end": [[le, cumulative count], ...], ...},   # tidemark_latency_seconds
   "backlog_age": {"orders[0]": s, ...}, "lag": {"orders[0]": records, ...},  # per input partition
   "counters": {"records_total": n, "events_applied_total": n, "dispatch_total{outcome=delivered}": n, ...},
   "proc": {"NAME": {"pid": n, "cpu_ticks": utime+stime, "rss_kb": n, "hwm_kb": n}},
   "stat": {"steal": ticks, "total": ticks}, "loadavg": 1-min}
A pidfile is re-read every tick, so a restarted processor (recovery benchmark) is followed.
Stops on SIGTERM/SIGINT. Only the standard library is used.
"""
import json, os, signal, sys, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prom import samples  # noqa: E402

args = sys.argv[1:]
out = args.pop(0)
url, interval, pidfiles, pids = None, 1.0, {}, {}
while args:
    a = args.pop(0)
    if a == "--url":
        url = args.pop(0)
    elif a == "--interval":
        interval = float(args.pop(0))
    elif a == "--pidfile":
        k, v = args.pop(0).split("=", 1); pidfiles[k] = v
    elif a == "--pid":
        k, v = args.pop(0).split("=", 1); pids[k] = int(v)
    else:
        sys.exit(f"unknown argument {a}")

stop = False
def _stop(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, _stop)
signal.signal(signal.SIGINT, _stop)

def parse(page):
    s = {"hist": {}, "backlog_age": {}, "lag": {}, "counters": {}}
    for name, labels, value in samples(page):
        if name == "tidemark_latency_seconds_bucket":
            le = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
            s["hist"].setdefault(labels.get("segment", "?"), []).append([le, value])
        elif name in ("tidemark_backlog_age_seconds", "tidemark_consumer_lag_records"):
            # Without the SKU repartition topic (it always trails by about one commit of
            # progress marks), keyed source[partition]: partition numbers repeat across
            # sources. The combine repartition topic is kept, though it trails the same way
            # (1.0-1.7 s of age while healthy): summaries of "behind the input" read
            # caught_up.input_backlog_age (orders and inventory only).
            source = labels.get("source", "orders")
            if source == "sku-repartition":
                continue
            key = f"{source}[{labels.get('partition', '?')}]"
            s["backlog_age" if name == "tidemark_backlog_age_seconds" else "lag"][key] = value
        elif name.startswith("tidemark_") and (
            name.endswith("_total") or name.startswith("tidemark_outbox") or name.startswith("tidemark_state_")
            or name == "tidemark_task_entries"
        ):
            extra = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            s["counters"][name[len("tidemark_"):] + (f"{{{extra}}}" if extra else "")] = value
    for v in s["hist"].values():
        v.sort(key=lambda b: b[0])
        if v and v[-1][0] == float("inf"):
            v[-1][0] = 1e9  # JSON has no infinity
    return s


def proc(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        rss = hwm = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
        # fields after ")": state is index 0, utime 11, stime 12
        return {"pid": pid, "cpu_ticks": int(st[11]) + int(st[12]), "rss_kb": rss, "hwm_kb": hwm}
    except (OSError, IndexError, ValueError):
        return None


def steal():
    with open("/proc/stat") as f:
        xs = [int(x) for x in f.readline().split()[1:]]
    return {"steal": xs[7] if len(xs) > 7 else 0, "total": sum(xs)}


with open(out, "a", buffering=1) as f:
    nxt = time.time()
    while not stop:
        t = time.time()
        rec = {"t": round(t, 3), "up": False}
        if url:
            try:
                page = urllib.request.urlopen(url, timeout=max(0.2, interval * 0.8)).read().decode()
                rec.update(parse(page)); rec["up"] = True
            except Exception:
                pass
        procs = {}
        for k, p in pids.items():
            procs[k] = proc(p)
        for k, path in pidfiles.items():
            try:
                procs[k] = proc(int(open(path).read().strip()))
            except (OSError, ValueError):
                procs[k] = None
        rec["proc"] = procs
        rec["stat"] = steal()
        rec["loadavg"] = float(open("/proc/loadavg").read().split()[0])
        f.write(json.dumps(rec) + "\n")
        nxt += interval
        time.sleep(max(0.0, nxt - time.time()))
