"""Small shared pieces: paths, progress output, errors, statistics, processes, /proc readings."""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
# Raw samples, logs and smoke summaries: ignored by git (.gitignore), never committed.
OUT = os.environ.get("BENCH_OUT", os.path.join(BENCH, "out"))
# The committed summary JSON and plot of each scenario's last real run.
RESULTS = os.path.join(BENCH, "results")
CLK_TCK = os.sysconf("SC_CLK_TCK")
_T0 = time.time()


class BenchError(Exception):
    """A failure the harness explains: what went wrong and where (file, command, system)."""


def log(msg):
    print(f"[bench {time.time() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    """{median, min, max, n} of the values that are not None."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4), "n": len(xs)}


def percentile(xs, q):
    """The q-th percentile (0..100, nearest rank) of xs, None if empty."""
    if not xs:
        return None
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(q / 100 * len(xs) + 0.5)) - 1))
    return xs[k]


def histogram_quantile(q, buckets):
    """The q-quantile (0..1) of a histogram {upper bound: cumulative count} (with the +Inf
    bucket) as Prometheus' histogram_quantile computes it: linear inside the bucket the rank
    falls in, the lowest bucket from 0, a rank in the +Inf bucket the highest finite bound;
    None without observations. Checked by `python3 -m doctest bench/harness/util.py`:

    >>> b = {0.1: 10, 0.2: 60, 0.5: 90, 1.0: 100, float("inf"): 100}
    >>> round(histogram_quantile(0.5, b), 6)   # rank 50: the 40th of 50 in (0.1, 0.2]
    0.18
    >>> round(histogram_quantile(0.99, b), 6)  # rank 99: the 9th of 10 in (0.5, 1.0]
    0.95
    >>> round(histogram_quantile(0.05, b), 6)  # in the lowest bucket, from 0
    0.05
    >>> histogram_quantile(0.99, {0.1: 0, 1.0: 50, float("inf"): 100})  # above every finite bound
    1.0
    >>> histogram_quantile(0.5, {0.1: 0, float("inf"): 0}) is None
    True
    """
    bs = sorted(buckets.items())
    if len(bs) < 2 or bs[-1][0] != float("inf") or bs[-1][1] <= 0:
        return None
    rank = q * bs[-1][1]
    lo, below = 0.0, 0
    for le, n in bs:
        n = max(n, below)  # monotonic, as Prometheus makes it
        if n >= rank and n > below:
            if le == float("inf"):
                return lo
            return lo + (le - lo) * (rank - below) / (n - below)
        lo, below = le, n
    return None


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def run(cmd, what, timeout=None, **kw):
    """Runs cmd to completion; a failure raises BenchError naming `what`, the command and its stderr tail."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{what}: no answer within {timeout} s: {' '.join(map(str, cmd))}") from e
    except OSError as e:
        raise BenchError(f"{what}: cannot run {cmd[0]}: {e}") from e
    if p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-15:])
        raise BenchError(f"{what}: `{' '.join(map(str, cmd))}` exited with {p.returncode}:\n{tail}")
    return p.stdout


def stop(proc, grace_s=60):
    """SIGTERM, up to grace_s for a clean exit, then SIGKILL. Returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def kill9(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def proc_stat(pid):
    """{"cpu_s", "rss_kb", "hwm_kb"} of a live pid (children it reaped included in cpu), None if gone."""
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
        cpu = sum(int(x) for x in st[11:15]) / CLK_TCK
        return {"cpu_s": cpu, "rss_kb": rss, "hwm_kb": hwm}
    except (OSError, IndexError, ValueError):
        return None


def host_ticks():
    """(busy, steal, total) ticks of the whole host from /proc/stat."""
    with open("/proc/stat") as f:
        xs = [int(x) for x in f.readline().split()[1:]]
    total = sum(xs)
    return total - xs[3] - xs[4], xs[7] if len(xs) > 7 else 0, total


def steal_pct(a, b):
    """The hypervisor's steal between two host_ticks() readings, in % of this VM's CPU time."""
    d = b[2] - a[2]
    return round(100 * (b[1] - a[1]) / d, 2) if d > 0 else 0.0


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def du_bytes(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = next((int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_gib": round(mem / 2**20, 1), "kernel": os.uname().release}
