#!/usr/bin/env python3
"""What the live heap grew by, from jemalloc heap profiles (bench/soak.sh with HEAP_PROFILE=1).

    heap_growth.py HEAP_DIR BINARY START_EPOCH SETTLE_S OUT_TXT OUT_JSONL

jemalloc (preloaded, prof:true) writes a profile every few GiB allocated. For every dump this
prints the estimated live heap (the sampled bytes scaled as jeprof scales them), so a creeping
RSS can be told apart from a growing heap: a flat heap under a growing RSS is the allocator's
fragmentation, a growing heap is something kept. Then jeprof names what grew between the
first dump after the settle and the last one (`--base`), by function, flat and cumulative.
"""
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak import judge  # noqa: E402

STACK_TOTAL = re.compile(r"^\s*t\*:\s*(\d+):\s*(\d+)\s*\[")


def live_bytes(path):
    """Estimated live bytes of one heap_v2 dump: each stack's sampled bytes scaled by
    1 / (1 - exp(-mean_size / sample_period)), jeprof's AdjustSamples."""
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines or not lines[0].startswith("heap_v2/"):
        return None
    period = int(lines[0].split("/")[1])
    total, in_stack = 0.0, False
    for line in lines[1:]:
        if line.startswith("@"):
            in_stack = True
            continue
        m = STACK_TOTAL.match(line)
        if in_stack and m:
            objs, size = int(m.group(1)), int(m.group(2))
            if objs:
                mean = size / objs
                total += size / (1 - math.exp(-mean / period)) if period else size
            in_stack = False
    return total


def jeprof(binary, dump, base=None, cum=False):
    cmd = ["jeprof", "--text", "--nodecount=40"]
    if base:
        cmd.append(f"--base={base}")
    if cum:
        cmd.append("--cum")
    cmd += [binary, dump]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else f"jeprof failed ({r.returncode}): {r.stderr[-2000:]}"


def main():
    heap_dir, binary, start, settle, out_txt, out_jsonl = sys.argv[1:7]
    start, settle = float(start), float(settle)
    dumps = sorted(
        (os.path.join(heap_dir, f) for f in os.listdir(heap_dir) if f.endswith(".heap")),
        key=os.path.getmtime,
    )
    series = []
    for d in dumps:
        b = live_bytes(d)
        if b is not None:
            series.append({"t": os.path.getmtime(d) - start, "live_heap_bytes": round(b), "dump": os.path.basename(d)})
    with open(out_jsonl, "w") as f:
        for s in series:
            f.write(json.dumps(s) + "\n")
    after = [s for s in series if s["t"] >= settle]
    with open(out_txt, "w") as out:
        out.write(f"# live heap by jemalloc's sampled profile, {len(series)} dumps\n")
        for s in series:
            out.write(f"t={s['t']:7.0f} s  live heap {s['live_heap_bytes'] / 1e6:8.1f} MB  {s['dump']}\n")
        if len(after) < 2:
            out.write(f"\nfewer than two dumps after the settle ({settle:.0f} s): no growth report\n")
            return
        # The heap saws with the memtables (tens of MB): the trend is the least-squares
        # slope over every dump after the settle, judged as soak.py judges the RSS.
        trend = judge([(s["t"], s["live_heap_bytes"]) for s in series], settle, "estimated live heap bytes")
        out.write(f"\n# live heap after the settle: {json.dumps(trend)}\n")
        first, last = after[0], after[-1]
        minutes = (last["t"] - first["t"]) / 60
        grew = (last["live_heap_bytes"] - first["live_heap_bytes"]) / 1e6
        out.write(f"# between the first dump after the settle and the last, t={first['t']:.0f} s to t={last['t']:.0f} s ({minutes:.1f} min): {grew:+.1f} MB of live heap (one dump each: inside the sawtooth)\n")
        base, end = (os.path.join(heap_dir, s["dump"]) for s in (first, last))
        out.write("\n## what grew, by the function that allocated it (jeprof --base, flat)\n")
        out.write(jeprof(binary, end, base=base))
        out.write("\n## what grew, cumulative (jeprof --base --cum)\n")
        out.write(jeprof(binary, end, base=base, cum=True))
        out.write("\n## the whole live heap at the last dump (jeprof, flat)\n")
        out.write(jeprof(binary, end))
    print(open(out_txt).read().split("\n## ")[0], file=sys.stderr)


if __name__ == "__main__":
    main()
