"""One driver per kind of scenario. A driver has
  setup(ctx)                      once per series (input shared by every run, e.g. a log to drain),
  run(ctx, system, run_id) -> {}  one run of one system: its measures (numbers), `keys_sha256`
                                  and `distinct_keys` for the output check, `outputs_ok`,
  series(ctx, runs) -> {}         time series for the plot {title: {label: (xs, ys)}},
  teardown(ctx).
ctx holds the scenario (ctx.sc, ctx.p = its params), the broker, the systems, ctx.raw (the
raw folder of this series) and ctx.tag (a prefix unique to the series)."""
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import time

from .endpoint import Endpoint
from .sampler import HISTOGRAMS, Sampler, scrape, window
from .systems import Tidemark, tail
from .util import CLK_TCK, BenchError, du_bytes, free_port, histogram_quantile, host_ticks, kill9, log, median, percentile, proc_stat, stop

RULE = {"min_units": 50, "factor": "3.0", "baseline_windows": 15}
# tidemark_latency_seconds' segments in the order of an action's path (src/telemetry/events.rs).
SEGMENTS = ("append_to_consume", "append_to_release", "consume_to_commit", "commit_to_dispatch", "dispatch_to_ack", "end_to_end")


def rule(ctx):
    return {**RULE, **ctx.p.get("rule", {})}


def tm(ctx):
    """The tidemark system object (also the generator and topic tool for every scenario)."""
    t = ctx.systems.get("tidemark")
    if t is None:
        raise BenchError(f"{ctx.sc['path']}: this driver needs the tidemark binary")
    return t


def keys_digest(posts):
    keys = sorted({p[1] for p in posts})
    return hashlib.sha256("\n".join(keys).encode()).hexdigest(), len(keys)


def wait_rusage(proc):
    """Waits for a child and returns (exit code, cpu_s, max_rss_kb) from wait4."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def per_second_p99(posts, t_from_ms=None, t_to_ms=None):
    """[(second, p99 ms, n)] of append→2xx (receive time − source append time) per second of receipt."""
    secs = {}
    for t, _, src, _ in posts:
        if src is None or (t_from_ms and t < t_from_ms) or (t_to_ms and t > t_to_ms):
            continue
        secs.setdefault(t // 1000, []).append(t - src)
    return [(s, percentile(v, 99), len(v)) for s, v in sorted(secs.items())]


def ks_per_second_p99(path):
    out = []
    try:
        for line in open(path):
            r = json.loads(line)
            if r.get("n"):
                out.append((r["t"] // 1000, r["p99_ms"], r["n"]))
    except (OSError, ValueError):
        pass
    return out


def histogram_measures(before, after):
    """p50 and p99 of tidemark's own latency histograms over the observations between two
    Run.histograms() readings: seg_<segment>_p50_s/_p99_s per tidemark_latency_seconds segment
    (SEGMENTS first, in that order), then checkpoint_duration_*, commit_wait_* and
    commit_phase_<phase>_*."""
    hs = {}
    for series, bs in window(before, after).items():
        name, _, labels = series.partition("{")
        seg = labels.partition("segment=")[2].rstrip("}")
        phase = labels.partition("phase=")[2].rstrip("}")
        stem = name.removesuffix("_seconds") + (f"_{phase}" if phase else "")
        hs[f"seg_{seg}" if seg else stem] = bs
    order = [f"seg_{s}" for s in SEGMENTS]
    m = {}
    for stem in order + sorted(set(hs) - set(order)):
        for q in (50, 99):
            v = histogram_quantile(q / 100, hs.get(stem, {}))
            if v is not None:
                m[f"{stem}_p{q}_s"] = round(v, 4)
    return m


def caught_up_at(p99s, after_s, limit_ms):
    """The first second ≥ after_s from which every second's p99 stays below limit_ms to the end."""
    after = [x for x in p99s if x[0] >= after_s]
    if not after:
        return None
    at = None
    for s, p, _ in after:
        if p >= limit_ms:
            at = None
        elif at is None:
            at = s
    return at


class Run:
    """One system's processes for a live run: endpoint(s), processes, sampler. Usage:
    with Run(ctx, system, run_id) as r: r.start(...); ... r.stop() -> measures."""

    def __init__(self, ctx, system, run_id, endpoint_mode="ok"):
        self.ctx, self.system, self.id = ctx, system, run_id
        # Topic names allow letters, digits, '.', '_' and '-' only (a system named
        # tidemark@abc1234 by --against has an '@').
        self.tag = re.sub(r"[^A-Za-z0-9.-]", "-", f"{ctx.tag}-{run_id}")
        self.dir = os.path.join(ctx.work, run_id)
        os.makedirs(self.dir, exist_ok=True)
        self.endpoint_mode = endpoint_mode
        self.endpoints, self.procs, self.ports, self.logs = [], [], [], []
        self.sampler = None
        self.kind = system["system"]
        # By name first: with --against both systems are tidemark, each its own binary.
        self.sut = ctx.systems.get(system["name"]) or ctx.systems[self.kind]
        self.topology = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                kill9(p)
        if self.sampler:
            self.sampler.stop()
        for e in self.endpoints:
            e.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.ctx.broker.delete_topics(f"{self.tag}.*", wait=False)

    def endpoint(self):
        e = Endpoint(self.endpoint_mode)
        self.endpoints.append(e)
        return e

    def make_topics(self, partitions, url, overrides=None):
        self.topology = tm(self.ctx).topology(os.path.join(self.dir, "t.toml"), self.tag, partitions, url, rule(self.ctx), overrides=overrides)
        tm(self.ctx).topics(self.ctx.broker.bootstrap, self.topology)

    def start_one(self, k, url, extra=(), env=None, log_filter=None):
        """Starts process k (0, 1, ...) of this run's system, posting to url; returns its Popen."""
        log_path = os.path.join(self.dir, f"p{k}.log")
        self.logs.append(log_path)
        if self.kind == "tidemark":
            if self.topology is None or k > 0 and url != self.endpoints[0].url:
                path = os.path.join(self.dir, f"t{k}.toml")
                tm(self.ctx).topology(path, self.tag, self.ctx.p.get("partitions", 4), url, rule(self.ctx), overrides=self.ctx.p.get("topology"))
            else:
                path = self.topology
            port = free_port()
            p = self.sut.start(path, os.path.join(self.dir, f"state{k}"), self.tag, port, log_path, self.ctx.broker.bootstrap, extra=extra, env=env,
                               log_filter=log_filter)
            self.ports.append(port)
            Tidemark.wait_ready(p, port, log_path)
        else:
            p = self.sut.start(self.tag, f"{self.tag}.orders", os.path.join(self.dir, f"state{k}"), url, log_path, self.ctx.broker.bootstrap,
                               self.ctx.p.get("partitions", 4), rule(self.ctx), latency_out=os.path.join(self.dir, f"lat{k}.jsonl"), extra=extra)
            self.ports.append(None)
        self.procs.append(p)
        return p

    def sample(self, interval):
        pids = {f"p{k}": (lambda k=k: self.procs[k].pid if self.procs[k].poll() is None else None) for k in range(len(self.procs))}
        urls = {f"p{k}": f"http://127.0.0.1:{port}/metrics" for k, port in enumerate(self.ports) if port}
        self.sampler = Sampler(interval, pids=pids, urls=urls).start()

    def histograms(self):
        """Every tidemark process's latency histograms now (scrape(..., wanted=HISTOGRAMS) each, None if it did not answer)."""
        return [scrape(f"http://127.0.0.1:{port}/metrics", wanted=HISTOGRAMS) for port in self.ports if port]

    def p99s(self, k=0):
        if self.kind == "tidemark":
            return per_second_p99(self.endpoints[k].snapshot())
        return ks_per_second_p99(os.path.join(self.dir, f"lat{k}.jsonl"))

    def check_alive(self):
        for k, p in enumerate(self.procs):
            if p.poll() is not None:
                raise BenchError(f"{self.system['name']} process {k} of run {self.id} exited with {p.returncode}; its log {self.logs[k]}:\n{tail(self.logs[k])}")

    def keep_raw(self, samples=None, extra=None):
        """Copies what a later reader needs into the series' raw folder (ignored by git)."""
        raw = os.path.join(self.ctx.raw, self.id)
        os.makedirs(raw, exist_ok=True)
        for lp in self.logs:
            shutil.copy(lp, raw)
        for k, e in enumerate(self.endpoints):
            with open(os.path.join(raw, f"actions{k}.jsonl"), "w") as f:
                for t, key, src, sku in e.snapshot():
                    f.write(json.dumps({"t": t, "key": key, "src": src, "sku": sku}) + "\n")
        if samples is not None:
            with open(os.path.join(raw, "samples.jsonl"), "w") as f:
                for s in samples:
                    f.write(json.dumps(s) + "\n")
        for name in os.listdir(self.dir):
            if name.startswith("lat"):
                shutil.copy(os.path.join(self.dir, name), raw)
        if extra:
            with open(os.path.join(raw, "extra.json"), "w") as f:
                json.dump(extra, f)


def gen_summary(path):
    """The JSON summary `tidemark gen` prints last on stdout (records, orders_records, ...)."""
    for line in reversed(open(path).read().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise BenchError(f"the generator printed no summary line ({path}):\n{tail(path)}")


def gen_wait(proc, what, timeout):
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise BenchError(f"{what}: the generator did not finish within {timeout} s")
    if rc != 0:
        raise BenchError(f"{what}: the generator exited with {rc}")


# ---------------------------------------------------------------- drain / capacity
class Drain:
    """A pre-generated log (events records, shared by every run), drained from an empty state
    by each run: tidemark `run --exit-at-end`, Kafka Streams `--exit-at-end`. Per run: wall (or
    KS's drained_ms), events/s, CPU s and µs per event, peak RSS, action keys (checked); the
    broker's CPU per event over the run (its JVM shares the host: the system under test's µs
    plus the broker's are what the host's cores must hold at a rate) and the host's busy CPU
    per event (every process, the harness included; for Kafka Streams both count its start-up,
    which its drained_ms leaves out).
    Variants: instances = 2 (static ownership, --replicas 2), pin_core (taskset; the broker is
    moved to the other cores for the run)."""

    def setup(self, ctx):
        p = ctx.p
        self.orders = f"{ctx.tag}.orders"
        topo = tm(ctx).topology(os.path.join(ctx.work, "gen.toml"), ctx.tag, p.get("partitions", 4), "http://127.0.0.1:1/actions", rule(ctx))
        tm(ctx).topics(ctx.broker.bootstrap, topo)
        log(f"drain: generating {p['events']} events of ~{p.get('event_bytes', 1024)} B into {self.orders}")
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1800))
        gen_log = os.path.join(ctx.work, "gen.log")
        g = tm(ctx).gen(ctx.broker.bootstrap, ctx.tag, p["events"], 20000, start=start, event_bytes=p.get("event_bytes", 1024), log_path=gen_log)
        gen_wait(g, "drain input", 3600)
        self.events = gen_summary(gen_log)["orders_records"]

    def run(self, ctx, system, run_id):
        instances = int(system.get("instances", 1))
        with Run(ctx, system, run_id) as r:
            ep = r.endpoint()
            broker_before, host_before = proc_stat(ctx.broker.pid() or -1), host_ticks()
            t0 = time.time()
            if r.kind == "tidemark":
                # The run's own binary writes and checks its topology (with --against, an
                # older build may not read today's example).
                path = r.sut.topology(os.path.join(r.dir, "t.toml"), r.tag, ctx.p.get("partitions", 4), ep.url, rule(ctx), orders=self.orders)
                r.sut.topics(ctx.broker.bootstrap, path)
                pin = ctx.p.get("pin_core")
                broker_pid = ctx.broker.pid()
                if pin is not None and broker_pid:
                    others = ",".join(str(c) for c in range(os.cpu_count()) if c != pin) or str(pin)
                    subprocess.run(["taskset", "-apc", others, str(broker_pid)], capture_output=True)
                procs = []
                t0 = time.time()
                for k in range(instances):
                    extra = ["--replicas", str(instances), "--ordinal", str(k)] if instances > 1 else []
                    cmd_prefix = ["taskset", "-c", str(pin)] if pin is not None else []
                    lp = os.path.join(r.dir, f"p{k}.log")
                    r.logs.append(lp)
                    e = dict(os.environ, TIDEMARK_WEBHOOK_SECRET="bench-signing-key")
                    procs.append(subprocess.Popen(cmd_prefix + [r.sut.bin, "run", "--bootstrap", ctx.broker.bootstrap, "--topology", path,
                                                  "--state-dir", os.path.join(r.dir, f"state{k}"), "--group", r.tag, "--exit-at-end",
                                                  "--log", "warn", *extra], stdout=subprocess.DEVNULL, stderr=open(lp, "w"), env=e))
                cpu = rss = 0.0
                for k, pr in enumerate(procs):
                    rc, c, m = wait_rusage(pr)
                    if rc != 0:
                        raise BenchError(f"tidemark run --exit-at-end (run {run_id}, process {k}) exited with {rc}; its log {r.logs[k]}:\n{tail(r.logs[k])}")
                    cpu += c
                    rss = max(rss, m)
                wall = time.time() - t0
                if pin is not None and broker_pid:
                    subprocess.run(["taskset", "-apc", f"0-{os.cpu_count() - 1}", str(broker_pid)], capture_output=True)
            else:
                out = os.path.join(r.dir, "ks.out")
                lp = os.path.join(r.dir, "p0.log")
                r.logs.append(lp)
                extra = ["--exit-at-end"]
                p = r.sut.start(r.tag, self.orders, os.path.join(r.dir, "state0"), ep.url, lp, ctx.broker.bootstrap, ctx.p.get("partitions", 4), rule(ctx),
                                extra=extra, stdout=open(out, "w"))
                rc = p.wait(3600)
                line = [x for x in open(out).read().splitlines() if x.startswith("{") and '"drained_ms"' in x]
                if rc != 0 or not line:
                    raise BenchError(f"Kafka Streams --exit-at-end (run {run_id}) exited with {rc} without its result line; log {lp}:\n{tail(lp)}")
                res = json.loads(line[-1])
                wall, cpu, rss = res["drained_ms"] / 1000, res["cpu_ms"] / 1000, res["peak_rss_kb"]
            broker_after, host_after = proc_stat(ctx.broker.pid() or -1), host_ticks()
            posts = ep.snapshot()
            digest, n = keys_digest(posts)
            r.keep_raw()
            ev = self.events
            out = {"wall_s": round(wall, 2), "events_per_s": round(ev / wall), "cpu_s": round(cpu, 2), "cpu_us_per_event": round(cpu / ev * 1e6, 2),
                   "peak_rss_mb": round(rss / 1024, 1), "posts": len(posts), "distinct_keys": n, "resent": len(posts) - n,
                   "keys_sha256": digest, "outputs_ok": n > 0, "outputs_problem": "no action was POSTed"}
            if broker_before and broker_after:
                out["broker_cpu_us_per_event"] = round((broker_after["cpu_s"] - broker_before["cpu_s"]) / ev * 1e6, 2)
            out["host_busy_us_per_event"] = round((host_after[0] - host_before[0]) / CLK_TCK / ev * 1e6, 2)
            return out

    def series(self, ctx, runs):
        return {}

    def teardown(self, ctx):
        ctx.broker.delete_topics(f"{ctx.tag}.*")


# ---------------------------------------------------------------- paced input: latency, spike, catch-up, recovery, soak, pending memory
class Paced:
    """A system under paced input: `tidemark gen --paced` at base_rate for pre_s + spike_s + post_s
    (× factor during the spike, `--spike`), optionally after a backlog of backlog events (catch-up)
    and/or a history of history events (dedup entries; recovery). kill_at_s: SIGKILL at that
    second of the input, restarted at once (recovery). Per run: pooled and per-second
    append→2xx p99 (tidemark: the endpoint's receive time − the source append time header;
    Kafka Streams: its own --latency-out), peak per-second p99, the reference moment (spike end,
    start, kill) → caught up (every later second's p99 < caught_up_ms), kill → first action,
    RSS start/end/max and its slope after settle_s, state directory size, gauges."""

    def setup(self, ctx):
        pass

    def teardown(self, ctx):
        pass

    def run(self, ctx, system, run_id):
        p = ctx.p
        base, pre, spk, post = p["base_rate"], p.get("pre_s", 0), p.get("spike_s", 0), p.get("post_s", 0)
        factor = p.get("factor", 1)
        secs = pre + spk + post
        events = int(base * pre + base * factor * spk + base * post)
        parts = p.get("partitions", 4)
        with Run(ctx, system, run_id, endpoint_mode=p.get("endpoint", "ok")) as r:
            ep = r.endpoint()
            r.make_topics(parts, ep.url, overrides=p.get("topology"))
            if p.get("log_retention_ms"):
                for topic in ("orders", "inventory", "sku-repartition"):
                    ctx.broker.retention(f"{r.tag}.{topic}", p["log_retention_ms"])
            gen = tm(ctx)
            boot = ctx.broker.bootstrap
            if p.get("history"):
                log(f"  history: {p['history']} events (dedup entries) appended before the run")
                start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
                gen_wait(gen.gen(boot, r.tag, p["history"], 50000, seed=7, start=start, event_bytes=p.get("event_bytes", 256), skus=p.get("skus")), "history", 3600)
            if p.get("backlog"):
                n = p["backlog"]
                log(f"  backlog: {n} events ({n / base:.0f} s of input at {base}/s) appended before the processor starts")
                start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - n / base))
                gen_wait(gen.gen(boot, r.tag, n, base, seed=3, start=start, event_bytes=p.get("event_bytes", 256), skus=p.get("skus")), "backlog", 3600)
            extra = list(p.get("tidemark_args", [])) if r.kind == "tidemark" else list(p.get("ks_args", []))
            t_start = time.time()
            for k in range(int(p.get("processes", 1))):
                r.start_one(k, ep.url, extra=extra)
            if r.kind != "tidemark":
                time.sleep(p.get("ks_settle_s", 10))
            r.sample(p.get("sample_every_s", 1))
            t_gen = time.time()
            spike = f"{pre}:{spk}:{factor}" if spk else None
            g = gen.gen(boot, r.tag, events, base, seed=11, paced=True, event_bytes=p.get("event_bytes", 256), skus=p.get("skus"), spike=spike,
                        log_path=os.path.join(r.dir, "gen.log"))
            kill_at = p.get("kill_at_s")
            t_kill = None
            hist0 = None  # the histograms when the measured window starts (measure_from_s)
            last_progress = time.time()
            while g.poll() is None:
                time.sleep(0.2)
                now = time.time()
                if hist0 is None and now - t_gen >= p.get("measure_from_s", 10):
                    hist0 = r.histograms()
                if kill_at is not None and t_kill is None and now - t_gen >= kill_at:
                    log(f"  kill -9 at {kill_at} s of the input; restarting at once")
                    kill9(r.procs[0])
                    t_kill = time.time()
                    r.procs[0] = r.sut.start(r.topology, os.path.join(r.dir, "state0"), r.tag, r.ports[0], r.logs[0], boot, extra=extra) \
                        if r.kind == "tidemark" else r.sut.start(r.tag, f"{r.tag}.orders", os.path.join(r.dir, "state0"), ep.url, r.logs[0], boot, parts,
                                                                 rule(ctx), latency_out=os.path.join(r.dir, "lat0.jsonl"), extra=extra)
                if kill_at is None or t_kill is not None and now - t_kill > 30:
                    r.check_alive()
                if now - last_progress >= 30:
                    last_progress = now
                    s = r.sampler.samples[-1] if r.sampler.samples else {}
                    ms = [mm for mm in (s.get("metrics") or {}).values() if mm]
                    rss = " ".join(f"{k} {(v or {}).get('rss_kb', 0) // 1024}" for k, v in sorted((s.get("proc") or {}).items()))
                    rows = sum(mm.get("outbox_pending", 0) + mm.get("outbox_deferred_total", 0) for mm in ms)
                    waiting = sum(mm.get("standby_rows_waiting", 0) for mm in ms)
                    log(f"  {run_id}: {now - t_gen:.0f}/{secs} s of input; posts {len(ep.posts)}, refused {ep.refused}, RSS (MB) {rss}"
                        + (f", pending rows {rows:.0f}, standby rows waiting {waiting:.0f}" if ms else ""))
                if now - t_gen > secs + 600:
                    g.kill()
                    raise BenchError(f"run {run_id}: the paced generator ran {secs + 600} s for {secs} s of input")
            if g.returncode != 0:
                raise BenchError(f"run {run_id}: the generator exited with {g.returncode}; {os.path.join(r.dir, 'gen.log')}:\n{tail(os.path.join(r.dir, 'gen.log'))}")
            t_end = time.time()
            hists = (hist0, r.histograms()) if hist0 is not None else ([], [])
            time.sleep(p.get("drain_s", 5))
            r.check_alive()
            samples = r.sampler.stop()
            r.sampler = None
            state_bytes = du_bytes(os.path.join(r.dir, "state0"))
            for pr in r.procs:
                stop(pr)
            m = self.measures(ctx, r, ep, samples, t_start, t_gen, t_end, t_kill, secs, hists)
            m["state_dir_mb"] = round(state_bytes / 2**20, 1)
            r.keep_raw(samples, extra={"t_start": t_start, "t_gen": t_gen, "t_end": t_end, "t_kill": t_kill})
            return m

    def measures(self, ctx, r, ep, samples, t_start, t_gen, t_end, t_kill, secs, hists=([], [])):
        p = ctx.p
        limit = p.get("caught_up_ms", 1000)
        posts = ep.snapshot()
        p99s = r.p99s()
        m = {"posts": len(posts), "refused": ep.refused}
        if r.endpoint_mode == "ok":
            m["outputs_ok"] = len(posts) > 0
            m["outputs_problem"] = "no action was POSTed"
        lo = t_gen + p.get("measure_from_s", 10)
        window = [x for x in p99s if lo <= x[0] <= t_end]
        if window:
            m["p99_per_second_median_s"] = round(median([x[1] for x in window]) / 1000, 3)
            m["p99_per_second_max_s"] = round(max(x[1] for x in window) / 1000, 3)
        if r.kind == "tidemark":
            lat = [t - src for t, _, src, _ in posts if src is not None and lo * 1000 <= t <= t_end * 1000]
            if lat:
                m["p50_s"] = round(percentile(lat, 50) / 1000, 3)
                m["p99_s"] = round(percentile(lat, 99) / 1000, 3)
            # tidemark's own segments over the same window (measure_from_s → input end).
            m.update(histogram_measures(*hists))
        else:
            m["p99_s"] = m.get("p99_per_second_median_s")
        ref = {"spike_end": t_gen + p.get("pre_s", 0) + p.get("spike_s", 0), "start": t_start, "kill": t_kill}.get(p.get("caught_up_from", "spike_end"))
        if ref:
            at = caught_up_at(p99s, int(ref), limit)
            m["caught_up_s"] = round(at - ref, 1) if at is not None else None
            if p.get("backlog") and p.get("caught_up_from") == "start" and at is not None and at > ref:
                # What the processor worked off per second until caught up: the backlog plus
                # the live input that came meanwhile (SPEC's 12 M + 20k/s in 90 s: 153k/s).
                m["net_events_per_s"] = round(p["backlog"] / (at - ref) + p["base_rate"])
            if p.get("spike_s"):
                m["peak_p99_s"] = round(max((x[1] for x in p99s if x[0] >= t_gen), default=0) / 1000, 3)
        if t_kill:
            first = min((t for t, *_ in posts if t / 1000 > t_kill), default=None)
            m["first_action_after_kill_s"] = round(first / 1000 - t_kill, 2) if first else None
        # Process memory (every process: p0 unprefixed, p1 as "p1.rss_*") and gauges (summed).
        settle = t_gen + p.get("settle_s", 0)
        for k in range(len(r.procs)):
            name, prefix = f"p{k}", "" if k == 0 else f"p{k}."
            rss = [(s["t"], s["proc"][name]["rss_kb"] / 1024) for s in samples if (s["proc"].get(name) or {}).get("rss_kb")]
            after = [x for x in rss if x[0] >= settle] or rss
            if after:
                m[prefix + "rss_start_mb"] = round(after[0][1], 1)
                m[prefix + "rss_end_mb"] = round(after[-1][1], 1)
                m[prefix + "rss_max_mb"] = round(max(x[1] for x in after), 1)
                m[prefix + "rss_growth_mb"] = round(after[-1][1] - after[0][1], 1)
                m[prefix + "rss_growth_pct"] = round(100 * (after[-1][1] - after[0][1]) / after[0][1], 1)
                m[prefix + "rss_peak_rise_pct"] = round(100 * (max(x[1] for x in after) - after[0][1]) / after[0][1], 1)
                # The envelope: the peak of the second half after settle_s against the first
                # half's. A bounded sawtooth (memtables filling and flushing) leaves it flat; a
                # heap that grows with pending rows raises it.
                mid = (after[0][0] + after[-1][0]) / 2
                first, second = [v for t, v in after if t < mid], [v for t, v in after if t >= mid]
                if first and second:
                    m[prefix + "rss_envelope_rise_pct"] = round(100 * (max(second) - max(first)) / max(first), 1)
                if len(after) > 2 and after[-1][0] > after[0][0]:
                    m[prefix + "rss_slope_mb_per_h"] = round(slope(after) * 3600, 1)
                    mean = sum(v for _, v in after) / len(after)
                    m[prefix + "rss_slope_pct_per_h"] = round(100 * slope(after) * 3600 / mean, 2)
        rises = [m[k] for k in m if k.endswith("rss_peak_rise_pct")]
        if rises:
            m["rss_peak_rise_pct_max"] = max(rises)
        envelopes = [m[k] for k in m if k.endswith("rss_envelope_rise_pct")]
        if envelopes:
            m["rss_envelope_rise_pct_max"] = max(envelopes)
        # Pending rows: tidemark_outbox_pending counts the deliveries under way, at most 2,048
        # (docs/operations.md); rows committed beyond that stay in the outbox and count in
        # tidemark_outbox_deferred_total once each. Nothing is delivered or expires while the
        # endpoint refuses, so their sum is the outbox's pending rows.
        rows = [(s["t"], sum((mm or {}).get("outbox_pending", 0) + (mm or {}).get("outbox_deferred_total", 0) for mm in s["metrics"].values()))
                for s in samples if any(mm for mm in s["metrics"].values())]
        if rows:
            m["pending_rows_max"] = max(v for _, v in rows)
            m["pending_rows_end"] = rows[-1][1]
        for gauge in ("outbox_pending", "outbox_deferred_total", "standby_rows_waiting"):
            series = [(s["t"], sum((mm or {}).get(gauge, 0) for mm in s["metrics"].values())) for s in samples if any(mm for mm in s["metrics"].values())]
            if series:
                m[f"{gauge}_max"] = max(v for _, v in series)
                m[f"{gauge}_end"] = series[-1][1]
        ages = [max([v for k, v in (mm or {}).items() if k.startswith("backlog_age_seconds")] or [0]) for s in samples for mm in s["metrics"].values()]
        if ages:
            m["backlog_age_max_s"] = round(max(ages), 2)
        cpu = [((s["proc"].get("p0") or {}).get("cpu_s")) for s in samples]
        cpu = [c for c in cpu if c is not None]
        if len(cpu) > 1:
            m["cpu_s"] = round(cpu[-1] - cpu[0], 1)
        return m

    def series(self, ctx, runs):
        """RSS and the gauges over time, per measured run, from the raw samples."""
        out = {}
        for run in runs:
            if run["phase"] != "measured":
                continue
            path = os.path.join(ctx.raw, run["run"], "samples.jsonl")
            if not os.path.exists(path):
                continue
            ss = [json.loads(x) for x in open(path)]
            if not ss:
                continue
            t0 = ss[0]["t"]
            procs = sorted(ss[0]["proc"])
            for k in ctx.p.get("plot", ["rss"]):
                for proc in procs if k == "rss" else [None]:
                    xs, ys = [], []
                    for s in ss:
                        if k == "rss":
                            v = (s["proc"].get(proc) or {}).get("rss_kb")
                            v = v / 1024 if v else None
                        else:
                            v = sum((mm or {}).get(k, 0) for mm in s["metrics"].values()) if any(s["metrics"].values()) else None
                        if v is not None:
                            xs.append(s["t"] - t0)
                            ys.append(v)
                    title = "RSS (MB) over seconds" if k == "rss" else f"tidemark_{k} (all processes) over seconds"
                    out.setdefault(title, {})[run["run"] + (f" {proc}" if proc else "")] = (xs, ys)
        return out


def slope(points):
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    d = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / d if d else 0.0


# ---------------------------------------------------------------- failover
class Failover(Paced):
    """`processes` (default 2) processes of one system, each posting to its own endpoint, under
    paced input; at pre_s the one that posted most is SIGKILLed for good. Per run: kill → a
    survivor's first action for an SKU the killed process had posted (an SKU it owned), → caught
    up (the survivors' per-second p99 < caught_up_ms to the end), and CPU cores per process
    before the kill (from settle to kill; median and max over the processes). A system's own
    `args` (scenario `systems`) are added to tidemark_args / ks_args.

    killed_sku_action_delay_max_s: the deadline's view of the failover: the latest append→2xx
    (the triggering record's append to the endpoint's receipt) over the killed SKUs' actions
    the survivors post after the kill. kill_second_of_minute: where in the rule's one-minute
    windows the kill fell.

    kill_second (default -1: whenever pre_s ends): the kill lands at that second of a minute.
    A velocity rule's actions come in bursts: in each one-minute window an SKU fires once,
    when its units pass min_units, most in the window's first half; by its last ~15 s nearly
    every SKU has fired and nothing is due. A failover that ends there has no action to take
    until the next window's burst, and its "first action" measures the phase (bench/README.md,
    failover-3). Killed at second 10 the survivors take over at ~17, inside the burst."""

    def run(self, ctx, system, run_id):
        p = ctx.p
        base, secs, kill_at = p["base_rate"], p["pre_s"] + p["post_s"], p["pre_s"]
        n = int(p.get("processes", 2))
        with Run(ctx, system, run_id) as r:
            eps = [r.endpoint() for _ in range(n)]
            r.make_topics(p.get("partitions", 4), eps[0].url)
            extra = list(p.get("tidemark_args", [])) if r.kind == "tidemark" else list(p.get("ks_args", []))
            extra += list(system.get("args", []))
            if r.kind == "tidemark" and p.get("snapshots"):
                extra += ["--snapshot-dir", os.path.join(r.dir, "snapshots"), "--snapshot-interval", p.get("snapshot_interval", "10s")]
            for k, e in enumerate(eps):
                # instance_ids: static members named tm-<k> (--standbys N places copies by them).
                own = ["--instance-id", f"tm-{k}"] if r.kind == "tidemark" and p.get("instance_ids") else []
                r.start_one(k, e.url, extra=extra + own)
            if r.kind == "tidemark":
                wait_owned(r, p.get("settle_s", 10) + 60)
            time.sleep(p.get("settle_s", 10))
            phase = p.get("kill_second", -1)
            if phase >= 0:
                # The input starts so that the kill lands at that second of a minute (the
                # rule's windows are minutes of event time, which paced input keeps at the
                # wall clock); see the docstring.
                time.sleep((phase - (time.time() + kill_at)) % 60)
            r.sample(1)
            t_gen = time.time()
            g = tm(ctx).gen(ctx.broker.bootstrap, r.tag, int(base * secs), base, seed=11, paced=True, event_bytes=p.get("event_bytes", 256), skus=p.get("skus"))
            while g.poll() is None and time.time() - t_gen < kill_at:
                time.sleep(0.2)
            r.check_alive()
            cpu_before = proc_cpu(r.sampler.samples)
            # The victim: the process that derived most actions (the group may give one process
            # all SKU partitions and another only orders/inventory ones); the last on a tie.
            victim = max(range(n), key=lambda k: (len(eps[k].posts), k))
            survivors = [k for k in range(n) if k != victim]
            log(f"  kill -9 of process {victim} at {kill_at} s, for good")
            kill9(r.procs[victim])
            t_kill = time.time()
            cpu = proc_cpu_rate(cpu_before)
            gen_wait(g, f"run {run_id}", secs + 600)
            time.sleep(p.get("drain_s", 5))
            samples = r.sampler.stop()
            r.sampler = None
            for k in survivors:
                stop(r.procs[k])
            ev = r.endpoints[victim]
            owned = {sku for t, _, _, sku in ev.snapshot() if t / 1000 < t_kill and sku}
            after = [(t, src) for k in survivors for t, _, src, sku in r.endpoints[k].snapshot() if t / 1000 > t_kill and sku in owned]
            first = min((t for t, _ in after), default=None)
            # The deadline's view: how late a killed SKU's action came, counted from the append
            # of the record that triggered it (append→2xx), over every such action.
            delays = [(t - src) / 1000 for t, src in after if src]
            m = {"posts": sum(len(e.posts) for e in eps), "skus_of_killed": len(owned),
                 "kill_second_of_minute": round(t_kill % 60, 1),
                 "first_action_of_killed_sku_s": round(first / 1000 - t_kill, 2) if first else None,
                 "killed_sku_action_delay_max_s": round(max(delays), 2) if delays else None,
                 "outputs_ok": bool(owned), "outputs_problem": "the killed process had posted no action before the kill"}
            if cpu:
                m["cpu_cores_per_process_median"] = round(median(list(cpu.values())), 3)
                m["cpu_cores_per_process_max"] = round(max(cpu.values()), 3)
                m["cpu_cores_total"] = round(sum(cpu.values()), 3)
            # Caught up: the latest second from which every survivor stays below the limit.
            posting = [k for k in survivors if any(t / 1000 > t_kill for t, _, _, _ in r.endpoints[k].snapshot())]
            ats = [caught_up_at(r.p99s(k), int(t_kill), p.get("caught_up_ms", 1000)) for k in posting]
            at = max(ats) if ats and all(a is not None for a in ats) else None
            m["caught_up_s"] = round(at - t_kill, 1) if at is not None else None
            r.keep_raw(samples, extra={"t_gen": t_gen, "t_kill": t_kill})
            return m


def proc_cpu(samples):
    """[(t, {proc: cpu_s})] of the sampler's samples so far (live processes only)."""
    return [(s["t"], {k: v["cpu_s"] for k, v in (s.get("proc") or {}).items() if v and v.get("cpu_s") is not None}) for s in samples]


def proc_cpu_rate(points):
    """CPU cores per process between the first and the last sample that both saw it."""
    out = {}
    if len(points) < 2:
        return out
    t0, first = points[0]
    t1, last = points[-1]
    for k, c0 in first.items():
        if k in last and t1 > t0:
            out[k] = (last[k] - c0) / (t1 - t0)
    return out


def wait_owned(r, timeout):
    """Waits until every tidemark process of the run owns at least one input partition."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r.check_alive()
        pages = [scrape(f"http://127.0.0.1:{port}/metrics") or {} for port in r.ports]
        owned = [sum(v for k, v in page.items() if k.startswith("partition_owned")) for page in pages]
        if all(o > 0 for o in owned):
            return
        time.sleep(0.5)
    raise BenchError(f"run {r.id}: not every process owns a partition after {timeout} s (the group did not balance)")


# ---------------------------------------------------------------- batch memory
class BatchMemory:
    """`tidemark batch close` of one business day over a pre-generated log (events records,
    event times on 2026-11-28), sampled every 5 s. Per run: max RSS (wait4), wall, events/s, the
    close manifest's checksum (the output check: the same for every run)."""

    def setup(self, ctx):
        p = ctx.p
        self.topology = tm(ctx).topology(os.path.join(ctx.work, "t.toml"), ctx.tag, p.get("partitions", 4), "http://127.0.0.1:1/actions", rule(ctx))
        tm(ctx).topics(ctx.broker.bootstrap, self.topology)
        log(f"batch memory: generating {p['events']} events into {ctx.tag}.orders")
        gen_wait(tm(ctx).gen(ctx.broker.bootstrap, ctx.tag, p["events"], 20000, seed=42, start="2026-11-28T00:00:00Z", event_bytes=p.get("event_bytes", 256)),
                 "batch memory input", 3600)
        ends = ctx.broker.end_offsets(f"{ctx.tag}.orders")
        self.to = ",".join(f"{k}:{v}" for k, v in sorted(ends.items()))
        self.frm = ",".join(f"{k}:0" for k in sorted(ends))
        self.events = sum(ends.values())

    def run(self, ctx, system, run_id):
        d = os.path.join(ctx.work, run_id)
        os.makedirs(d, exist_ok=True)
        lp = os.path.join(d, "close.log")
        cmd = [tm(ctx).bin, "batch", "close", "--bootstrap", ctx.broker.bootstrap, "--topology", self.topology, "--business-day", "2026-11-28",
               "--from", self.frm, "--to", self.to, "--log", "warn"]
        t0 = time.time()
        pr = subprocess.Popen(cmd, stdout=open(os.path.join(d, "manifest.json"), "w"), stderr=open(lp, "w"), cwd=d)
        s = Sampler(ctx.p.get("sample_every_s", 5), pids={"close": pr.pid}).start()
        rc, cpu, maxrss = wait_rusage(pr)
        wall = time.time() - t0
        samples = s.stop()
        if rc != 0:
            raise BenchError(f"tidemark batch close (run {run_id}) exited with {rc}; {lp}:\n{tail(lp)}")
        try:
            manifest = json.load(open(os.path.join(d, "manifest.json")))
        except ValueError as e:
            raise BenchError(f"run {run_id}: the close printed no JSON manifest ({os.path.join(d, 'manifest.json')}): {e}")
        raw = os.path.join(ctx.raw, run_id)
        os.makedirs(raw, exist_ok=True)
        shutil.copy(os.path.join(d, "manifest.json"), raw)
        with open(os.path.join(raw, "samples.jsonl"), "w") as f:
            for x in samples:
                f.write(json.dumps(x) + "\n")
        shutil.rmtree(d, ignore_errors=True)
        checksum = manifest.get("checksum", "")
        return {"max_rss_mb": round(maxrss / 1024, 1), "wall_s": round(wall, 2), "events_per_s": round(self.events / wall), "cpu_s": round(cpu, 2),
                "events": self.events, "keys_sha256": hashlib.sha256(checksum.encode()).hexdigest(), "outputs_ok": bool(checksum),
                "outputs_problem": "the manifest has no checksum"}

    def series(self, ctx, runs):
        out = {}
        for run in runs:
            path = os.path.join(ctx.raw, run["run"], "samples.jsonl")
            if run["phase"] == "measured" and os.path.exists(path):
                ss = [json.loads(x) for x in open(path)]
                pts = [(x["t"] - ss[0]["t"], x["proc"]["close"]["rss_kb"] / 1024) for x in ss if x["proc"].get("close")]
                out.setdefault("RSS of the close (MB) over seconds", {})[run["run"]] = ([a for a, _ in pts], [b for _, b in pts])
        return out

    def teardown(self, ctx):
        ctx.broker.delete_topics(f"{ctx.tag}.*")


# ---------------------------------------------------------------- footprint (no broker)
class Footprint:
    """The state crate's footprint benchmarks in report mode (state/benches/dedup_footprint.rs,
    outbox_scan.rs with `--report N DIR`): one JSON object each, no broker. Per run: dedup bytes
    per entry on disk after compaction, lookup ns per id, expiry by compaction; the outbox's
    pending-index scan against a full scan, memory per phase."""

    needs_broker = False

    def setup(self, ctx):
        self.bins = {}
        root = os.path.dirname(ctx.raw_root)
        for bench in ctx.p.get("benches", ["dedup_footprint", "outbox_scan"]):
            self.bins[bench] = prebuilt(root, bench) or self.build(root, bench)

    @staticmethod
    def build(root, bench):
        """`cargo bench --no-run` of one bench; at most 15 min (another cargo, e.g. a `cargo test`
        running the smoke, holds the target directory's lock for as long as it runs)."""
        log(f"footprint: building the {bench} bench (cargo bench --no-run -p tidemark-state)")
        try:
            out = subprocess.run(["cargo", "bench", "--no-run", "-p", "tidemark-state", "--bench", bench, "--message-format=json"],
                                 cwd=root, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise BenchError(f"building the {bench} bench took over 15 min (another cargo holds the lock on the target directory?); "
                             "build it first: cargo bench --no-run -p tidemark-state")
        exe = None
        for line in out.stdout.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("reason") == "compiler-artifact" and msg.get("target", {}).get("name") == bench and msg.get("executable"):
                exe = msg["executable"]
        if out.returncode != 0 or not exe:
            raise BenchError(f"building the {bench} bench of tidemark-state failed:\n" + "\n".join(out.stderr.splitlines()[-15:]))
        return exe

    def run(self, ctx, system, run_id):
        m = {}
        for bench, exe in self.bins.items():
            d = os.path.join(ctx.work, f"{run_id}-{bench}")
            shutil.rmtree(d, ignore_errors=True)
            n = ctx.p[f"{bench}_n"]
            log(f"  {bench} --report {n}")
            # Its progress lines (every 5 M entries) go to our stderr as they come.
            out = subprocess.run([exe, "--report", str(n), d], stdout=subprocess.PIPE, text=True)
            shutil.rmtree(d, ignore_errors=True)
            if out.returncode != 0:
                raise BenchError(f"{exe} --report {n} {d} exited with {out.returncode} (its stderr above)")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            raw = os.path.join(ctx.raw, run_id)
            os.makedirs(raw, exist_ok=True)
            with open(os.path.join(raw, f"{bench}.json"), "w") as f:
                json.dump(r, f, indent=2)
            for k, v in flatten(r, bench).items():
                m[k] = v
        return m

    def series(self, ctx, runs):
        return {}

    def teardown(self, ctx):
        pass


def prebuilt(root, bench):
    """The newest built executable of a state bench ($CARGO_TARGET_DIR/release/deps/<bench>-<hash>)
    if it is newer than every source it is built from (state/, topology/), else None. Saves a
    cargo call (and a wait on cargo's lock) when the bench is already built."""
    from .systems import target_dir
    deps = os.path.join(target_dir(), "release", "deps")
    try:
        cands = [os.path.join(deps, f) for f in os.listdir(deps)
                 if f.startswith(bench + "-") and "." not in f and os.access(os.path.join(deps, f), os.X_OK)]
    except OSError:
        return None
    if not cands:
        return None
    exe = max(cands, key=os.path.getmtime)
    newest_src = 0.0
    for d in ("state", "topology", "Cargo.lock"):
        path = os.path.join(root, d)
        for dirpath, _, files in os.walk(path) if os.path.isdir(path) else [(root, [], [d])]:
            for f in files:
                if f.endswith((".rs", ".toml", ".lock")):
                    newest_src = max(newest_src, os.path.getmtime(os.path.join(dirpath, f)))
    return exe if os.path.getmtime(exe) >= newest_src else None


def flatten(obj, prefix):
    out = {}
    for k, v in obj.items():
        key = f"{prefix}.{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = v
    return out


# ---------------------------------------------------------------- incremental snapshots at volume
class SnapshotVolume:
    """Incremental snapshots at volume (issue 35): a store pre-filled with fill_entries dedup
    entries over orders[0..4] (state/benches/dedup_footprint.rs `--fill`: sorted SST files
    ingested at the bottom level, minutes for 20 GB where the commit path takes hours), then
    `tidemark run` on it with --snapshot-dir (a directory) under paced input at base_rate for
    run_s, and, after a graceful stop, a second process with an empty state that restores every
    partition from the snapshots. Rounds are read back from the manifests (those of one round
    share the consistent point's time, `taken_at_ms`) and the process's `snapshot round` log
    lines (the bytes it uploaded). Per run: the state's bytes; per round after the first, the
    bytes uploaded, the bytes of SST files new since each partition's previous snapshot, their
    ratio and the upload's share of the state; the restore's bytes and bytes/s."""

    def setup(self, ctx):
        root = os.path.dirname(ctx.raw_root)
        self.fill_bin = prebuilt(root, "dedup_footprint") or Footprint.build(root, "dedup_footprint")

    def series(self, ctx, runs):
        return {}

    def teardown(self, ctx):
        ctx.broker.delete_topics(f"{ctx.tag}.*")

    def run(self, ctx, system, run_id):
        p = ctx.p
        base, secs = p["base_rate"], p["run_s"]
        interval = p.get("snapshot_interval_s", 60)
        with Run(ctx, system, run_id) as r:
            e0, e1 = r.endpoint(), r.endpoint()
            r.make_topics(p.get("partitions", 4), e0.url)
            state = os.path.join(r.dir, "state0")
            log(f"  filling {state} with {p['fill_entries']} dedup entries")
            out = subprocess.run([self.fill_bin, "--fill", str(p["fill_entries"]), state], stdout=subprocess.PIPE, text=True)
            if out.returncode != 0:
                raise BenchError(f"{self.fill_bin} --fill exited with {out.returncode} (its stderr above)")
            filled = json.loads(out.stdout.strip().splitlines()[-1])
            log(f"  filled: {filled['sst_bytes'] / 1e9:.1f} GB in {filled['fill_s']:.0f} s")
            snaps = os.path.join(r.dir, "snapshots")
            # A static member that left holds its partitions for the session timeout: the
            # restoring process (another member) waits that long for them.
            extra = ["--snapshot-dir", snaps, "--snapshot-interval", f"{interval}s", "--snapshot-keep", "1000",
                     *p.get("tidemark_args", []), "--instance-id", "vol-0"]
            env = {"TIDEMARK_LOG_FORMAT": "json"}
            r.start_one(0, e0.url, extra=extra, env=env, log_filter="warn,tidemark::snapshot=info")
            r.sample(p.get("sample_every_s", 5))
            t_gen = time.time()
            g = tm(ctx).gen(ctx.broker.bootstrap, r.tag, int(base * secs), base, seed=11, paced=True, event_bytes=p.get("event_bytes", 256),
                            log_path=os.path.join(r.dir, "gen.log"))
            last = time.time()
            while g.poll() is None:
                time.sleep(1)
                r.check_alive()
                if time.time() - last >= 60:
                    last = time.time()
                    log(f"  {run_id}: {last - t_gen:.0f}/{secs} s of input; posts {len(e0.posts)}; snapshot store {du_bytes(snaps) / 1e9:.2f} GB")
                if time.time() - t_gen > secs + 900:
                    g.kill()
                    raise BenchError(f"run {run_id}: the paced generator ran {secs + 900} s for {secs} s of input")
            if g.returncode != 0:
                raise BenchError(f"run {run_id}: the generator exited with {g.returncode}")
            time.sleep(p.get("drain_s", 10))
            samples = r.sampler.stop()
            r.sampler = None
            state_bytes = du_bytes(state)
            stop(r.procs[0], grace_s=600)
            rounds = snapshot_rounds(snaps, r.logs[0])
            # The restore: the state volume lost, a new process with an empty state.
            shutil.rmtree(state, ignore_errors=True)
            t_restore = time.time()
            r.start_one(1, e1.url, extra=[*extra[:-1], "vol-1"], env=env, log_filter="warn,tidemark::snapshot=info")
            want = {f"orders[{k}]" for k in range(p.get("partitions", 4))}
            restored = {}
            deadline = time.time() + p.get("restore_timeout_s", 1800)
            while not want <= set(restored) and time.time() < deadline:
                time.sleep(1)
                if r.procs[1].poll() is not None:
                    raise BenchError(f"run {run_id}: the restoring process exited with {r.procs[1].returncode}; its log {r.logs[1]}:\n{tail(r.logs[1])}")
                restored = {x["partition"]: x for x in json_lines(r.logs[1]) if x.get("message") == "restored from snapshot"}
            restore_wall = time.time() - t_restore
            stop(r.procs[1])
            if not want <= set(restored):
                raise BenchError(f"run {run_id}: {sorted(want - set(restored))} not restored within {p.get('restore_timeout_s', 1800)} s; {r.logs[1]}")
            big = [restored[k] for k in sorted(want)]
            restore_bytes = sum(int(x.get("bytes", 0)) for x in big)
            # The partitions restore in parallel: from the first one's start to the last one's end.
            ends = [iso_ms(x["timestamp"]) for x in big]
            starts = [e - int(x.get("took_ms", 0)) for e, x in zip(ends, big)]
            restore_ms = max(ends) - min(starts) if big else 0
            # Rounds after the first (which uploads the filled state); a round whose new files
            # are under 1 MB (the final round at the stop: a few KB) is reported apart, as its
            # manifests (~1 KB per partition) outweigh them.
            floor = p.get("min_round_bytes", 1e6)
            steady = [x for x in rounds[1:] if x["new_sst"] >= floor]
            small = [x for x in rounds[1:] if x["new_sst"] < floor]
            m = {"fill_entries": filled["entries"], "fill_sst_bytes": filled["sst_bytes"], "state_gb": round(state_bytes / 1e9, 2),
                 "rounds": len(rounds), "first_round_uploaded_gb": round(rounds[0]["uploaded"] / 1e9, 2) if rounds else None,
                 "restore_gb": round(restore_bytes / 1e9, 2), "restore_mb_s": round(restore_bytes / 1e3 / restore_ms, 1) if restore_ms else None,
                 "restore_s": round(restore_ms / 1000, 1), "restore_partition_mb_s_median": round(median(
                     [int(x.get("bytes", 0)) / 1e3 / max(int(x.get("took_ms", 0)), 1) for x in big]), 1) if big else None,
                 "restore_wall_s": round(restore_wall, 1), "posts": len(e0.posts), "small_rounds": len(small),
                 "small_rounds_uploaded_kb_max": round(max((x["uploaded"] for x in small), default=0) / 1e3, 1),
                 "outputs_ok": len(steady) >= 2 and len(e0.posts) > 0,
                 "outputs_problem": f"{len(steady)} rounds after the first (2 needed) and {len(e0.posts)} actions"}
            if steady:
                m["round_uploaded_mb_median"] = round(median([x["uploaded"] for x in steady]) / 1e6, 1)
                m["round_new_sst_mb_median"] = round(median([x["new_sst"] for x in steady]) / 1e6, 1)
                m["round_upload_to_new_sst_max"] = round(max(x["uploaded"] / max(x["new_sst"], 1) for x in steady), 3)
                m["round_upload_to_new_sst_median"] = round(median([x["uploaded"] / max(x["new_sst"], 1) for x in steady]), 3)
                m["round_upload_share_of_state_pct_max"] = round(max(100 * x["uploaded"] / max(x["state"], 1) for x in steady), 2)
                m["steady_upload_to_new_sst_total"] = round(sum(x["uploaded"] for x in steady) / max(sum(x["new_sst"] for x in steady), 1), 4)
            r.keep_raw(samples, extra={"t_gen": t_gen, "rounds": rounds, "restored": big, "filled": filled})
            return m


def iso_ms(ts):
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000


def json_lines(path):
    out = []
    try:
        for line in open(path, errors="replace"):
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def snapshot_rounds(snaps, log_path):
    """Rounds of one process, oldest first: {"at", "partitions", "uploaded" (its `snapshot round`
    log line), "new_sst" (bytes of the files no earlier manifest of the partition named),
    "state" (bytes of the newest manifest of every partition after the round)}."""
    manifests = []
    for dirpath, _, files in os.walk(snaps):
        if "manifest.json" in files:
            m = json.load(open(os.path.join(dirpath, "manifest.json")))
            manifests.append(m)
    by_round = {}
    for m in manifests:
        by_round.setdefault(m["taken_at_ms"], []).append(m)
    logged = [x for x in json_lines(log_path) if x.get("message") == "snapshot round"]
    seen, newest, rounds = {}, {}, []
    for at in sorted(by_round):
        new = 0
        for m in by_round[at]:
            key = (m["source"], m["number"])
            names = {f["file"]: f["bytes"] for f in m["files"]}
            new += sum(b for f, b in names.items() if f not in seen.get(key, {}))
            seen.setdefault(key, {}).update(names)
            newest[key] = sum(names.values())
        rounds.append({"at": at, "partitions": len(by_round[at]), "new_sst": new, "state": sum(newest.values())})
    # A `snapshot round` line is logged at the end of a round that published: its start (the
    # line's time less took_ms) is the consistent point's time, within the time the point takes.
    # Hand-over exports (at the stop) log other lines and are left out.
    for line in logged:
        try:
            end_ms = iso_ms(line["timestamp"])
        except (KeyError, ValueError):
            continue
        start_ms = end_ms - int(line.get("took_ms", 0))
        best = min(rounds, key=lambda rd: abs(rd["at"] - start_ms), default=None)
        if best is not None and abs(best["at"] - start_ms) < 5000:
            best["uploaded"] = int(line.get("bytes", 0))
    return [rd for rd in rounds if "uploaded" in rd]


DRIVERS = {"drain": Drain, "paced": Paced, "failover": Failover, "batch_memory": BatchMemory, "footprint": Footprint,
           "snapshot_volume": SnapshotVolume}
