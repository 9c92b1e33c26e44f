#!/usr/bin/env python3
"""Recomputes an A-B-B-A series' run lines from their raw copies (after a summariser changed), shows
what differs, and with --take rewrites the named measures and the summary.

    recompute_ab.py SUMMARISER NAME [--take FIELD ...] [--results DIR]

SUMMARISER: spike_ab or catchup_ab (their `run` reads the raw copies: every POST, the sampler's
lines, the generator's log, the marks, and for Kafka Streams its latency and lag logs). NAME: the
series (results/raw/NAME-runs.jsonl, results/NAME.json). Every field of every run line is compared
with the recomputed one; the differences are printed. Some never match and are not measures: the
key file's name (written only with --raw-out) and what needs a log the raw copies keep only in part
(catch-up: Kafka Streams' JVM start → RUNNING). With --take, only the named fields are replaced in
the run lines, and the summary is written again with the result's own header (its meta).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY_FIELDS = {"bench", "runs_measured", "runs_total", "outputs_ok_every_run", "reposts_same_payload", "target", "measures",
                  "systems", "ratios_ks_over_tidemark", "keys", "verdicts", "runs"}


def short(v):
    return "…" if isinstance(v, (list, dict)) else v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("summariser", choices=("spike_ab", "catchup_ab"))
    p.add_argument("name")
    p.add_argument("--take", nargs="*", default=[])
    p.add_argument("--results", default=os.path.join(HERE, "..", "results"))
    a = p.parse_args()
    raw = os.path.join(a.results, "raw")
    runs_path = os.path.join(raw, f"{a.name}-runs.jsonl")
    with open(runs_path) as f:
        runs = [json.loads(x) for x in f if x.strip()]
    tool = os.path.join(HERE, f"{a.summariser}.py")
    differ = 0
    for r in runs:
        pre = os.path.join(raw, f"{a.name}-r{r['run']:02d}-{r['system']}")
        cmd = [sys.executable, tool, "run", "--system", r["system"], "--phase", r["phase"], "--block", str(r["block"]),
               "--run", str(r["run"]), "--load", str(r["loadavg_before"]), "--marks", pre + ".marks.json",
               "--actions", pre + ".actions.jsonl.gz", "--samples", pre + ".samples.jsonl.gz", "--gen", pre + ".gen.log.gz",
               "--caught-up-ms", str(r["caught_up_ms"])]
        if r["system"] != "tidemark":
            cmd += ["--latency", pre + ".latency.jsonl.gz", "--lag", pre + ".lag.jsonl.gz"]
            if a.summariser == "catchup_ab":
                cmd += ["--ks-log", pre + ".ks.log.gz"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if not out.stdout.strip():
            sys.exit(f"run {r['run']} ({r['system']}): no line (exit {out.returncode}): {out.stderr[-400:]}")
        n = json.loads(out.stdout.strip().splitlines()[-1])
        for k in sorted(set(r) | set(n)):
            if r.get(k) != n.get(k):
                differ += 1
                print(f"run {r['run']:2d} {r['system']:8s} {k}: {short(r.get(k))} -> {short(n.get(k))}"
                      + ("  (taken)" if k in a.take else ""))
        for k in a.take:
            r[k] = n.get(k)
    print(f"{differ} field(s) differ in {len(runs)} run lines", file=sys.stderr)
    if not a.take:
        return
    with open(runs_path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in runs)
    result = os.path.join(a.results, f"{a.name}.json")
    with open(result) as f:
        meta = {k: v for k, v in json.load(f).items() if k not in SUMMARY_FIELDS}
    subprocess.run([sys.executable, tool, "summary", runs_path, result, os.path.join(a.results, f"{a.name}.png"),
                    "--meta", json.dumps(meta), "--raw-dir", raw], check=True, stdout=subprocess.DEVNULL)
    print(f"rewrote {runs_path} ({', '.join(a.take)}) and {result}", file=sys.stderr)


if __name__ == "__main__":
    main()
