#!/usr/bin/env python3
"""The effect of bf16 and int8 host moments on the synthetic regression problems (zf_host_lr_problems:
noisy regression and drifting channels, from scratch and fine-tuning), beside host_moments_loss.py's
charlm runs.

For each problem, regime and seed, runs ZenFlow with each precision of --precisions (every other
setting the library's default) and dense AdamW, on the same data and starting weights; writes every
run and a summary (per precision: final held-out loss / fp32's, per run and the mean over seeds) to
--out as JSON, and prints the table.

  bench/engine/host_moments_problems.py --build build/check --seeds 1 2 3 4 5 --out problems.json
"""
import argparse
import json
import os
import subprocess
import sys

PROBLEMS = ["regression", "drift"]
REGIMES = ["scratch", "finetune"]


def run(binary, problem, regime, seed, extra):
    out = subprocess.run([binary, "--problem", problem, "--regime", regime, "--seed", str(seed)] + extra,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build/check")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"])
    ap.add_argument("--out", default="host_moments_problems.json")
    a = ap.parse_args()
    binary = os.path.join(a.build, "bench", "engine", "zf_host_lr_problems")
    if not os.path.exists(binary):
        sys.exit(f"host_moments_problems.py: {binary} not found (build the zf_host_lr_problems target)")
    print(f"settings: precisions {a.precisions}, seeds {a.seeds}, ZenFlow at the library's defaults")
    print("legend: final held-out loss of each precision / fp32's (1 = no cost); dense = AdamW on every channel")
    runs, summary = [], {}
    for problem in PROBLEMS:
        for regime in REGIMES:
            ratios = {p: [] for p in a.precisions + ["dense"]}
            for seed in a.seeds:
                base = None
                for p in a.precisions:
                    r = run(binary, problem, regime, seed, ["--host-moments", p])
                    runs.append(r)
                    base = r["loss_final"] if p == "fp32" else base
                    ratios[p].append(r["loss_final"])
                d = run(binary, problem, regime, seed, ["--mode", "dense"])
                runs.append(d)
                ratios["dense"].append(d["loss_final"])
                for p in ratios:
                    ratios[p][-1] = ratios[p][-1] / base
            key = f"{problem}/{regime}"
            summary[key] = {p: {"per_seed": v, "mean": sum(v) / len(v)} for p, v in ratios.items()}
            print(f"{key:22s} " + "  ".join(f"{p} {summary[key][p]['mean']:.4f}" for p in ratios))
    with open(a.out, "w") as f:
        json.dump({"runs": runs, "summary": summary}, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
