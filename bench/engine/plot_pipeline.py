#!/usr/bin/env python3
"""Plots zf_bench_pipeline's JSON: per mode, the mean step time against the pipeline bound, with
the counted stall share on each bar. Several JSON files (e.g. before / after a change) are drawn
side by side, labelled by file name. With --ratio, each bar is the step over its run's pipeline
bound instead (runs of different model sizes side by side), with issue 11's 1.05 drawn.

  python3 bench/engine/plot_pipeline.py before.json after.json out.png
  python3 bench/engine/plot_pipeline.py --ratio 50M.json 100M.json 200M.json out.png
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    args = sys.argv[1:]
    ratio = "--ratio" in args
    args = [a for a in args if a != "--ratio"]
    if len(args) < 2:
        sys.exit(__doc__)
    runs = [(os.path.splitext(os.path.basename(p))[0], json.load(open(p))) for p in args[:-1]]
    labels = [m["label"] for m in runs[0][1]["modes"]]
    dropped = []
    if ratio:  # modes far off the bound (offload_sync, ~3x) would flatten the others: listed apart
        first = {m["label"]: m["step_ms_mean"] / m["bound_ms"] for m in runs[0][1]["modes"]}
        dropped = [f"{l} {first[l]:.2f}x" for l in labels if first[l] > 2]
        labels = [l for l in labels if first[l] <= 2]
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(labels)), 4.8))
    for i, (name, data) in enumerate(runs):
        modes = {m["label"]: m for m in data["modes"]}
        xs = [j + (i - (len(runs) - 1) / 2) * width for j in range(len(labels))]
        scale = [modes[l]["bound_ms"] if ratio and l in modes else 1.0 for l in labels]
        ys = [modes[l]["step_ms_mean"] / s if l in modes else 0 for l, s in zip(labels, scale)]
        sizes = f", {data['params'] / 1e6:.0f}M, C = {data['compute_ms']:.0f} ms" if ratio else ""
        bars = ax.bar(xs, ys, width, label=f"{name}: step (mean){sizes}")
        for x, l, b in zip(xs, labels, bars):
            if l in modes:
                ax.text(x, b.get_height(), f"{100 * modes[l]['stall_share']:.0f}%", ha="center", va="bottom",
                        fontsize=7)
        if not ratio:
            ax.scatter(xs, [modes[l]["bound_ms"] if l in modes else 0 for l in labels], marker="_", s=300,
                       color="black", zorder=3, label="pipeline bound" if i == 0 else None)
    d = runs[0][1]
    if ratio:
        ax.axhline(1.05, color="black", linestyle="--", linewidth=0.8, label="issue 11: 1.05 x bound")
        ax.set_ylim(0.9, 1.2)
        ax.set_ylabel("step / pipeline bound")
        left_out = f"; left out: {', '.join(dropped)}" if dropped else ""
        ax.set_title(f"emulated device, runs side by side (numbers on bars: counted stall share{left_out})",
                     fontsize=9)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args[-1], dpi=110)
        return
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("ms per step")
    ax.set_title(f"emulated device: {d['params'] / 1e6:.1f}M bf16 params, C = {d['compute_ms']} ms, "
                 f"B = {d['pcie_bytes_per_second'] / 1e9:.2f} GB/s (numbers on bars: counted stall share)",
                 fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args[-1], dpi=110)


if __name__ == "__main__":
    main()
