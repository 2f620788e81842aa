#!/usr/bin/env python3
"""Plots a zf_host_sweep JSON file (bench/optim/host_sweep.cpp) or a host_sweep_vs_torch.py one:
GB/s per case (bytes each case moves per parameter, over the median time) and each case's time
over DeepSpeed's CPU Adam's measured in the same run, both against the size. Needs matplotlib
(not a build dependency).

    python3 bench/optim/plot_host_sweep.py host_sweep.json host_sweep.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    data = json.load(open(sys.argv[1]))
    sizes = [row["n"] for row in data["sizes"]]
    cases = [k for k, v in data["sizes"][0].items() if isinstance(v, dict)]
    has_ds = "ds_adamw" in cases
    fig, axes = plt.subplots(1, 2 if has_ds else 1, figsize=(13 if has_ds else 7, 4.8), squeeze=False)
    # One colour per case in both panels.
    colour = {case: f"C{i}" for i, case in enumerate(cases)}
    ax = axes[0][0]
    for case in cases:
        ax.plot(sizes, [row[case]["GB_per_s"] for row in data["sizes"]], marker="o", label=case,
                linestyle="--" if case == "ds_adamw" else "-", color=colour[case])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("parameters per call")
    ax.set_ylabel("GB/s (bytes the case moves / median time)")
    loads = [row[k] for row in data["sizes"] for k in ("load_average_before", "load_average_after") if k in row]
    load = f", load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    rounds = data["rounds"] * data.get("inner_rounds", 1)
    ax.set_title(f"{data['threads']} threads, median of {rounds} interleaved rounds{load}")
    ax.legend(fontsize=8)
    if has_ds:
        ax = axes[0][1]
        for case in cases:
            if case == "ds_adamw":
                continue
            ratio = [row[case]["median_us"] / row["ds_adamw"]["median_us"] for row in data["sizes"]]
            ax.plot(sizes, ratio, marker="o", label=case, color=colour[case])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("parameters per call")
        ax.set_ylabel("time / DeepSpeed CPU Adam time (< 1: faster)")
        ax.set_title("against DeepSpeed's CPU Adam, same run")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
