"""The systems under test: tidemark at a revision (or a given binary), and the Kafka Streams
baseline (bench/kstreams). Each knows how to identify itself for a summary and how to start."""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

from .util import BENCH, ROOT, BenchError, log, run

BIN_DIR = "/tmp/tidemark-bench-bin"
VERSION_RE = re.compile(r"^tidemark (\S+) \(commit (\S+?)(, dirty)?\)$")
SIGNING_KEY = "bench-signing-key"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout.strip()


def harness_revision():
    """The commit of the harness and scenario files, and whether they differ from it."""
    paths = ["bench/harness", "bench/scenarios", "bench/run"]
    return {"commit": git("log", "-1", "--format=%h", "--", *paths) or "unknown",
            "head": git("rev-parse", "--short", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--", *paths))}


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR", "/var/cache/tidemark/target")


def build_rev(rev):
    """Builds `tidemark` of a committed revision in a detached worktree (the working tree's state
    does not matter) and returns the path of a kept copy, /tmp/tidemark-bench-bin/tidemark-<rev>."""
    short = git("rev-parse", "--short", rev)
    if not short:
        raise BenchError(f"--rev {rev}: not a revision of {ROOT}")
    out = os.path.join(BIN_DIR, f"tidemark-{short}")
    if os.access(out, os.X_OK):
        return out
    os.makedirs(BIN_DIR, exist_ok=True)
    wt = tempfile.mkdtemp(prefix=f"tidemark-build-{short}.")
    try:
        run(["git", "-C", ROOT, "worktree", "add", "--detach", wt, short], f"creating a worktree of {short}")
        log(f"tidemark: building {short} in {wt} (release; progress in cargo's output)")
        # Shared CARGO_TARGET_DIR: cargo judges freshness by mtimes, so sources dated in the future
        # make this build recompile the workspace crates whatever the other checkout built last;
        # afterwards the working tree's sources are touched so its next build recompiles too.
        files = subprocess.run(["git", "-C", wt, "ls-files", "-z"], capture_output=True).stdout.split(b"\0")
        future = time.time() + 86400
        for f in files:
            if f:
                p = os.path.join(wt, f.decode())
                if os.path.isfile(p):
                    os.utime(p, (future, future))
        p = subprocess.run(["nice", "-n", "10", "cargo", "build", "--release", "--bin", "tidemark"], cwd=wt)
        if p.returncode != 0:
            raise BenchError(f"building tidemark {short} in {wt} failed (cargo's output above)")
        shutil.copy2(os.path.join(target_dir(), "release", "tidemark"), out + ".tmp")
        os.replace(out + ".tmp", out)
        now = time.time()
        for f in subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--", "*.rs", "*.toml"], capture_output=True).stdout.split(b"\0"):
            p = os.path.join(ROOT, f.decode())
            if f and os.path.isfile(p):
                os.utime(p, (now, now))
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", wt], capture_output=True)
        shutil.rmtree(wt, ignore_errors=True)
    return out


class Tidemark:
    name = "tidemark"
    opened = 0  # private copies made by this process (two systems may both be tidemark: --against)

    def __init__(self, binary=None, rev=None, allow_dirty=False):
        src = binary or build_rev(rev or "HEAD")
        if not os.access(src, os.X_OK):
            raise BenchError(f"tidemark binary {src}: not an executable file (build it: cargo build --release)")
        # A private copy: a rebuild in the middle of a series cannot swap the binary.
        os.makedirs(BIN_DIR, exist_ok=True)
        Tidemark.opened += 1
        self.bin = os.path.join(BIN_DIR, f"tidemark.run.{os.getpid()}.{Tidemark.opened}")
        shutil.copy2(src, self.bin)
        line = run([self.bin, "--version"], f"asking {src} for its version").strip()
        m = VERSION_RE.match(line)
        self.info = {"path": src, "version": line, "sha256": sha256(self.bin)[:16],
                     "commit": m.group(2) if m else "unknown", "dirty": bool(m and m.group(3))}
        if not allow_dirty and (self.info["dirty"] or self.info["commit"] == "unknown"):
            raise BenchError(f"tidemark binary {src} says `{line}`: built from a dirty tree or an unknown commit. "
                             "Measure a committed build (--rev REV builds one) or pass --allow-dirty")
        log(f"tidemark: {line} ({src})")

    def close(self):
        try:
            os.remove(self.bin)
        except OSError:
            pass

    def topology(self, path, tag, partitions, url, rule, orders=None, overrides=None):
        """The example topology with this run's topics (prefix tag), partitions, only the
        velocity_spike rule (what the Kafka Streams baseline implements) posting to url, and
        `key = value` lines replaced per overrides {key: TOML value}."""
        # The working tree's example; if the binary rejects it, the committed one; if it rejects
        # that too (an older build: a --against baseline), the example of its own commit.
        own = self.info["commit"] if self.info["commit"] != "unknown" else None
        for src in (os.path.join(ROOT, "topology", "examples", "orders.toml"), "HEAD", own):
            if src is None:
                continue
            if os.path.isabs(src):
                text = open(src).read()
            else:
                text = git("show", f"{src}:topology/examples/orders.toml")
                if not text:
                    continue
            t = text.replace('topic = "orders"', f'topic = "{orders or tag + ".orders"}"').replace('topic = "inventory"', f'topic = "{tag}.inventory"')
            t = t.replace('topic = "tidemark.', f'topic = "{tag}.')
            t = re.sub(r"partitions = 4", f"partitions = {partitions}", t)
            t = t.replace('# action_url = "https://inventory.internal/actions"', f'action_url = "{url}"')
            for k, v in (overrides or {}).items():
                t = override(t, k, v)
            t = t[: t.index("[[rules]]")]
            t += (f'[[rules]]\nid = "velocity_spike"\nversion = 1\nmode = "act"\n'
                  f'params = {{ min_units = {rule["min_units"]}, factor = "{rule["factor"]}", baseline_windows = {rule["baseline_windows"]} }}\n')
            with open(path, "w") as f:
                f.write(t)
            if subprocess.run([self.bin, "validate", path], capture_output=True).returncode == 0:
                return path
        raise BenchError(f"topology {path}: `{self.bin} validate` rejects it (and the committed example, and that of its own commit {own})")

    def topics(self, bootstrap, topology):
        run([self.bin, "topics", "--bootstrap", bootstrap, "--topology", topology, "--log", "warn"], f"creating the topics of {topology}")

    def gen(self, bootstrap, tag, events, rate, seed=1, start=None, paced=False, event_bytes=1024, skus=None, spike=None, log_path=None, orders=None):
        """`tidemark gen` into tag.orders: started (paced) and returned as a Popen."""
        cmd = [self.bin, "gen", "--bootstrap", bootstrap, "--orders-topic", orders or f"{tag}.orders", "--inventory-topic", f"{tag}.inventory",
               "--events", str(events), "--rate", str(rate), "--seed", str(seed), "--inventory-every", "0", "--event-bytes", str(event_bytes),
               "--start", start or "now", "--log", "warn"]
        if paced:
            cmd.append("--paced")
        if skus:
            cmd += ["--skus", str(skus)]
        if spike:
            cmd += ["--spike", spike]
        out = open(log_path or os.devnull, "w")
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)

    def start(self, topology, state_dir, group, http_port, log_path, bootstrap, extra=(), env=None, exit_at_end=False, log_filter=None):
        """`tidemark run` in the background (Popen); rules in act mode are signed with a fixed key.
        log_filter: its --log (default $BENCH_TIDEMARK_LOG, else warn)."""
        cmd = [self.bin, "run", "--bootstrap", bootstrap, "--topology", topology, "--state-dir", state_dir, "--group", group,
               "--log", log_filter or os.environ.get("BENCH_TIDEMARK_LOG", "warn"), *extra]
        if http_port:
            cmd += ["--http-addr", f"127.0.0.1:{http_port}", "--backlog-probe-every", "1", "--admin-addr", "off"]
        if exit_at_end:
            cmd.append("--exit-at-end")
        e = dict(os.environ, TIDEMARK_WEBHOOK_SECRET=SIGNING_KEY, **(env or {}))
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log_path, "a"), env=e)

    @staticmethod
    def wait_ready(proc, http_port, log_path, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if proc.poll() is not None:
                raise BenchError(f"tidemark exited with {proc.returncode} before it was ready; its log {log_path}:\n{tail(log_path)}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=1).read()
                return
            except Exception:
                time.sleep(0.2)
        raise BenchError(f"tidemark not ready within {timeout} s; its log {log_path}:\n{tail(log_path)}")


def override(text, key, value):
    """Replaces the line `name = ...` of key ("name", or "section.name" for the line inside the
    TOML table [section]) by `name = value`."""
    section, _, name = key.rpartition(".")
    start, end = 0, len(text)
    if section:
        m = re.search(rf"(?m)^\[{re.escape(section)}\]\s*$", text)
        if not m:
            raise BenchError(f"topology override {key}: no table [{section}] in topology/examples/orders.toml")
        start = m.end()
        nxt = re.search(r"(?m)^\[", text[start:])
        end = start + nxt.start() if nxt else len(text)
    part, n = re.subn(rf"(?m)^{re.escape(name)} = .*$", f"{name} = {value}", text[start:end], count=1)
    if n == 0:
        raise BenchError(f"topology override {key}: no line `{name} = ...` in {'[' + section + ']' if section else 'topology/examples/orders.toml'}")
    return text[:start] + part + text[end:]


class KafkaStreams:
    """The baseline jar (bench/kstreams/build.sh builds it from the tree; refused when
    bench/kstreams has uncommitted changes unless allow_dirty)."""

    def __init__(self, guarantee, jar=None, allow_dirty=False):
        self.name = {"exactly_once_v2": "ks-eos", "at_least_once": "ks-alos"}[guarantee]
        self.guarantee = guarantee
        dirty = bool(git("status", "--porcelain", "--", "bench/kstreams/src", "bench/kstreams/pom.xml"))
        if jar is None:
            log("kafka streams: building the baseline jar (bench/kstreams/build.sh; maven, cached)")
            jar = run(["bash", os.path.join(BENCH, "kstreams", "build.sh")], "building the Kafka Streams baseline (bench/kstreams/build.sh)", timeout=1200).strip()
        if dirty and not allow_dirty:
            raise BenchError("bench/kstreams has uncommitted changes: commit them or pass --allow-dirty")
        self.jar = jar
        self.info = {"path": jar, "sha256": sha256(jar)[:16], "commit": git("log", "-1", "--format=%h", "--", "bench/kstreams") or "unknown",
                     "dirty": dirty, "guarantee": guarantee}

    def close(self):
        pass

    def start(self, app_id, orders, state_dir, url, log_path, bootstrap, partitions, rule, latency_out=None, extra=(), stdout=None, heap="1g"):
        cmd = ["java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-jar", self.jar, "--bootstrap", bootstrap, "--app-id", app_id,
               "--prefix", app_id, "--orders", orders, "--partitions", str(partitions), "--guarantee", self.guarantee, "--threads", "2",
               "--state-dir", state_dir, "--action-url", url, "--min-units", str(rule["min_units"]), "--factor", str(rule["factor"]),
               "--baseline-windows", str(rule["baseline_windows"]), *extra]
        if latency_out:
            cmd += ["--latency-out", latency_out]
        return subprocess.Popen(cmd, stdout=stdout or subprocess.DEVNULL, stderr=open(log_path, "a"))


def tail(path, n=30):
    try:
        return "\n".join(open(path, errors="replace").read().splitlines()[-n:])
    except OSError:
        return "(no log)"
