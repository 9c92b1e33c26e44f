"""The A-B-B-A block runner: warm-up runs discarded, a quiet-host wait before every run, the
steal over every run with a ceiling (a measured run above it is discarded and run again, at
most steal_retries times), and the output check across runs."""
import json
import os

from .host import wait_quiet
from .util import BenchError, host_ticks, log, steal_pct


def order(systems, blocks, half=False):
    """[(block, system)]: one system: A per block; two: A B B A per block (half: A B, smoke runs)."""
    a = systems[0]
    if half:
        return [(1, s) for s in systems]
    if len(systems) == 1:
        return [(b, a) for b in range(1, blocks + 1)]
    b_ = systems[1]
    return [(b, s) for b in range(1, blocks + 1) for s in (a, b_, b_, a)]


def run_series(sc, driver, ctx, raw_dir):
    """Runs the series; returns the run records (warm-up and discarded ones included, marked by phase)."""
    runs = []
    plan = [(0, s, "warmup") for s in sc["systems"] for _ in range(int(sc["warmup"]))]
    plan += [(b, s, "measured") for b, s in order(sc["systems"], int(sc["blocks"]), half=sc["smoke"])]
    reference = None
    runs_path = os.path.join(raw_dir, "runs.jsonl")
    for i, (block, system, phase) in enumerate(plan, 1):
        attempt = 0
        while True:
            run_id = f"r{i:02d}{'' if attempt == 0 else chr(ord('a') + attempt)}-{system['name']}"
            host = wait_quiet(sc["quiet"])
            log(f"{sc['name']} run {i}/{len(plan)} ({phase}, block {block}): {system['name']} (load {host['load']}, steal {host['steal_pct']} %)")
            t0 = host_ticks()
            m = driver.run(ctx, system, run_id)
            rec = {"run": run_id, "system": system["name"], "phase": phase, "block": block, "host_before": host,
                   "steal_pct": steal_pct(t0, host_ticks()), **m}
            over = rec["steal_pct"] > float(sc["steal_max_pct"])
            if over and phase == "measured" and attempt < int(sc["steal_retries"]):
                rec["phase"] = "discarded"
                rec["discarded_because"] = f"steal {rec['steal_pct']} % > {sc['steal_max_pct']} %"
                log(f"  discarded: {rec['discarded_because']}; running it again")
            runs.append(rec)
            with open(runs_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            log(f"  {sc['name']} {run_id}: " + ", ".join(f"{k} {v}" for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool))[:400])
            if rec["phase"] != "discarded":
                break
            attempt += 1
        # The output check.
        if sc["check"] == "keys" and rec.get("keys_sha256"):
            if reference is None:
                reference = (rec["run"], rec["keys_sha256"])
            elif rec["keys_sha256"] != reference[1]:
                raise BenchError(f"output check: run {rec['run']}'s action keys differ from run {reference[0]}'s "
                                 f"({rec.get('distinct_keys')} keys; raw records in {runs_path}). A faster wrong result is not a result.")
        if sc["check"] in ("keys", "nonempty") and not rec.get("outputs_ok", True):
            raise BenchError(f"output check: run {rec['run']}: {rec.get('outputs_problem', 'no output')} (raw records in {runs_path})")
    return runs
