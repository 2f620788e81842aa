#!/usr/bin/env python3
"""The effect of bf16 and int8 host moments (zenflow_ext.host_moments) on the loss, on examples/charlm.

For each seed and regime, runs on the same data, seed and starting weights: dense AdamW
(gpu-adamw), ZenFlow with each host-moment precision of --precisions (fp32 and the others; every
other setting the library's default: topk_ratio 0.1, Zen-auto windows of at most 2, overlap,
"linear"), and offload-sync (every parameter's AdamW on the host, every step) with each.
The model and the two regimes are those of docs/defaults.md (host_lr_sweep.py's CHARLM_MODEL):

  finetune   400 dense AdamW steps on the prose corpus saved with --save-weights, then 200 steps
             on the shifted corpus (--corpus-style shifted) from --init-weights
  scratch    400 steps on the prose corpus from the seed's initial weights
  demo       the demo's larger model and fine-tune (scripts/demo: --size cpu, 886k parameters,
             300 dense pretraining steps, then 300 steps on the shifted corpus)
  finetune_long, demo_long
             the same fine-tunes 10 and 4 times longer (2000 and 1200 steps, the cosine schedule
             over all of them): where v's rounding could add up at the end of a long schedule

Writes every run (final and initial eval loss, the training-loss curve) and a summary (per seed:
each precision / fp32 and each / dense; the mean over seeds) to --out as JSON, and prints the table.

  bench/engine/host_moments_loss.py --build build/cpu --seeds 1 2 3 --precisions fp32 bf16 int8
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_lr_sweep import CHARLM_MODEL, CHARLM_STEPS  # noqa: E402  the same model and steps

DEMO_MODEL = ["--size", "cpu", "--backend", "host", "--quiet", "--log-every", "10", "--eval-batches", "16"]
# regime -> (model flags, steps, dense pretraining steps on the prose corpus or 0)
REGIMES = {"finetune": (CHARLM_MODEL, CHARLM_STEPS["finetune"], 400),
           "scratch": (CHARLM_MODEL, CHARLM_STEPS["scratch"], 0),
           "demo": (DEMO_MODEL, 300, 300),
           "finetune_long": (CHARLM_MODEL, 10 * CHARLM_STEPS["finetune"], 400),
           "demo_long": (DEMO_MODEL, 1200, 300)}
# offload_sync: every parameter's moments on the host, one AdamW update per step (beta2 = 0.999
# moves v by 0.1% per update, below half a bf16 ulp): where the rounding matters most.
PRECISIONS = ["fp32", "bf16", "int8"]


def runs_of(precisions, sync=True):
    """The runs of one seed: dense, then ZenFlow and (`sync`) offload-sync with each precision."""
    out = {"dense": ["--optimizer", "gpu-adamw"]}
    for p in precisions:
        out[p] = ["--optimizer", "zenflow", "--host-moments", p]
    for p in precisions if sync else []:
        out["sync_" + p] = ["--optimizer", "offload-sync", "--host-moments", p]
    return out


RUNS = runs_of(PRECISIONS)


def run(binary, seed, regime, kind, workdir):
    model, steps, pretrain = REGIMES[regime]
    flags = model + ["--seed", str(seed), "--steps", str(steps)]
    if pretrain > 0:
        pre = os.path.join(workdir, f"pretrained_{regime}_seed{seed}.bin")
        if not os.path.exists(pre):
            subprocess.run(["nice", "-n", "10", binary] + model +
                           ["--seed", str(seed), "--steps", str(pretrain), "--optimizer", "gpu-adamw",
                            "--save-weights", pre], check=True, stdout=subprocess.DEVNULL)
        flags += ["--init-weights", pre, "--corpus-style", "shifted"]
    out = os.path.join(workdir, "run.json")
    subprocess.run(["nice", "-n", "10", binary] + flags + RUNS[kind] + ["--json-out", out], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        r = json.load(f)
    s = r["summary"]
    return {"seed": seed, "regime": regime, "run": kind, "flags": flags + RUNS[kind],
            "loss_start": s["eval_loss_initial"], "loss_final": s["eval_loss_final"],
            "mean_window": s.get("mean_window"), "host_memory_bytes": s.get("host_memory_bytes"),
            "ms_per_step": s.get("ms_per_step"),
            "curve": [[p["step"], p["loss"]] for p in r["progress"]]}


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(root, "build", "cpu"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    ap.add_argument("--precisions", nargs="+", default=PRECISIONS, choices=PRECISIONS)
    ap.add_argument("--no-sync", action="store_true", help="skip the offload-sync runs")
    ap.add_argument("--out", default=os.path.join(root, "bench", "results", "2026-11-28-cpu",
                                                  "host_moments_loss.json"))
    args = ap.parse_args()
    if "fp32" not in args.precisions:
        ap.error("--precisions must include fp32 (the ratios' base)")
    RUNS.clear()
    RUNS.update(runs_of(args.precisions, not args.no_sync))
    sync = not args.no_sync
    others = [p for p in args.precisions if p != "fp32"]
    binary = os.path.join(args.build, "examples", "charlm_train")
    results = []
    with tempfile.TemporaryDirectory() as work:
        for regime in args.regimes:
            for seed in args.seeds:
                for kind in RUNS:  # one seed's runs back to back
                    results.append(run(binary, seed, regime, kind, work))
                    print(f"{regime} seed {seed} {kind}: eval loss {results[-1]['loss_final']:.4f}",
                          file=sys.stderr)
    summary = []
    for regime in args.regimes:
        rows = []
        for seed in args.seeds:
            by = {r["run"]: r["loss_final"] for r in results if r["regime"] == regime and r["seed"] == seed}
            row = {"seed": seed, "dense": by["dense"], "fp32": by["fp32"], "fp32_vs_dense": by["fp32"] / by["dense"]}
            if sync:
                row["sync_fp32"] = by["sync_fp32"]
            for p in others:
                row[p] = by[p]
                row[p + "_vs_fp32"] = by[p] / by["fp32"]
                row[p + "_vs_dense"] = by[p] / by["dense"]
                if sync:
                    row["sync_" + p] = by["sync_" + p]
                    row["sync_" + p + "_vs_fp32"] = by["sync_" + p] / by["sync_fp32"]
            rows.append(row)
        mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0] if k != "seed"}
        summary.append({"regime": regime, "seeds": rows, "mean": mean})
    with open(args.out, "w") as f:
        json.dump({"regimes": {k: {"model": m, "steps": n, "pretrain_steps": p} for k, (m, n, p) in REGIMES.items()},
                   "runs": results, "summary": summary}, f, indent=1)
    head = "| regime | seed | dense | zenflow fp32 |"
    for p in others:
        head += f" zenflow {p} | {p} / fp32 | {p} / dense |"
    if sync:
        head += " offload-sync fp32 |" + "".join(f" offload-sync {p} | {p} / fp32 |" for p in others)
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for g in summary:
        for r in g["seeds"] + [dict(g["mean"], seed="mean")]:
            line = f"| {g['regime']} | {r['seed']} | {r['dense']:.4f} | {r['fp32']:.4f} |"
            for p in others:
                line += f" {r[p]:.4f} | {r[p + '_vs_fp32']:.4f} | {r[p + '_vs_dense']:.4f} |"
            if sync:
                line += f" {r['sync_fp32']:.4f} |" + "".join(
                    f" {r['sync_' + p]:.4f} | {r['sync_' + p + '_vs_fp32']:.4f} |" for p in others)
            print(line)


if __name__ == "__main__":
    main()
