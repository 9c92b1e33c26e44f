"""Samples processes (/proc) and tidemark's /metrics page every few seconds, in a thread.

One sample: {"t": epoch s, "steal": [steal, total] ticks, "load": 1-min load,
"proc": {name: {"cpu_s", "rss_kb", "hwm_kb"} or None},
"metrics": {name: {metric: value}}} where metric is the Prometheus name without `tidemark_`,
labels joined as name{k=v,...}, for the gauges and counters the scenarios read
(see WANTED) and, per partition, backlog age and lag. The latency histograms (HISTOGRAMS) are
not sampled: a driver scrapes them at the two ends of its measured window (window())."""
import re
import threading
import time
import urllib.request

from .util import host_ticks, loadavg, proc_stat

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABELS = re.compile(r'(\w+)="([^"]*)"')
WANTED = ("tidemark_outbox", "tidemark_standby_rows", "tidemark_backlog_age_seconds", "tidemark_consumer_lag_records",
          "tidemark_records_total", "tidemark_dispatch_total", "tidemark_state_", "tidemark_task_entries", "tidemark_build_info",
          "tidemark_partition_owned", "tidemark_standby_partitions")
# The cumulative buckets of tidemark's latency histograms (src/telemetry/events.rs).
HISTOGRAMS = ("tidemark_latency_seconds_bucket", "tidemark_checkpoint_duration_seconds_bucket", "tidemark_commit_wait_seconds_bucket",
              "tidemark_commit_phase_seconds_bucket")


def parse(page, wanted=WANTED):
    """{metric{labels}: value} of the wanted tidemark_* samples of a /metrics page."""
    out = {}
    for line in page.splitlines():
        if not line or line[0] == "#" or not line.startswith(wanted):
            continue
        m = LINE.match(line)
        if not m:
            continue
        labels = ",".join(f"{k}={v}" for k, v in sorted(LABELS.findall(m.group(2) or "")))
        name = m.group(1)[len("tidemark_"):] + (f"{{{labels}}}" if labels else "")
        try:
            out[name] = float(m.group(3))
        except ValueError:
            pass
    return out


def scrape(url, timeout=2.0, wanted=WANTED):
    try:
        return parse(urllib.request.urlopen(url, timeout=timeout).read().decode(), wanted)
    except Exception:
        return None


def buckets(page):
    """{series: {le: cumulative count}} of one scrape(..., wanted=HISTOGRAMS): series is the
    metric without `tidemark_` and `_bucket`, with its labels but le, e.g.
    "latency_seconds{segment=end_to_end}"."""
    out = {}
    for key, v in (page or {}).items():
        name, _, labels = key.rstrip("}").partition("{")
        ls = dict(x.split("=", 1) for x in labels.split(",") if x)
        le = float(ls.pop("le"))
        series = name[:-len("_bucket")] + ("{" + ",".join(f"{k}={x}" for k, x in ls.items()) + "}" if ls else "")
        out.setdefault(series, {})[le] = v
    return out


def window(before, after):
    """buckets() of the observations between two scrapes of the same processes (lists of
    scrape(..., wanted=HISTOGRAMS), None for a process that did not answer): after − before per
    process, summed over processes; a series whose counts fell (the process restarted) counts
    from zero."""
    out = {}
    for b, a in zip(before, after):
        b = buckets(b)
        for series, counts in buckets(a).items():
            start = b.get(series, {})
            if any(n < start.get(le, 0) for le, n in counts.items()):
                start = {}
            acc = out.setdefault(series, {})
            for le, n in counts.items():
                acc[le] = acc.get(le, 0) + n - start.get(le, 0)
    return out


class Sampler:
    """sampler = Sampler(interval, pids={"name": pid or callable}, urls={"name": url}); .start(); .stop() -> samples."""

    def __init__(self, interval, pids=None, urls=None, sink=None):
        self.interval = interval
        self.pids = pids or {}
        self.urls = urls or {}
        self.samples = []
        self.sink = sink  # optional callable(sample) for progress output
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        nxt = time.time()
        while not self._stop.is_set():
            s = {"t": round(time.time(), 3), "steal": list(host_ticks()[1:]), "load": loadavg(), "proc": {}, "metrics": {}}
            for name, pid in self.pids.items():
                p = pid() if callable(pid) else pid
                s["proc"][name] = proc_stat(p) if p else None
            for name, url in self.urls.items():
                s["metrics"][name] = scrape(url, timeout=max(0.5, self.interval * 0.8))
            self.samples.append(s)
            if self.sink:
                self.sink(s)
            nxt += self.interval
            self._stop.wait(max(0.0, nxt - time.time()))

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.samples
