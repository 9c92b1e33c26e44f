"""The summary JSON of a series and its plot."""
import os

from .util import median, spread


def measures(runs):
    """{system: {metric: spread}} over the measured runs' numeric measures."""
    out = {}
    for r in runs:
        if r["phase"] != "measured":
            continue
        for k, v in r.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(r["system"], {}).setdefault(k, []).append(v)
    return {s: {k: spread(v) for k, v in ms.items()} for s, ms in out.items()}


def per_block_ratio(runs, metric, a, b):
    """b's metric over a's, per block (medians of each system's runs in the block)."""
    blocks = sorted({r["block"] for r in runs if r["phase"] == "measured"})
    out = []
    for blk in blocks:
        va = median([r.get(metric) for r in runs if r["phase"] == "measured" and r["block"] == blk and r["system"] == a])
        vb = median([r.get(metric) for r in runs if r["phase"] == "measured" and r["block"] == blk and r["system"] == b])
        if va and vb is not None:
            out.append(round(vb / va, 3))
    return out


def verdicts(sc, table):
    """Each target: today's median, the ratio figure/target and met or missed; with two
    systems, the other system's median and its ratio to the target's system."""
    out = []
    names = [s["name"] for s in sc["systems"]]
    for t in sc["targets"]:
        fig = table.get(t["system"], {}).get(t["metric"], {})
        v = fig.get("median")
        row = {"text": t["text"], "metric": t["metric"], "system": t["system"], "op": t["op"], "target": t["value"],
               "figure": v, "min": fig.get("min"), "max": fig.get("max"), "n": fig.get("n", 0)}
        if t.get("vs"):
            # A relative target: the system's median over the other system's (`vs`).
            o = table.get(t["vs"], {}).get(t["metric"], {}).get("median")
            v = round(v / o, 3) if (v is not None and o) else None
            row.update({"figure": v, "min": None, "max": None, "vs": t["vs"]})
        if v is None:
            row["verdict"] = "no figure"
        else:
            row["ratio"] = round(v / t["value"], 3) if t["value"] else None
            ok = v <= t["value"] if t["op"] == "<=" else v >= t["value"]
            row["verdict"] = "met" if ok else "missed"
        others = [n for n in names if n != t["system"]]
        if others and not t.get("vs"):
            o = table.get(others[0], {}).get(t["metric"], {}).get("median")
            row["other"] = {"system": others[0], "figure": o, "ratio_to_target_system": round(o / v, 3) if (o is not None and v) else None}
        out.append(row)
    return out


def plot(sc, runs, series, path):
    """A figure: per-run bars of each target's metric (A-B-B-A order, warm-ups excluded) and,
    when the driver gave time series, one panel per series. Returns the path or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    metrics = list(dict.fromkeys(t["metric"] for t in sc["targets"])) or []
    panels = len(metrics) + len(series)
    if panels == 0:
        return None
    fig, axes = plt.subplots(panels, 1, figsize=(10, 3.2 * panels), squeeze=False)
    colors = {}
    palette = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    measured = [r for r in runs if r["phase"] == "measured"]
    for ax, m in zip(axes[:, 0], metrics):
        for i, r in enumerate(measured):
            c = colors.setdefault(r["system"], palette[len(colors) % len(palette)])
            v = r.get(m)
            ax.bar(i, v if v is not None else 0, color=c, label=r["system"] if r["system"] not in ax.get_legend_handles_labels()[1] else None)
        for t in sc["targets"]:
            if t["metric"] == m:
                ax.axhline(t["value"], color="k", ls="--", lw=1, label=f"target {t['op']} {t['value']}")
        ax.set_title(f"{sc['name']}: {m} per measured run (A-B-B-A order)")
        ax.set_xticks(range(len(measured)), [r["run"].split("-")[0] for r in measured], fontsize=7)
        ax.legend(fontsize=8)
    for ax, (title, lines) in zip(axes[len(metrics):, 0], series.items()):
        for label, (xs, ys) in lines.items():
            ax.plot(xs, ys, label=label, lw=1)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
