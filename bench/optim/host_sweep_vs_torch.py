#!/usr/bin/env python3
"""zenflow's CPU AdamW against DeepSpeed's CPU Adam and torch's (fused, foreach), in one run.

    python3 bench/optim/host_sweep_vs_torch.py --sweep build/cpu/bench/optim/zf_host_sweep \\
        --ds /tmp/ds-build/libzf_ds_adam.so [--python PY] [--rounds 5] [--inner 3] [--json FILE]

zf_host_sweep (C++: zenflow and DeepSpeed in one process) and torch_sweep.py (python: torch) cannot
share a process, so the rounds are interleaved between processes: round k runs one, then the other
(the order alternates), each with --inner interleaved rounds of its own. Both sample the same way
(see torch_sweep.py). Per size and case, the samples of every round are pooled and the median taken;
the JSON has every sample, the ratios zf/ds and zf/torch_fused, and the load average of each round.
--python is the interpreter with torch (torch is not a dependency of the build).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", required=True, help="path to zf_host_sweep")
    ap.add_argument("--ds", default="", help="DeepSpeed CPU Adam library (build_deepspeed_baseline.sh)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--min", type=int, default=4096)
    ap.add_argument("--max", type=int, default=64 << 20)
    ap.add_argument("--json", default="host_sweep_vs_torch.json")
    a = ap.parse_args()
    common = ["--threads", str(a.threads), "--min", str(a.min), "--max", str(a.max), "--rounds", str(a.inner)]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.rounds):
            zf_json, torch_json = os.path.join(tmp, f"zf{k}.json"), os.path.join(tmp, f"torch{k}.json")
            zf_cmd = [a.sweep, "--cases", "zf_adamw,ds_adamw" if a.ds else "zf_adamw", "--json", zf_json] + common
            if a.ds:
                zf_cmd += ["--ds", a.ds]
            torch_cmd = [a.python, os.path.join(HERE, "torch_sweep.py"), "--json", torch_json] + common
            order = [zf_cmd, torch_cmd] if k % 2 == 0 else [torch_cmd, zf_cmd]
            load = os.getloadavg()[0]
            for cmd in order:
                print(f"round {k + 1}/{a.rounds}: {os.path.basename(cmd[0]) if cmd is zf_cmd else 'torch_sweep.py'}",
                      flush=True)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            with open(zf_json) as f:
                zf = json.load(f)
            with open(torch_json) as f:
                tr = json.load(f)
            runs.append({"load_average_before": load, "zf": zf, "torch": tr})
    merged = {"threads": a.threads, "rounds": a.rounds, "inner_rounds": a.inner, "deepspeed_library": a.ds,
              "torch": runs[0]["torch"]["torch"], "zenflow_simd": runs[0]["zf"]["zenflow_simd"],
              "round_load_averages": [r["load_average_before"] for r in runs], "sizes": []}
    print(f"{'n':>10}  {'case':<14} {'median_us':>10} {'GB/s':>8}   zf/ds  zf/torch_fused (paired by round)")
    for i, row0 in enumerate(runs[0]["zf"]["sizes"]):
        n = row0["n"]
        loads = [r[source]["sizes"][i][k] for r in runs for source in ("zf", "torch")
                 for k in ("load_average_before", "load_average_after")]
        row = {"n": n, "load_average_before": min(loads), "load_average_after": max(loads)}
        for source in ("zf", "torch"):
            for case in runs[0][source]["sizes"][i]:
                if not isinstance(runs[0][source]["sizes"][i][case], dict):
                    continue
                samples = [s for r in runs for s in r[source]["sizes"][i][case]["samples_us"]]
                med = statistics.median(samples)
                row[case] = {"median_us": med, "GB_per_s": 28.0 * n / (med * 1e-6) / 1e9, "samples_us": samples}
        # The machine's memory bandwidth moves in phases of seconds (all three libraries at 17 or
        # at 30 ms per 64M step, round by round), so pooled medians of samples from different
        # processes can differ by which phases each caught: also the median over rounds of the
        # ratio within a round (the two processes of a round run back to back).
        def round_median(r, source, case):
            return statistics.median(r[source]["sizes"][i][case]["samples_us"])

        for other in ("torch_fused", "torch_foreach"):
            row[f"zf_over_{other}_paired"] = statistics.median(
                round_median(r, "zf", "zf_adamw") / round_median(r, "torch", other) for r in runs)
        zf_med = row["zf_adamw"]["median_us"]
        if "ds_adamw" in row:
            row["zf_over_ds"] = zf_med / row["ds_adamw"]["median_us"]
        row["zf_over_torch_fused"] = zf_med / row["torch_fused"]["median_us"]
        row["zf_over_torch_foreach"] = zf_med / row["torch_foreach"]["median_us"]
        for case in ("zf_adamw", "ds_adamw", "torch_fused", "torch_foreach"):
            if case in row:
                ratios = ""
                if case == "zf_adamw":
                    ratios = (f"{row.get('zf_over_ds', float('nan')):7.2f} {row['zf_over_torch_fused']:7.2f}"
                              f" ({row['zf_over_torch_fused_paired']:.2f})")
                print(f"{n:10d}  {case:<14} {row[case]['median_us']:10.1f} {row[case]['GB_per_s']:8.2f}   {ratios}")
        merged["sizes"].append(row)
    with open(a.json, "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
