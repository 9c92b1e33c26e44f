"""The one reader of Prometheus text pages for the bench scripts (sampler.py, failover.py)."""
import re

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABELS = re.compile(r'(\w+)="([^"]*)"')


def samples(page):
    """Yields (name, labels dict, value) for every sample line of a /metrics page."""
    for line in page.splitlines():
        if not line or line[0] == "#":
            continue
        m = LINE.match(line)
        if not m:
            continue
        yield m.group(1), dict(LABELS.findall(m.group(2) or "")), float(m.group(3))
