"""What the A-B-B-A summarisers (spike_ab.py, catchup_ab.py, recovery_ab.py) share: loading the
per-run lines, the result's header, ratios of Kafka Streams over tidemark (of the medians and per
block), the key-set comparison across runs, the raw copies, and the plot pieces (per-second p99
lines with gaps, one dot per run with the median as a bar).

Each summariser keeps what is its own: its measures, its verdicts against its row of issue 16, and
the layout of its figure.
"""
import gzip
import json
import math
import os
import shutil
import statistics

from caught_up import load_jsonl, spread

COLORS = {"tidemark": "tab:blue", "ks-eos": "tab:orange", "ks-alos": "tab:green"}


def color(system):
    return COLORS.get(system, "gray")


def rnd(x, d=2):
    return None if x is None else round(x, d)


def fmt_s(x, digits=1):
    return "never" if x is None else f"{x:.{digits}f} s"


def gz_copy(src, dst, transform=None):
    """src (plain or .gz) to dst gzipped; with transform, line by line as JSON."""
    with gzip.open(dst, "wt") as out:
        if transform is None:
            with (gzip.open(src, "rt") if src.endswith(".gz") else open(src)) as f:
                shutil.copyfileobj(f, out)
        else:
            for x in load_jsonl(src):
                out.write(json.dumps(transform(x)) + "\n")


def raw_copies(args, prefix, keys, compact_action, compact_sample):
    """A run's raw copies next to its result, for recomputing it later (`<summariser> run` reads them
    back): every POST (compacted), the sampler's lines (compacted), the generator's log, Kafka
    Streams' latency and lag logs and its `[ks]` lines when given, the marks, and the action keys.
    Returns the key file's name (relative to the raw directory); None (and nothing written) without
    a prefix."""
    from caught_up import opt
    if not prefix:
        return None
    gz_copy(opt(args, "--actions"), prefix + ".actions.jsonl.gz", compact_action)
    gz_copy(opt(args, "--samples"), prefix + ".samples.jsonl.gz", compact_sample)
    gz_copy(opt(args, "--gen"), prefix + ".gen.log.gz")
    for k in ("--latency", "--lag"):
        if opt(args, k):
            gz_copy(opt(args, k), prefix + "." + k[2:] + ".jsonl.gz")
    if opt(args, "--ks-log") and os.path.exists(opt(args, "--ks-log")):
        with open(opt(args, "--ks-log"), errors="replace") as f, gzip.open(prefix + ".ks.log.gz", "wt") as g:
            g.writelines(x for x in f if x.startswith("[ks]"))
    shutil.copyfile(opt(args, "--marks"), prefix + ".marks.json")
    with gzip.open(prefix + ".keys.txt.gz", "wt") as f:
        f.write("\n".join(keys) + "\n")
    return os.path.basename(prefix) + ".keys.txt.gz"


def load_runs(path):
    """(every run, the measured ones, the systems with tidemark first) from a runs.jsonl."""
    with open(path) as f:
        runs = [json.loads(x) for x in f if x.strip()]
    measured = [r for r in runs if r["phase"] == "measured"]
    systems = sorted({r["system"] for r in runs}, key=lambda s: (s != "tidemark", s))
    return runs, measured, systems


def header(bench, meta, runs, measured):
    """The fields every A-B-B-A result starts with."""
    return {"bench": bench, **meta, "runs_measured": len(measured), "runs_total": len(runs),
            "outputs_ok_every_run": all(r["outputs"]["ok"] for r in runs),
            "reposts_same_payload": {f"run {r['run']} {r['system']}": r["outputs"]["reposts_same_payload"]
                                     for r in runs if r["outputs"].get("reposts_same_payload")}}


def ratios_ks_over_tidemark(systems_out, measured, systems, keys):
    """{ks system: {measure: {"ratio_of_medians", "per_block"}}}: Kafka Streams over tidemark, of the
    medians of the measured runs and of each block's medians (None where a value is missing)."""
    tm = systems_out.get("tidemark") or {}
    blocks = sorted({r["block"] for r in measured})
    out = {}
    for ks in [s for s in systems if s != "tidemark"]:
        ratios = {}
        for k in keys:
            a, b = tm.get(k), systems_out[ks].get(k)
            e = {"ratio_of_medians": None, "per_block": []}
            if a and b and a["median"] and b["median"]:
                e["ratio_of_medians"] = round(b["median"] / a["median"], 2)
            for blk in blocks:
                xa = [r.get(k) for r in measured if r["block"] == blk and r["system"] == "tidemark"]
                xb = [r.get(k) for r in measured if r["block"] == blk and r["system"] == ks]
                ok = xa and xb and None not in xa and None not in xb and statistics.median(xa) > 0
                e["per_block"].append(round(statistics.median(xb) / statistics.median(xa), 2) if ok else None)
            ratios[k] = e
        out[ks] = ratios
    return out


def compare_keys(runs, raw_dir):
    """Key sets of complete runs against the first complete measured tidemark run."""
    def keys_of(r):
        if not r.get("keys_file") or not raw_dir:
            return None
        path = os.path.join(raw_dir, r["keys_file"])
        try:
            with gzip.open(path, "rt") as f:
                return {k for k in f.read().split("\n") if k}
        except OSError:
            return None
    measured = [r for r in runs if r["phase"] == "measured"]
    normalised = all(r["outputs"].get("keys_normalised") for r in runs)
    ref = next((r for r in measured if r["system"] == "tidemark" and r["complete"]), None) or \
        next((r for r in measured if r["complete"]), None)
    out = {"normalised": normalised, "reference_run": ref["run"] if ref else None, "runs": []}
    if not normalised:
        out["note"] = "keys not normalised (no ALIGN_S): every run had other event times, key sets are not comparable"
        return out
    ref_keys = keys_of(ref) if ref else None
    if ref_keys is None:
        out["note"] = "no complete run with a key list: nothing to compare"
        return out
    for r in runs:
        k = keys_of(r)
        if k is None:
            continue
        out["runs"].append({"run": r["run"], "system": r["system"], "phase": r["phase"], "complete": r["complete"],
                            "keys": len(k), "equal_to_reference": k == ref_keys,
                            "only_here": len(k - ref_keys), "only_in_reference": len(ref_keys - k)})
    for s in sorted({x["system"] for x in out["runs"]}):
        xs = [x for x in out["runs"] if x["system"] == s and x["complete"] and x["phase"] == "measured"]
        out[s] = {"complete_measured_runs": len(xs), "equal_to_reference": sum(1 for x in xs if x["equal_to_reference"])}
    out["all_complete_runs_equal"] = all(x["equal_to_reference"] for x in out["runs"] if x["complete"])
    return out


def steal_note(systems_out, systems):
    """One line on the hypervisor's steal in each system's measured runs: CPU time this VM did not
    get, which slows whichever system runs at the time (a noisy neighbour, not either system)."""
    parts = []
    for s in systems:
        st = systems_out[s].get("steal_pct")
        if st and st["median"] is not None:
            parts.append(f"{s} median {st['median']:.1f} % ({st['min']:.1f}–{st['max']:.1f})")
    if not parts:
        return None
    return ("host: the hypervisor took CPU time from this VM during the runs (steal, /proc/stat) — " + "; ".join(parts)
            + ". Runs with high steal are slower for reasons outside both systems; compare them with care")


def without(runs, series):
    """The runs without their long per-second series (they stay in the raw runs.jsonl)."""
    return [{k: v for k, v in r.items() if k not in series} for r in runs]


def p99_line(ax, per_second_p99, gap_s, **style):
    """One run's per-second p99 ([t, n, p99 ms] rows) as a line, broken where no second had actions
    for more than gap_s (an outage is a gap, not a slope)."""
    xs, ys, prev = [], [], None
    for t, _n, p in per_second_p99:
        if prev is not None and t - prev > gap_s:
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(t)
        ys.append(max(p, 1))
        prev = t
    ax.plot(xs, ys, **style)


def dot_strip(ax, measured, systems, measures, labels, top, skip=lambda s, m: False, value=lambda r, m: r.get(m),
              never=lambda m: True, floor=None):
    """One column per measure, one dot per measured run and system, the median as a bar; runs in which
    it never happened (value None where never(m)) sit at `top` with a "never ×n" mark."""
    for i, m in enumerate(measures):
        for j, s in enumerate(systems):
            if skip(s, m):
                continue
            xs = [value(r, m) for r in measured if r["system"] == s]
            x0 = i + (j - (len(systems) - 1) / 2) * 0.3
            ys = [top if x is None and never(m) else x for x in xs]
            pts = [(x0 + 0.04 * ((k % 5) - 2), y) for k, y in enumerate(ys) if y is not None]
            lift = (lambda y: max(y, floor)) if floor is not None else (lambda y: y)
            ax.scatter([p[0] for p in pts], [lift(p[1]) for p in pts], s=18, color=color(s), alpha=.7,
                       label=s if i == 0 else None)
            sp = spread(xs, none_is_never=never(m))
            if sp and sp["median"] is not None:
                ax.hlines(lift(sp["median"]), x0 - 0.12, x0 + 0.12, color=color(s), lw=2)
            if sp and never(m) and sp["never"]:
                ax.annotate(f"never ×{sp['never']}", (x0, top), fontsize=6, ha="center", va="bottom")
    ax.set_yscale("log")
    ax.set_ylim(top=top * 1.6)
    ax.set_xticks(range(len(measures)))
    ax.set_xlim(-0.6, len(measures) - 0.4)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_title("per measured run; bar = median", fontsize=9)
    ax.grid(alpha=.3, axis="y")
