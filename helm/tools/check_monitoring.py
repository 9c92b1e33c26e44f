#!/usr/bin/env python3
"""Checks of tidemark's Grafana dashboard and Prometheus alert rules (used by helm/test.sh).

  check_monitoring.py dashboard DASHBOARD.json METRIC_NAMES.txt
      The dashboard parses as JSON, has the expected structure (unique panel ids, grid
      positions, a Prometheus query per target), shows backlog age in its top row, only
      references metric names from METRIC_NAMES.txt, and uses every one of them.

  check_monitoring.py rules RENDERED.yaml METRIC_NAMES.txt [--out RULES.yaml]
                        [--out-bare RULES.yaml] [--sanity]
      Extracts the PrometheusRule(s) from `helm template` output, writes their spec as a
      plain Prometheus rules file (for `promtool check rules`), and checks that every
      tidemark_* name in the expressions and annotations is in METRIC_NAMES.txt and that
      label values used for outcome/segment are the ones the selector's metric exports.
      With --sanity, also a structural PromQL check (balanced brackets and quotes, known
      functions, durations), the fallback when promtool is not available. --out-bare writes the rules without
      annotations, for `promtool test rules` (whose expected alerts then need no annotations).

Histogram series (_bucket, _sum, _count) count as their base name. Exit 1 on any failure.
"""
import json
import re
import sys

import yaml

METRIC_RE = re.compile(r"\btidemark_[a-zA-Z0-9_]+")
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
LABEL_VALUES = {
    "outcome": {"delivered", "conflict", "retry", "permanent_failure"},
    "segment": {"append_to_consume", "append_to_release", "consume_to_commit", "commit_to_dispatch", "dispatch_to_ack", "end_to_end"},
}
# Metrics whose label takes other values than LABEL_VALUES says (checked within their selector).
METRIC_LABEL_VALUES = {
    ("tidemark_snapshots_total", "outcome"): {"ok", "failed"},
}
SELECTOR_RE = re.compile(r"(?:\b(tidemark_[a-zA-Z0-9_]+))?\s*\{([^{}]*)\}")
DURATION_RE = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
PROMQL_FUNCS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max",
    "clamp_min", "count_over_time", "delta", "deriv", "exp", "floor", "histogram_quantile",
    "holt_winters", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time",
    "ln", "log2", "log10", "max_over_time", "min_over_time", "predict_linear", "quantile_over_time",
    "rate", "resets", "round", "scalar", "sort", "sort_desc", "sqrt", "stddev_over_time",
    "sum_over_time", "time", "timestamp", "vector", "present_over_time",
    # aggregations
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group",
    # keywords that look like calls
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
}

failures = []


def fail(msg):
    failures.append(msg)
    print(f"  FAIL: {msg}")


def load_names(path):
    names = [l.strip() for l in open(path) if l.strip() and not l.startswith("#")]
    if len(names) != len(set(names)):
        fail(f"{path}: duplicate names")
    return set(names)


def base_name(name, known):
    if name in known:
        return name
    for suf in HIST_SUFFIXES:
        if name.endswith(suf) and name[: -len(suf)] in known:
            return name[: -len(suf)]
    return None


def check_names(texts, known, where):
    used = set()
    for text in texts:
        for m in METRIC_RE.findall(text):
            b = base_name(m, known)
            if b is None:
                fail(f"{where}: metric {m} is not in metric-names.txt")
            else:
                used.add(b)
        # Label values for the labels with a fixed set of values, per selector (its metric's).
        for metric, matchers in SELECTOR_RE.findall(text):
            metric = base_name(metric, known) if metric else None
            for label, default in LABEL_VALUES.items():
                allowed = METRIC_LABEL_VALUES.get((metric, label), default)
                for op, val in re.findall(label + r'\s*(=~|!~|!=|=)\s*"([^"]*)"', matchers):
                    vals = val.split("|") if op in ("=~", "!~") else [val]
                    for v in vals:
                        if v and v not in allowed and not v.startswith("$"):
                            fail(f"{where}: {label}={v!r} is not an exported value of {metric or 'this selector'} ({sorted(allowed)})")
    return used


def strip_strings(expr):
    """Removes quoted strings so that brackets inside them are ignored."""
    return re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|`[^`]*`', '""', expr)


def promql_sanity(expr, where):
    s = strip_strings(expr)
    if s.count('"') % 2:
        fail(f"{where}: unbalanced quotes")
    stack = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in s:
        if ch in "([{":
            stack.append(ch)
        elif ch in ")]}":
            if not stack or stack.pop() != pairs[ch]:
                fail(f"{where}: unbalanced {ch!r} in {expr!r}")
                return
    if stack:
        fail(f"{where}: unclosed {stack[-1]!r} in {expr!r}")
    for fn in re.findall(r"\b([a-z_][a-z0-9_]*)\s*\(", s):
        if fn not in PROMQL_FUNCS:
            fail(f"{where}: unknown function {fn}()")
    for d in re.findall(r"\[([^\]]*)\]", s):
        parts = d.split(":")
        for p in parts:
            if p and not DURATION_RE.match(p.strip()) and p.strip() != "$__rate_interval":
                fail(f"{where}: bad range duration [{d}]")
    for sel in re.findall(r"\{([^}]*)\}", expr):
        for m in re.split(r",\s*", sel.strip()):
            if m and not re.match(r'^[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"[^"]*"$', m.strip()):
                fail(f"{where}: bad label matcher {m!r}")


def cmd_dashboard(path, names_path):
    known = load_names(names_path)
    try:
        dash = json.load(open(path))
    except (OSError, ValueError) as e:
        fail(f"{path}: does not parse as JSON: {e}")
        return
    print(f"  dashboard {dash.get('title')!r} (uid {dash.get('uid')}): {len(dash.get('panels', []))} panels")
    for key in ("uid", "title", "panels", "schemaVersion", "templating"):
        if key not in dash:
            fail(f"{path}: missing top-level {key!r}")
    panels = []
    for p in dash.get("panels", []):
        panels.append(p)
        panels.extend(p.get("panels", []))
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)):
        fail(f"{path}: duplicate panel ids")
    exprs = []
    for p in panels:
        gp = p.get("gridPos", {})
        if not all(k in gp for k in ("x", "y", "w", "h")) or gp.get("x", 0) + gp.get("w", 0) > 24:
            fail(f"panel {p.get('title')!r}: bad gridPos {gp}")
        if p.get("type") == "row":
            continue
        if not p.get("targets"):
            fail(f"panel {p.get('title')!r}: no targets")
        for t in p.get("targets", []):
            e = t.get("expr", "")
            if not e:
                fail(f"panel {p.get('title')!r}: target without expr")
            exprs.append(e)
            promql_sanity(e.replace("$__rate_interval", "5m"), f"panel {p.get('title')!r}")
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        exprs.append(q.get("query", "") if isinstance(q, dict) else str(q or ""))
    # Backlog age front and centre: the top of the dashboard (y <= 1) shows it.
    top = [p for p in panels if p.get("type") != "row" and p.get("gridPos", {}).get("y", 99) <= 1]
    if not top or not any("tidemark_backlog_age_seconds" in t.get("expr", "") for p in top for t in p.get("targets", [])):
        fail("the top row does not show tidemark_backlog_age_seconds")
    big = [p for p in top if any("tidemark_backlog_age_seconds" in t.get("expr", "") for t in p.get("targets", []))
           and p["gridPos"]["w"] >= 12 and p["gridPos"]["h"] >= 8]
    if not big:
        fail("no big (w >= 12, h >= 8) backlog age panel in the top row")
    used = check_names(exprs, known, "dashboard")
    missing = known - used
    if missing:
        fail(f"dashboard does not show: {sorted(missing)}")
    print(f"  dashboard uses {len(used)}/{len(known)} metric names")


def cmd_rules(rendered, names_path, out, out_bare, sanity):
    known = load_names(names_path)
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    prs = [d for d in docs if d.get("kind") == "PrometheusRule"]
    if not prs:
        fail(f"{rendered}: no PrometheusRule rendered")
        return
    groups = []
    for pr in prs:
        if pr.get("apiVersion") != "monitoring.coreos.com/v1":
            fail(f"PrometheusRule {pr['metadata']['name']}: apiVersion {pr.get('apiVersion')}")
        groups.extend(pr["spec"]["groups"])
    texts, alerts = [], []
    for g in groups:
        for r in g.get("rules", []):
            name = r.get("alert") or r.get("record")
            where = f"rule {name}"
            alerts.append(name)
            expr = str(r.get("expr", ""))
            texts.append(expr)
            texts.extend(str(v) for v in (r.get("annotations") or {}).values())
            if r.get("alert"):
                sev = (r.get("labels") or {}).get("severity")
                if sev not in ("info", "warning", "critical"):
                    fail(f"{where}: severity {sev!r}")
                if "summary" not in (r.get("annotations") or {}):
                    fail(f"{where}: no summary annotation")
            if "for" in r and not DURATION_RE.match(str(r["for"])):
                fail(f"{where}: bad for: {r['for']!r}")
            if sanity:
                promql_sanity(expr, where)
    if len(alerts) != len(set(alerts)):
        fail("duplicate alert names")
    used = check_names(texts, known, "alert rules")
    for required in ("tidemark_backlog_age_seconds", "tidemark_outbox_oldest_pending_age_seconds",
                     "tidemark_dead_letters_total", "tidemark_dispatch_total"):
        if required not in used:
            fail(f"no alert on {required}")
    print(f"  {len(alerts)} alerts in {len(groups)} groups: {', '.join(alerts)}")
    if out:
        with open(out, "w") as f:
            yaml.safe_dump({"groups": groups}, f, sort_keys=False)
    if out_bare:
        bare = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]} for g in groups]
        with open(out_bare, "w") as f:
            yaml.safe_dump({"groups": bare}, f, sort_keys=False)


def main(argv):
    if len(argv) < 3 or argv[0] not in ("dashboard", "rules"):
        print(__doc__)
        return 2
    if argv[0] == "dashboard":
        cmd_dashboard(argv[1], argv[2])
    else:
        out = argv[argv.index("--out") + 1] if "--out" in argv else None
        bare = argv[argv.index("--out-bare") + 1] if "--out-bare" in argv else None
        cmd_rules(argv[1], argv[2], out, bare, "--sanity" in argv)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
