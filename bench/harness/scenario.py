"""Scenario files (bench/scenarios/<name>.toml): loading, the smoke variant, validation.

Keys (bench/README.md, "Scenario files", documents each):
  name, driver, about, systems, blocks, warmup, check, steal_max_pct, steal_retries,
  [quiet] load / steal_pct / max_s, [params] (the driver's), [[targets]], [smoke] (overrides,
  [smoke.params] merged into [params]).
"""
import copy
import os
import tomllib

from .util import BENCH, BenchError

DIR = os.path.join(BENCH, "scenarios")
DEFAULTS = {"blocks": 5, "warmup": 1, "check": "nonempty", "steal_max_pct": 10.0, "steal_retries": 2,
            "quiet": {"load": 2.5, "steal_pct": 10.0, "max_s": 60}, "params": {}, "targets": []}
CHECKS = ("keys", "nonempty", "none")
OPS = ("<=", ">=")
SYSTEMS = ("tidemark", "ks-eos", "ks-alos", "tidemark-state")


def names():
    return sorted(f[:-5] for f in os.listdir(DIR) if f.endswith(".toml"))


def load(name, smoke=False):
    path = os.path.join(DIR, f"{name}.toml")
    if not os.path.exists(path):
        raise BenchError(f"no scenario {name!r}: {path} does not exist (scenarios: {', '.join(names())})")
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise BenchError(f"{path}: {e}") from e
    sc = copy.deepcopy(DEFAULTS)
    for k, v in raw.items():
        if k in ("smoke", "quiet", "params"):
            continue
        sc[k] = v
    sc["quiet"].update(raw.get("quiet", {}))
    sc["params"].update(raw.get("params", {}))
    sc["smoke"] = smoke
    if smoke:
        # A smoke run checks that the harness works, not the figures: no quiet-host wait, no
        # steal re-runs, no warm-up, one block, unless the scenario's [smoke] says otherwise.
        sc.update({"blocks": 1, "warmup": 0, "steal_retries": 0})
        sc["quiet"]["max_s"] = 0
        sm = raw.get("smoke")
        if sm is None:
            raise BenchError(f"{path}: no [smoke] table (every scenario needs a smoke variant)")
        for k, v in sm.items():
            if k == "params":
                sc["params"].update(v)
            elif k == "quiet":
                sc["quiet"].update(v)
            else:
                sc[k] = v
    sc["path"] = os.path.relpath(path, os.path.dirname(BENCH))
    validate(sc, path)
    return sc


def validate(sc, path):
    for k in ("name", "driver", "about", "systems"):
        if k not in sc:
            raise BenchError(f"{path}: missing key `{k}`")
    if sc["name"] != os.path.basename(path)[:-5]:
        raise BenchError(f"{path}: name = {sc['name']!r} must match the file name")
    if sc["check"] not in CHECKS:
        raise BenchError(f"{path}: check = {sc['check']!r}: expected one of {', '.join(CHECKS)}")
    sc["systems"] = [s if isinstance(s, dict) else {"name": s, "system": s} for s in sc["systems"]]
    seen = set()
    for s in sc["systems"]:
        s.setdefault("system", s.get("name"))
        if s["system"] not in SYSTEMS:
            raise BenchError(f"{path}: system {s['system']!r}: expected one of {', '.join(SYSTEMS)}")
        if s["name"] in seen:
            raise BenchError(f"{path}: system name {s['name']!r} twice")
        seen.add(s["name"])
    if not (1 <= len(sc["systems"]) <= 2):
        raise BenchError(f"{path}: systems: one or two (A-B-B-A blocks compare two)")
    if int(sc["blocks"]) < 1 or int(sc["warmup"]) < 0:
        raise BenchError(f"{path}: blocks ≥ 1 and warmup ≥ 0")
    if sc.get("smoke"):
        # A smoke variant with one system has no other system for a relative target.
        sc["targets"] = [t for t in sc["targets"] if t.get("vs") is None or t["vs"] in seen]
    for i, t in enumerate(sc["targets"]):
        for k in ("metric", "op", "value", "text"):
            if k not in t:
                raise BenchError(f"{path}: targets[{i}] lacks `{k}`")
        if t["op"] not in OPS:
            raise BenchError(f"{path}: targets[{i}].op = {t['op']!r}: expected <= or >=")
        t.setdefault("system", sc["systems"][0]["name"])
        if t["system"] not in seen:
            raise BenchError(f"{path}: targets[{i}].system = {t['system']!r} is not among systems")
        if "vs" in t and (t["vs"] not in seen or t["vs"] == t["system"]):
            raise BenchError(f"{path}: targets[{i}].vs = {t['vs']!r}: the other system of the series")
