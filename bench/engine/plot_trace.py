#!/usr/bin/env python3
"""Renders an engine pipeline trace (engine::write_trace, Chrome trace-event JSON) to a PNG: one
row per track (training thread, consumer, host job, each device stream), one bar per span,
coloured by kind; stalls in red. A window of the trace can be chosen in milliseconds.

  python3 bench/engine/plot_trace.py trace.json out.png [--from MS] [--to MS] [--title TEXT]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "step": "#4c72b0",
    "stall": "#d62728",
    "consume": "#55a868",
    "host_job": "#8172b2",
    "compute": "#999999",
    "kernel": "#dd8452",
    "copy D2H": "#64b5cd",
    "copy H2D": "#c44e52",
    "copy D2D": "#937860",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--from", dest="t0", type=float, default=None, help="window start, ms")
    ap.add_argument("--to", dest="t1", type=float, default=None, help="window end, ms")
    ap.add_argument("--title", default="engine pipeline trace")
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    names = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    spans = [e for e in events if e["ph"] == "X"]
    t0 = a.t0 if a.t0 is not None else 0.0
    t1 = a.t1 if a.t1 is not None else max((e["ts"] + e["dur"]) / 1e3 for e in spans)
    tracks = sorted({(e["pid"], e["tid"]) for e in spans})
    row = {k: i for i, k in enumerate(tracks)}
    fig, ax = plt.subplots(figsize=(14, 0.55 * len(tracks) + 1.6))
    seen = set()
    for e in spans:
        s, d = e["ts"] / 1e3, e["dur"] / 1e3
        if s + d < t0 or s > t1:
            continue
        cat = e.get("cat", "")
        # The training thread's stalls are drawn over its steps, thinner.
        stall = cat == "stall"
        y = row[(e["pid"], e["tid"])]
        h = 0.45 if stall else 0.7
        label = cat if cat not in seen else None
        seen.add(cat)
        ax.barh(len(tracks) - 1 - y, d, left=s, height=h, color=COLOURS.get(cat, "#cccccc"),
                edgecolor="black", linewidth=0.2, label=label, zorder=3 if stall else 2)
        if cat == "step" and d > 0.04 * (t1 - t0):
            ax.text(s + d / 2, len(tracks) - 1 - y, e["name"], ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([names.get(k, f"{k}") for k in reversed(tracks)], fontsize=8)
    ax.set_xlim(t0, t1)
    ax.set_xlabel("ms")
    ax.set_title(a.title, fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=len(seen), fontsize=7, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)


if __name__ == "__main__":
    main()
