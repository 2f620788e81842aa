#!/usr/bin/env python3
"""The host-lr / window sweep behind the library's defaults (docs/defaults.md).

Matrix: problem {charlm, regression, drift} x regime {scratch, finetune} x seed x
host_lr_scale {none, sqrt, linear, capped, snr} x window {2, 4, 8 fixed; Zen-auto with a maximum
window of 2, 4, 8, 16} (+ Zen-auto max 8 with 20 warm-up rounds, + S = 4 without overlap_step), each
against dense AdamW on the same data, seed and starting weights. ZenFlow runs with topk_ratio 0.1
and the library's other defaults (overlap on, selection "auto").
--moments picks host_moments_per_step: per_step (the default; the host window's moments decay by
beta^n_w and its counts advance by n_w) and/or per_window (one beta and one count per window, as
before 2026-11-24; cells.jsonl lines without a "moments" field ran that way).

  charlm       examples/charlm (charlm_train, host backend), a small model (hidden 128, 3 layers);
               finetune = pretrain 400 steps of dense AdamW on the prose corpus (--save-weights),
               then 200 steps on the shifted corpus (--init-weights) in each mode.
  regression   the noisy isotropic regression; drift: skewed channels whose strong set moves
               (bench/engine/host_lr_problems.cpp, zf_host_lr_problems).

Each finished cell is appended to CELLS (JSON lines) at once; a rerun skips the cells already
there, so an interrupted sweep resumes. Then it writes SUMMARY (JSON) and, when matplotlib is
importable, the loss-curve PNGs under --plots.

  bench/engine/host_lr_sweep.py --build build/cpu --seeds 1 2 3
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

RULES = ["none", "sqrt", "linear", "capped", "snr"]
# window label -> (update_interval, max_update_interval, full_warm_up_rounds, overlap_step)
WINDOWS = {
    "S2": ("2", 16, 0, True),
    "S4": ("4", 16, 0, True),
    "S8": ("8", 16, 0, True),
    "auto2": ("auto", 2, 0, True),
    "auto4": ("auto", 4, 0, True),
    "auto8": ("auto", 8, 0, True),
    "auto16": ("auto", 16, 0, True),
    "auto8+wu20": ("auto", 8, 20, True),
    "S4/sync": ("4", 16, 0, False),
}
PROBLEMS = ["charlm", "regression", "drift"]
REGIMES = ["scratch", "finetune"]
CHARLM_MODEL = ["--size", "tiny", "--hidden", "128", "--context", "8", "--embed", "16", "--layers", "3",
                "--batch", "64", "--corpus-bytes", "400000", "--eval-batches", "16", "--threads", "1",
                "--backend", "host", "--quiet", "--log-every", "10"]
CHARLM_STEPS = {"scratch": 400, "finetune": 200}


def moments(c):
    """host_moments_per_step of a cell: "per_step" (true, the default) or "per_window"; cells written
    before the setting existed ran per window."""
    return c.get("moments", "-" if c["mode"] == "dense" else "per_window")


def key(c):
    return f"{c['problem']}/{c['regime']}/{c['seed']}/{c['mode']}/{c['rule']}/{c['window']}/{moments(c)}"


def charlm_cell(binary, cell, workdir):
    seed = str(cell["seed"])
    flags = CHARLM_MODEL + ["--seed", seed, "--steps", str(CHARLM_STEPS[cell["regime"]])]
    if cell["regime"] == "finetune":
        pre = os.path.join(workdir, f"charlm_pretrained_seed{seed}.bin")
        if not os.path.exists(pre):
            subprocess.run(["nice", "-n", "10", binary] + CHARLM_MODEL +
                           ["--seed", seed, "--steps", "400", "--optimizer", "gpu-adamw", "--save-weights", pre],
                           check=True, stdout=subprocess.DEVNULL)
        flags += ["--init-weights", pre, "--corpus-style", "shifted"]
    if cell["mode"] == "dense":
        flags += ["--optimizer", "gpu-adamw"]
    else:
        interval, max_iv, warm, overlap = WINDOWS[cell["window"]]
        flags += ["--optimizer", "zenflow", "--host-lr-scale", cell["rule"], "--update-interval", interval,
                  "--max-update-interval", str(max_iv), "--full-warm-up-rounds", str(warm),
                  "--overlap-step", "true" if overlap else "false",
                  "--host-moments-per-step", "true" if moments(cell) == "per_step" else "false"]
    out = os.path.join(workdir, "cell.json")
    subprocess.run(["nice", "-n", "10", binary] + flags + ["--json-out", out], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out) as f:
        r = json.load(f)
    s = r["summary"]
    curve = [[0, s["eval_loss_initial"]]] + [[p["step"], p["loss"]] for p in r["progress"]]
    return {"loss_start": s["eval_loss_initial"], "loss_final": s["eval_loss_final"],
            "loss_max": max(v for _, v in curve), "mean_window": s["mean_window"], "curve": curve,
            "curve_kind": "train loss per 10 steps (first point: eval loss)"}


def synthetic_cell(binary, cell):
    flags = ["--problem", cell["problem"], "--regime", cell["regime"], "--seed", str(cell["seed"])]
    if cell["mode"] == "dense":
        flags += ["--mode", "dense"]
    else:
        interval, max_iv, warm, overlap = WINDOWS[cell["window"]]
        flags += ["--mode", "zenflow", "--rule", cell["rule"], "--interval", interval, "--max-interval",
                  str(max_iv), "--warm-up", str(warm), "--overlap", "true" if overlap else "false",
                  "--moments-per-step", "true" if moments(cell) == "per_step" else "false"]
    out = subprocess.run(["nice", "-n", "10", binary] + flags, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {k: r[k] for k in ("loss_start", "loss_final", "loss_max", "mean_window", "curve")} | {
        "curve_kind": "held-out loss every 20 steps"}


def cells(seeds, problems, moment_modes, windows):
    for problem in problems:
        for regime in REGIMES:
            for seed in seeds:
                yield {"problem": problem, "regime": regime, "seed": seed, "mode": "dense", "rule": "-",
                       "window": "-", "moments": "-"}
                for mo in moment_modes:
                    for window in windows:
                        for rule in RULES:
                            yield {"problem": problem, "regime": regime, "seed": seed, "mode": "zenflow",
                                   "rule": rule, "window": window, "moments": mo}


def summarize(results):
    """Per (problem, regime, window, rule): mean over seeds of final / dense final, worst ratio to
    "none", and whether any seed's loss rose above its start."""
    dense = {(r["problem"], r["regime"], r["seed"]): r for r in results if r["mode"] == "dense"}
    byk = {(r["problem"], r["regime"], r["seed"], r["rule"], r["window"], moments(r)): r
           for r in results if r["mode"] != "dense"}
    groups = {}
    for (p, g, s, rule, w, mo), r in byk.items():
        d = dense.get((p, g, s))
        none = byk.get((p, g, s, "none", w, mo))
        if d is None:
            continue
        e = groups.setdefault(f"{p}/{g}/{w}/{rule}/{mo}", {"problem": p, "regime": g, "window": w, "rule": rule,
                                                            "moments": mo, "vs_dense": [], "vs_none": [],
                                                            "spike": False, "mean_window": []})
        e["vs_dense"].append(r["loss_final"] / d["loss_final"])
        if none is not None:
            e["vs_none"].append(r["loss_final"] / none["loss_final"])
        e["spike"] = e["spike"] or r["loss_max"] > r["loss_start"] * (1 + 1e-9)
        e["mean_window"].append(r["mean_window"])
    for e in groups.values():
        e["seeds"] = len(e["vs_dense"])
        e["mean_vs_dense"] = sum(e["vs_dense"]) / len(e["vs_dense"])
        e["worst_vs_none"] = max(e["vs_none"]) if e["vs_none"] else math.nan
        e["mean_window"] = sum(e["mean_window"]) / len(e["mean_window"])
    return groups


def print_table(groups, out=sys.stdout):
    windows = list(WINDOWS)
    for mo in ("per_step", "per_window"):
        for p in PROBLEMS:
            for g in REGIMES:
                rows = [e for e in groups.values() if e["problem"] == p and e["regime"] == g and e["moments"] == mo]
                if not rows:
                    continue
                print(f"\n{p} / {g}, host moments {mo}: final loss / dense AdamW's, mean over seeds (! = a loss "
                      f"above the start; worst ratio to 'none' in brackets)", file=out)
                print(f"{'window':12}" + "".join(f"{r:>19}" for r in RULES), file=out)
                for w in windows:
                    line = f"{w:12}"
                    for rule in RULES:
                        e = groups.get(f"{p}/{g}/{w}/{rule}/{mo}")
                        line += f"{'':>20}" if e is None else \
                            f"{e['mean_vs_dense']:>9.4f} [{e['worst_vs_none']:.3f}]{'!' if e['spike'] else ' '}"
                    print(line, file=out)


def plot(results, plots_dir, seed):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("host_lr_sweep.py: matplotlib not importable, no PNGs (pip install matplotlib)", file=sys.stderr)
        return []
    written = []
    for window in ("auto2", "auto4", "auto16", "S4/sync"):
        fig, axes = plt.subplots(len(REGIMES), len(PROBLEMS), figsize=(15, 8))
        for i, g in enumerate(REGIMES):
            for j, p in enumerate(PROBLEMS):
                ax = axes[i][j]
                for r in results:
                    if r["problem"] != p or r["regime"] != g or r["seed"] != seed:
                        continue
                    if r["mode"] == "dense":
                        label, style = "dense AdamW", dict(color="black", lw=2)
                    elif r["window"] == window and moments(r) == "per_step":
                        label, style = f"{r['rule']}", dict(lw=1.2)
                    else:
                        continue
                    xs, ys = zip(*r["curve"])
                    ax.plot(xs, ys, label=label, **style)
                ax.set_yscale("log")
                ax.set_title(f"{p}, {g}, window {window}, seed {seed}", fontsize=9)
                if p == "charlm":
                    ax.set_ylim(top=ax.get_ylim()[1], bottom=0.8)
                ax.set_xlabel("step")
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(plots_dir, f"defaults-curves-{window.replace('/', '-')}.png")
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)
    return written


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(root, "build", "cpu"), help="build dir with the binaries")
    ap.add_argument("--cells", default=os.path.join(root, "bench", "results", "host_lr_sweep", "cells.jsonl"))
    ap.add_argument("--summary", default=os.path.join(root, "bench", "results", "host_lr_sweep", "summary.json"))
    ap.add_argument("--plots", default=os.path.join(root, "docs"), help="folder of the PNGs")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--problems", nargs="+", default=PROBLEMS, choices=PROBLEMS)
    ap.add_argument("--moments", nargs="+", default=["per_step"], choices=["per_step", "per_window"],
                    help="host_moments_per_step true (per_step) and/or false (per_window) for the runs")
    ap.add_argument("--windows", nargs="+", default=list(WINDOWS), choices=list(WINDOWS),
                    help="the windows to run (default: all)")
    ap.add_argument("--report-only", action="store_true", help="no new runs: summarize CELLS")
    args = ap.parse_args()
    charlm = os.path.join(args.build, "examples", "charlm_train")
    synthetic = os.path.join(args.build, "bench", "engine", "zf_host_lr_problems")
    os.makedirs(os.path.dirname(args.cells), exist_ok=True)
    done = {}
    if os.path.exists(args.cells):
        with open(args.cells) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    done[key(r)] = r
    if not args.report_only:
        todo = [c for c in cells(args.seeds, args.problems, args.moments, args.windows) if key(c) not in done]
        print(f"host_lr_sweep.py: {len(done)} cells done, {len(todo)} to run", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as tmp, open(args.cells, "a") as out:
            for n, c in enumerate(todo):
                r = c | (charlm_cell(charlm, c, tmp) if c["problem"] == "charlm" else synthetic_cell(synthetic, c))
                out.write(json.dumps(r) + "\n")
                out.flush()
                done[key(r)] = r
                if (n + 1) % 50 == 0:
                    print(f"  {n + 1}/{len(todo)}", file=sys.stderr, flush=True)
    results = list(done.values())
    groups = summarize(results)
    print_table(groups)
    with open(args.summary, "w") as f:
        json.dump({"windows": WINDOWS, "rules": RULES, "groups": groups}, f, indent=1)
    for path in plot(results, args.plots, min(args.seeds)):
        print(f"PNG: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
