#!/usr/bin/env python3
"""The re-selection trigger (zenflow_ext.select_on_mass_drop) against fixed selection intervals
(docs/defaults.md, "A selection when the device set loses its share of the mass").

Matrix: problem {drift, regression, charlm} x regime {scratch, finetune} x seed x host_lr_scale
{linear (the default), none} x selection {every 100 steps (the library's "auto"), every 50, the
trigger at each --thresholds value (with the "auto" schedule underneath)}, each against dense
AdamW on the same data, seed and starting weights (run here too). Every other setting is the
library's default (Zen-auto, longest window 2, overlap on, topk_ratio 0.1). The problems and
the charlm model are those of bench/engine/host_lr_sweep.py.

Each finished cell is appended to CELLS (JSON lines) at once, with its selections (how many, how
many the trigger fired); a rerun skips the cells already there. Then SUMMARY (JSON) and a table:
per problem/regime and selection, final loss / dense AdamW's (mean of the seeds), the worst seed's
"linear" / "none", and the selections per run.

  bench/engine/mass_trigger_sweep.py --build build/cpu --seeds 1 2 3 --thresholds 0.5 0.7 0.85
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import host_lr_sweep as base

RULES = ["linear", "none"]


def selections(thresholds):
    """label -> (select_interval or None for "auto", select_on_mass_drop)."""
    out = {"sel100": (None, 0.0), "sel50": (50, 0.0)}
    for t in thresholds:
        out[f"md{t:g}"] = (None, t)
    return out


def key(c):
    return f"{c['problem']}/{c['regime']}/{c['seed']}/{c['mode']}/{c['rule']}/{c['selection']}/{c['min_gap']}"


def run_cell(build, cell, sel, workdir):
    interval, drop = sel.get(cell["selection"], (None, 0.0))
    extra_charlm, extra_synth = [], []
    if cell["mode"] != "dense":
        if interval is not None:
            extra_charlm += ["--select-interval", str(interval)]
            extra_synth += ["--select-interval", str(interval)]
        if drop > 0:
            extra_charlm += ["--select-on-mass-drop", str(drop), "--min-select-interval", str(cell["min_gap"])]
            extra_synth += ["--mass-drop", str(drop), "--min-select-interval", str(cell["min_gap"])]
    if cell["problem"] == "charlm":
        binary = os.path.join(build, "examples", "charlm_train")
        seed = str(cell["seed"])
        flags = base.CHARLM_MODEL + ["--seed", seed, "--steps", str(base.CHARLM_STEPS[cell["regime"]])]
        if cell["regime"] == "finetune":
            pre = os.path.join(workdir, f"charlm_pretrained_seed{seed}.bin")
            if not os.path.exists(pre):
                subprocess.run(["nice", "-n", "10", binary] + base.CHARLM_MODEL +
                               ["--seed", seed, "--steps", "400", "--optimizer", "gpu-adamw", "--save-weights",
                                pre], check=True, stdout=subprocess.DEVNULL)
            flags += ["--init-weights", pre, "--corpus-style", "shifted"]
        if cell["mode"] == "dense":
            flags += ["--optimizer", "gpu-adamw"]
        else:
            flags += ["--optimizer", "zenflow", "--host-lr-scale", cell["rule"]] + extra_charlm
        out = os.path.join(workdir, "cell.json")
        subprocess.run(["nice", "-n", "10", binary] + flags + ["--json-out", out], check=True,
                       stdout=subprocess.DEVNULL)
        with open(out) as f:
            s = json.load(f)["summary"]
        return {"loss_start": s["eval_loss_initial"], "loss_final": s["eval_loss_final"],
                "selections": s["selections"], "mass_drop_selections": s["mass_drop_selections"]}
    binary = os.path.join(build, "bench", "engine", "zf_host_lr_problems")
    flags = ["--problem", cell["problem"], "--regime", cell["regime"], "--seed", str(cell["seed"])]
    if cell["mode"] == "dense":
        flags += ["--mode", "dense"]
    else:
        flags += ["--mode", "zenflow", "--rule", cell["rule"], "--interval", "auto", "--max-interval", "2"]
        flags += extra_synth
    r = json.loads(subprocess.run(["nice", "-n", "10", binary] + flags, check=True, capture_output=True,
                                  text=True).stdout)
    return {k: r[k] for k in ("loss_start", "loss_final", "selections", "mass_drop_selections",
                              "selection_steps")}


def cells(args, sel):
    for problem in args.problems:
        for regime in base.REGIMES:
            for seed in args.seeds:
                yield {"problem": problem, "regime": regime, "seed": seed, "mode": "dense", "rule": "-",
                       "selection": "-", "min_gap": 0}
                for s in sel:
                    for rule in RULES:
                        yield {"problem": problem, "regime": regime, "seed": seed, "mode": "zenflow",
                               "rule": rule, "selection": s, "min_gap": args.min_gap if sel[s][1] > 0 else 0}


def summarize(results, sel, min_gap):
    dense = {(r["problem"], r["regime"], r["seed"]): r for r in results if r["mode"] == "dense"}
    zf = {(r["problem"], r["regime"], r["seed"], r["rule"], r["selection"]): r for r in results
          if r["mode"] != "dense" and r["min_gap"] in (0, min_gap)}
    groups = {}
    for (p, g, s, rule, label), r in zf.items():
        d = dense.get((p, g, s))
        if d is None or label not in sel:
            continue
        e = groups.setdefault(f"{p}/{g}/{label}", {"problem": p, "regime": g, "selection": label,
                                                    "vs_dense": {}, "linear_vs_none": [], "selections": [],
                                                    "mass_drop_selections": []})
        e["vs_dense"].setdefault(rule, []).append(r["loss_final"] / d["loss_final"])
        if rule == "linear":
            none = zf.get((p, g, s, "none", label))
            if none is not None:
                e["linear_vs_none"].append(r["loss_final"] / none["loss_final"])
            e["selections"].append(r["selections"])
            e["mass_drop_selections"].append(r["mass_drop_selections"])
    for e in groups.values():
        e["mean_vs_dense"] = {k: sum(v) / len(v) for k, v in e["vs_dense"].items()}
        e["worst_linear_vs_none"] = max(e["linear_vs_none"]) if e["linear_vs_none"] else float("nan")
    return groups


def print_table(groups, sel, problems, out=sys.stdout):
    print(f"{'problem/regime':22}{'selection':>10}{'linear/dense':>14}{'none/dense':>12}"
          f"{'linear/none worst':>19}{'selections (md)':>22}", file=out)
    for p in problems:
        for g in base.REGIMES:
            for label in sel:
                e = groups.get(f"{p}/{g}/{label}")
                if e is None:
                    continue
                sels = " ".join(f"{a}({b})" for a, b in zip(e["selections"], e["mass_drop_selections"]))
                print(f"{p + '/' + g:22}{label:>10}{e['mean_vs_dense'].get('linear', float('nan')):>14.4f}"
                      f"{e['mean_vs_dense'].get('none', float('nan')):>12.4f}{e['worst_linear_vs_none']:>19.4f}"
                      f"{sels:>22}", file=out)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = os.path.join(root, "bench", "results", "host_lr_sweep", "mass_trigger")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(root, "build", "cpu"))
    ap.add_argument("--cells", default=os.path.join(res, "cells.jsonl"))
    ap.add_argument("--summary", default=os.path.join(res, "summary.json"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--problems", nargs="+", default=["drift", "regression", "charlm"],
                    choices=["drift", "regression", "charlm"])
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.5, 0.7, 0.85])
    ap.add_argument("--min-gap", type=int, default=16, help="min_select_interval of the trigger's cells")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    sel = selections(args.thresholds)
    os.makedirs(os.path.dirname(args.cells), exist_ok=True)
    done = {}
    if os.path.exists(args.cells):
        with open(args.cells) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    done[key(r)] = r
    if not args.report_only:
        todo = [c for c in cells(args, sel) if key(c) not in done]
        print(f"mass_trigger_sweep.py: {len(done)} cells done, {len(todo)} to run", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as tmp, open(args.cells, "a") as out:
            for n, c in enumerate(todo):
                r = c | run_cell(args.build, c, sel, tmp)
                out.write(json.dumps(r) + "\n")
                out.flush()
                done[key(r)] = r
                if (n + 1) % 25 == 0:
                    print(f"  {n + 1}/{len(todo)}", file=sys.stderr, flush=True)
    groups = summarize(list(done.values()), sel, args.min_gap)
    print_table(groups, sel, args.problems)
    with open(args.summary, "w") as f:
        json.dump({"selections": sel, "min_gap": args.min_gap, "groups": groups}, f, indent=1)


if __name__ == "__main__":
    main()
