#!/usr/bin/env python3
"""Engine-level speed and memory of bf16 and int8 host moments: zf_bench_pipeline (emulated
device, 24M bf16 parameters by default) in offload_sync (the host AdamW over the whole model every
step) and ZenFlow S = 4, r = 0.1 (one host window per 4 steps over the unselected 90%), with
--host-moments of each of --precisions in interleaved rounds (the order rotated each round, so
that a noisy neighbour hits each alike). Per mode and precision: the median over the rounds of the host job's
time (host_window_ms_per_job), of the step's mean time and of the host state per parameter.

  bench/engine/host_moments_speed.py --build build/cpu --rounds 5 --precisions fp32 bf16 int8 -- --params 64
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

MODES = {"offload_sync": "offload_sync", "zenflow S=4 r=0.1": "zenflow S=4 r=0.1"}


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(root, "build", "cpu"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "int8"], choices=["fp32", "bf16", "int8"])
    ap.add_argument("--out", default=os.path.join(root, "bench", "results", "2026-11-28-cpu",
                                                  "host_moments_speed.json"))
    ap.add_argument("extra", nargs="*", help="more zf_bench_pipeline flags (after --)")
    args = ap.parse_args()
    if "fp32" not in args.precisions:
        ap.error("--precisions must include fp32 (the ratios' base)")
    precs = args.precisions
    others = [p for p in precs if p != "fp32"]
    binary = os.path.join(args.build, "bench", "engine", "zf_bench_pipeline")
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for rnd in range(args.rounds):
            for label in MODES:
                for prec in precs[rnd % len(precs):] + precs[:rnd % len(precs)]:
                    out = os.path.join(work, "p.json")
                    subprocess.run([binary, "--only", label, "--host-moments", prec, "--json", out] + args.extra,
                                   check=True, stdout=subprocess.DEVNULL)
                    with open(out) as f:
                        r = json.load(f)
                    m = [x for x in r["modes"] if x["label"] == label][0]
                    runs.append({"round": rnd, "mode": label, "host_moments": prec, "params": r["params"],
                                 "host_threads": r["host_threads"], "step_ms_mean": m["step_ms_mean"],
                                 "step_ms_median": m["step_ms_median"],
                                 "host_window_ms_per_job": m["host_window_ms_per_job"],
                                 "host_window_ms_per_step": m["host_window_ms_per_step"],
                                 "host_state_bytes_per_param": m["host_state_bytes_per_param"],
                                 "stall_share": m["stall_share"]})
    summary = []
    for label in MODES:
        row = {"mode": label}
        for prec in precs:
            rs = [r for r in runs if r["mode"] == label and r["host_moments"] == prec]
            for k in ["host_window_ms_per_job", "step_ms_mean", "host_state_bytes_per_param", "stall_share"]:
                row[f"{k}_{prec}"] = statistics.median(r[k] for r in rs)
        for p in others:
            row[f"job_{p}_over_fp32"] = row[f"host_window_ms_per_job_{p}"] / row["host_window_ms_per_job_fp32"]
            row[f"step_{p}_over_fp32"] = row[f"step_ms_mean_{p}"] / row["step_ms_mean_fp32"]
        summary.append(row)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "zf_bench_pipeline --host-moments, interleaved rounds", "rounds": args.rounds,
                   "extra_flags": args.extra, "runs": runs, "summary": summary}, f, indent=1)
    head = "| mode | host job ms fp32 |" + "".join(f" {p} | {p}/fp32 |" for p in others)
    head += " step ms fp32 |" + "".join(f" {p} |" for p in others)
    head += " host B/param fp32 |" + "".join(f" {p} |" for p in others)
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for s in summary:
        line = f"| {s['mode']} | {s['host_window_ms_per_job_fp32']:.2f} |"
        line += "".join(f" {s[f'host_window_ms_per_job_{p}']:.2f} | {s[f'job_{p}_over_fp32']:.3f} |" for p in others)
        line += f" {s['step_ms_mean_fp32']:.1f} |" + "".join(f" {s[f'step_ms_mean_{p}']:.1f} |" for p in others)
        line += f" {s['host_state_bytes_per_param_fp32']:.2f} |"
        line += "".join(f" {s[f'host_state_bytes_per_param_{p}']:.2f} |" for p in others)
        print(line)


if __name__ == "__main__":
    main()
