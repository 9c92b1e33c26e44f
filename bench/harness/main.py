"""bench/run: one command per scenario (bench/README.md documents every flag and output).

    bench/run list
    bench/run <scenario> [--smoke] [--rev REV | --bin PATH] [--against REV] [--allow-dirty] [--ks-jar JAR]
                         [--kafka-port PORT] [--keep-broker] [--blocks N] [--no-save]
    bench/run --smoke-all [--bin PATH] [--kafka-port PORT]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback

from . import scenario as scn
from .blocks import run_series
from .broker import Broker
from .drivers import DRIVERS
from .summary import measures, per_block_ratio, plot, verdicts
from .systems import KafkaStreams, Tidemark, harness_revision, target_dir
from .util import OUT, RESULTS, ROOT, BenchError, log, machine, write_json


class Ctx:
    pass


def run_scenario(name, args, smoke, broker=None, tidemark=None):
    sc = scn.load(name, smoke=smoke)
    if args.blocks:
        sc["blocks"] = args.blocks
    if getattr(args, "against", None):
        against(sc, args.against)
    hrev = harness_revision()
    allow_dirty = args.allow_dirty or smoke
    if hrev["dirty"] and not allow_dirty:
        raise BenchError("bench/harness, bench/scenarios or bench/run have uncommitted changes: a result must name the harness "
                         "revision that produced it. Commit them, or pass --allow-dirty")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    ctx = Ctx()
    ctx.sc, ctx.p = sc, sc["params"]
    ctx.raw_root = os.path.join(ROOT, "bench")
    ctx.raw = os.path.join(OUT, "smoke" if smoke else "raw", name, stamp)
    os.makedirs(ctx.raw, exist_ok=True)
    ctx.work = tempfile.mkdtemp(prefix=f"bench-{name}-")
    ctx.tag = f"b{name.replace('-', '')}{int(time.time()) % 100000}"
    driver = DRIVERS.get(sc["driver"])
    if driver is None:
        raise BenchError(f"{sc['path']}: driver = {sc['driver']!r}: expected one of {', '.join(DRIVERS)}")
    driver = driver()
    own_broker = broker is None
    ctx.systems, opened = {}, []
    log(f"scenario {name}{' (smoke)' if smoke else ''}: {sc['about']}")
    try:
        kinds = {s["system"] for s in sc["systems"]}
        needs_broker = getattr(driver, "needs_broker", True)
        if needs_broker or "tidemark" in kinds:
            ctx.systems["tidemark"] = tidemark or Tidemark(binary=args.bin, rev=args.rev, allow_dirty=allow_dirty)
            if tidemark is None:
                opened.append(ctx.systems["tidemark"])
        for k in kinds:
            if k.startswith("ks-"):
                ctx.systems[k] = KafkaStreams("exactly_once_v2" if k == "ks-eos" else "at_least_once", jar=args.ks_jar, allow_dirty=allow_dirty)
        if "tidemark-state" in kinds:
            st = describe(ctx, {"system": "tidemark-state"})
            if st["dirty"] and not allow_dirty:
                raise BenchError("state/ has uncommitted changes: the footprint benches measure committed code; commit them or pass --allow-dirty")
            ctx.systems["tidemark-state"] = None
        for s in sc["systems"]:
            if s.get("rev"):
                ctx.systems[s["name"]] = Tidemark(rev=s["rev"], allow_dirty=allow_dirty)
                opened.append(ctx.systems[s["name"]])
        if needs_broker:
            ctx.broker = broker or Broker(args.kafka_port, keep=args.keep_broker).start()
        t0 = time.time()
        driver.setup(ctx)
        runs = run_series(sc, driver, ctx, ctx.raw)
        driver.teardown(ctx)
        table = measures(runs)
        names = [s["name"] for s in sc["systems"]]
        summary = {
            "scenario": name, "smoke": smoke, "about": sc["about"], "file": sc["path"], "when": stamp,
            "duration_s": round(time.time() - t0, 1),
            "harness": hrev, "systems": {s["name"]: describe(ctx, s) for s in sc["systems"]},
            "machine": machine(), "params": sc["params"], "blocks": sc["blocks"], "warmup": sc["warmup"], "check": sc["check"],
            "quiet": sc["quiet"], "steal_max_pct": sc["steal_max_pct"],
            "targets": verdicts(sc, table), "measures": table,
            "per_block_ratio": {t["metric"]: per_block_ratio(runs, t["metric"], names[0], names[1]) for t in sc["targets"]} if len(names) == 2 else {},
            "runs": [{k: v for k, v in r.items() if k not in ("keys_sha256",)} for r in runs],
            "raw": os.path.relpath(ctx.raw, ROOT),
        }
        dest = ctx.raw if (smoke or args.no_save) else RESULTS
        # A comparison with another revision is not the scenario's figure: its own file.
        stem = f"{name}-against-{sc['against']}" if sc.get("against") else name
        jpath = os.path.join(dest, f"{stem}.json")
        ppath = plot(sc, runs, driver.series(ctx, runs), os.path.join(dest, f"{stem}.png"))
        summary["plot"] = os.path.relpath(ppath, ROOT) if ppath else None
        write_json(jpath, summary)
        log(f"scenario {name}: summary {os.path.relpath(jpath, ROOT)}" + (f", plot {summary['plot']}" if ppath else " (no plot: matplotlib missing)"))
        for t in summary["targets"]:
            log(f"  {t['text']}: {t['system']} {t['figure']} (n={t['n']}, {t['min']}–{t['max']}) → {t['verdict']}")
        return summary
    finally:
        for s in opened:
            s.close()
        if own_broker and getattr(ctx, "broker", None):
            ctx.broker.stop()
        shutil.rmtree(ctx.work, ignore_errors=True)


def against(sc, rev):
    """--against REV: the scenario compares this tidemark (A) with tidemark built at REV (B) in
    A-B-B-A blocks instead of its second system; targets keep only those of A."""
    from .systems import git
    if sc["systems"][0]["system"] != "tidemark":
        raise BenchError(f"{sc['path']}: --against needs tidemark as the first system")
    short = git("rev-parse", "--short", rev)
    if not short:
        raise BenchError(f"--against {rev}: not a revision of {ROOT}")
    b = {"name": f"tidemark@{short}", "system": "tidemark", "rev": short}
    sc["systems"] = [sc["systems"][0], b]
    sc["against"] = short
    sc["targets"] = [t for t in sc["targets"] if t["system"] == sc["systems"][0]["name"]]


def describe(ctx, s):
    if s["system"] == "tidemark":
        t = ctx.systems.get(s["name"]) or ctx.systems["tidemark"]
        return {**t.info, **{k: v for k, v in s.items() if k not in ("name", "system")}}
    if s["system"] == "tidemark-state":
        from .systems import git
        return {"crate": "tidemark-state", "commit": git("log", "-1", "--format=%h", "--", "state"), "dirty": bool(git("status", "--porcelain", "--", "state"))}
    return ctx.systems[s["system"]].info


def smoke_all(args):
    """Every scenario's smoke variant, one broker and one tidemark binary for all of them,
    args.jobs scenarios at a time (their topics, endpoints and ports are their own; most of a
    smoke run is waiting for paced input, so two at a time on two cores halves the wall time)."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.time()
    if args.bin is None and args.rev is None:
        args.bin = os.path.join(target_dir(), "release", "tidemark")
    broker = Broker(args.kafka_port, keep=args.keep_broker).start()
    tidemark = Tidemark(binary=args.bin, rev=args.rev, allow_dirty=True)
    failed = []

    def one(name):
        t1 = time.time()
        try:
            run_scenario(name, args, smoke=True, broker=broker, tidemark=tidemark)
            log(f"smoke {name}: ok in {time.time() - t1:.0f} s")
        except Exception as e:  # noqa: BLE001 - every failure is reported, the others still run
            failed.append(name)
            log(f"smoke {name}: FAILED after {time.time() - t1:.0f} s: {e}")

    # The longest first (2026-12-06: snapshot-volume 64 s, drain 49 s, failover-3 39 s,
    # failover 32 s, recovery 20 s; the rest 1-18 s), so two lanes even out.
    first = ["snapshot-volume", "drain", "failover-3", "failover", "recovery", "pending-memory", "capacity"]
    names = [n for n in first if n in scn.names()] + [n for n in scn.names() if n not in first]
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(one, names))
    finally:
        tidemark.close()
        broker.stop()
    log(f"smoke-all: {len(scn.names()) - len(failed)} of {len(scn.names())} scenarios ok in {time.time() - t0:.0f} s"
        + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench/run", description="Runs a benchmark scenario of bench/scenarios (bench/README.md).")
    ap.add_argument("scenario", nargs="?", help="a scenario name (bench/run list), or `list`")
    ap.add_argument("--smoke", action="store_true", help="the scenario's [smoke] variant (one block, tiny input); summary under bench/out/smoke")
    ap.add_argument("--smoke-all", action="store_true", help="every scenario's smoke variant, one after the other; exit 1 if any fails")
    ap.add_argument("--rev", help="measure tidemark built at this commit in a clean worktree (default HEAD)")
    ap.add_argument("--against", metavar="REV", help="compare with tidemark built at REV (A-B-B-A blocks) instead of the scenario's second system")
    ap.add_argument("--bin", help="measure this tidemark binary (its --version must name a clean commit unless --allow-dirty)")
    ap.add_argument("--allow-dirty", action="store_true", help="accept a dirty or unknown binary, baseline or harness (recorded as such)")
    ap.add_argument("--ks-jar", help="the Kafka Streams baseline jar (default: bench/kstreams/build.sh builds it)")
    ap.add_argument("--kafka-port", type=int, default=int(os.environ.get("KAFKA_PORT", "39092")), help="the benchmark broker's port (KAFKA_PORT, 39092)")
    ap.add_argument("--keep-broker", action="store_true", help="leave a broker this run started running")
    ap.add_argument("--blocks", type=int, help="override the scenario's number of blocks")
    ap.add_argument("--jobs", type=int, default=2, help="--smoke-all: scenarios run at a time (2)")
    ap.add_argument("--no-save", action="store_true", help="write the summary and plot to the raw folder, not bench/results")
    args = ap.parse_args(argv)
    try:
        if args.smoke_all:
            return smoke_all(args)
        if not args.scenario or args.scenario == "list":
            for n in scn.names():
                sc = scn.load(n)
                print(f"{n:16} {sc['about']}")
            return 0
        if args.bin and args.rev:
            raise BenchError("--bin and --rev: give one")
        run_scenario(args.scenario, args, smoke=args.smoke)
        return 0
    except BenchError as e:
        print(f"bench/run: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench/run: interrupted", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        return 2


if __name__ == "__main__":
    sys.exit(main())
