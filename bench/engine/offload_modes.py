#!/usr/bin/env python3
"""The three-mode benchmark: the same model, seed and data trained with GPU-resident AdamW,
synchronous offload (ZeRO-Offload-like) and ZenFlow, printed as one table.

Runs the example trainer (examples/charlm, binary charlm_train) once per mode, ZenFlow with the
library's defaults (docs/defaults.md) plus ZenFlow with host_lr_scale "none" (DeepSpeed's
behaviour); reads each
run's --json-out; prints the settings every run used, then ms/step, the ratio to GPU-resident
AdamW, the stall fraction, PCIe bytes per step over the model size and the final losses, then a
legend of the columns. While the runs go, each one's progress lines (steps done, time elapsed,
time left) are relayed on stderr. Arguments it does not know are passed to every run (e.g.
--size, --steps, --backend, --topk-ratio, --update-interval).

  bench/engine/offload_modes.py --binary build/ci/examples/charlm_train --steps 300

--phase finetune (what ZenFlow is for): first pretrain with dense AdamW on the prose corpus for
--pretrain-steps and save the weights (--save-weights), then run every mode from those weights on
the shifted corpus (--init-weights, --corpus-style shifted). Host backend only.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap

# (label, flags). The first is the baseline of the ratios.
RUNS = [
    ("gpu-adamw", ["--optimizer", "gpu-adamw"]),
    ("offload-sync", ["--optimizer", "offload-sync"]),
    ("zenflow", ["--optimizer", "zenflow"]),  # the library's defaults
    ("zenflow, host_lr_scale none", ["--optimizer", "zenflow", "--host-lr-scale", "none"]),
]


def find_binary(explicit):
    if explicit:
        return explicit
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for build in ("build/demo", "build/ci", "build/gpu", "build/cpu", "build/examples"):
        path = os.path.join(root, build, "examples", "charlm_train")
        if os.path.exists(path):
            return path
    sys.exit("offload_modes.py: charlm_train not found; build it (scripts/demo does) or pass --binary")


def without_option(args, name):
    """args less every `name VALUE` and `name=VALUE` (an option that a phase sets itself)."""
    out, i = [], 0
    while i < len(args):
        if args[i] == name:
            i += 2
            continue
        if not args[i].startswith(name + "="):
            out.append(args[i])
        i += 1
    return out


def run(binary, label, flags, extra, workdir, verbose, progress_every, position):
    """One charlm_train run; relays its progress lines (stderr) prefixed with the run's label."""
    out = os.path.join(workdir, "".join(c if c.isalnum() else "_" for c in label) + ".json")
    cmd = [binary] + flags + extra + ["--json-out", out]
    if not verbose:
        cmd.append("--quiet")
    if progress_every > 0:
        cmd += ["--progress-every", str(progress_every)]
    print(f"[{position} {label}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, stdout=None if verbose else subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        print(f"[{position} {label}] {line.rstrip()}", file=sys.stderr, flush=True)
    if proc.wait() != 0:
        sys.exit(f"offload_modes.py: the {label} run failed (exit code {proc.returncode}): {' '.join(cmd)}")
    with open(out) as f:
        return json.load(f)


def flatten(obj, prefix=""):
    """{"a": {"b": 1}} -> {"a.b": 1}: a DeepSpeed config as dotted keys."""
    if not isinstance(obj, dict):
        return {prefix: obj}
    flat = {}
    for key, value in obj.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else key))
    return flat


def show(value):
    """A setting as its JSON spelling, floats shortened (0.9f read back as 0.899999976 -> 0.9)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return "null" if value is None else str(value)


def settings_lines(results, extra, phase_note=None):
    """What every run used: model, data, schedule, optimizer, and each zenflow setting (per run
    where the runs differ). `results` is [(label, charlm_train JSON)]; `phase_note` says how the
    runs started (e.g. from pretrained weights), when it is not from scratch."""
    first = results[0][1]
    m, r = first["model"], first["run"]
    lines = [
        f"backend   {first['backend']}",
        f"model     charlm, {m['parameters']:,} parameters ({m['bytes_bf16'] / 1e6:.1f} MB bf16; context "
        f"{m['context']}, embed {m['embed']}, hidden {m['hidden']} x {m['layers']} layers, vocab {m['vocab']})",
        f"run       {r['steps']} steps of batch {r['batch']}, lr {r['lr']:g} ({r['warmup_steps']} warm-up steps, "
        f"then cosine decay), seed {r['seed']}, data {r['data']}",
    ]

    def wrap(text):  # lines of at most 100 columns, never splitting a "name value" pair
        items = text.split(", ")
        glued = ", ".join(i if n == 0 else i.replace(" ", "\u00a0") for n, i in enumerate(items))
        lines = textwrap.wrap(glued, width=100, subsequent_indent=" " * 10, break_on_hyphens=False)
        return [line.replace("\u00a0", " ") for line in lines]

    if phase_note:
        lines += wrap(f"phase     {phase_note}")

    lines += wrap(f"flags     {' '.join(extra) if extra else '(none)'} (passed to every run)")
    configs = {label: flatten(res.get("deepspeed_config", {})) for label, res in results}
    optimizer = {k: v for k, v in configs[results[0][0]].items() if k.startswith(("optimizer.", "gradient_clipping"))}
    lines += wrap("optimizer " + ", ".join(f"{k.split('.')[-1]} {show(v)}" for k, v in sorted(optimizer.items())))
    zen = [(label, configs[label]) for label, res in results if res.get("mode") == "zenflow"]
    if zen:
        keys = sorted({k for _, c in zen for k in c if "zenflow" in k and not k.endswith(".mode")})
        common, differing = [], []
        for k in keys:
            values = [c.get(k) for _, c in zen]
            name = k.split(".")[-1]
            if all(v == values[0] for v in values):
                common.append(f"{name} {show(values[0])}")
            else:
                differing.append(f"{name}: " + ", ".join(f"{show(v)} ({label})" for (label, _), v in zip(zen, values)))
        lines += wrap("zenflow   " + ", ".join(common))
        lines += [f"          {d}" for d in differing]
    return lines


def legend_lines(backend):
    """What each column means, and what the numbers mean on this backend."""
    lines = [
        "ms/step            wall time of one training step (forward, backward, optimizer step, and any",
        "                   wait for the host optimizer), mean over the run after its first steps",
        "x gpu-adamw        ms/step over the gpu-adamw run's",
        "stall %            share of the step time spent waiting for the host optimizer",
        "PCIe/step / model  bytes copied between device and host per step (both directions, counted",
        "                   by the engine), over the model's bf16 size, mean over the whole run: the",
        "                   full_warm_up_rounds steps run dense and move 2x each, so the split steps",
        "                   alone move less than the figure shown",
        "eval loss          mean loss over the held-out batches after the last step",
        "vs gpu-adamw       eval loss relative to the gpu-adamw run's (+1.00% = 1% higher)",
        "train loss         mean training loss over the last progress interval",
        "modes              gpu-adamw: dense AdamW on the device every step; offload-sync: every step",
        "                   gradients down, AdamW on the host, weights up (ZeRO-Offload-like);",
        "                   zenflow: top-k channels on the device every step, the rest summed on the",
        "                   host and updated once a window (by default the step waits for that update;",
        "                   overlap_step runs it beside the next window)",
    ]
    if backend == "host":
        lines += [
            "host backend       the \"device\" is the CPU too: gpu-adamw means AdamW on the host",
            "                   backend's \"device\" (host memory), and ms/step is CPU time shared by the model",
            "                   and the host optimizer, so it says little about speed on a GPU; the losses",
            "                   and the PCIe bytes are the real ones",
        ]
    return lines


def table(results):
    base = results[0][1]["summary"]
    head = ("mode", "ms/step", "x gpu-adamw", "stall %", "PCIe/step / model", "eval loss", "vs gpu-adamw",
            "train loss")
    rows = []
    for label, r in results:
        s = r["summary"]
        rows.append((
            label,
            f"{s['ms_per_step']:.2f}",
            f"{s['ms_per_step'] / base['ms_per_step']:.2f}" if base["ms_per_step"] > 0 else "-",
            f"{100 * s['stall_fraction']:.1f}",
            f"{s['pcie_model_ratio']:.3f}",
            f"{s['eval_loss_final']:.4f}",
            f"{100 * (s['eval_loss_final'] / base['eval_loss_final'] - 1):+.2f}%",
            f"{s['train_loss_final']:.4f}",
        ))
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="path to charlm_train (default: found under build/)")
    ap.add_argument("--json-out", help="write every run's JSON and the table here")
    ap.add_argument("--skip-none", action="store_true", help="skip the host_lr_scale=none run")
    ap.add_argument("--verbose", action="store_true", help="show each run's own progress table")
    ap.add_argument("--progress-every", type=int, default=50,
                    help="a progress line with the time left every N steps of each run (0: none; default 50)")
    ap.add_argument("--phase", choices=["scratch", "finetune"], default="scratch",
                    help="scratch: every mode from a fresh init; finetune: from dense-pretrained weights "
                         "on the shifted corpus")
    ap.add_argument("--pretrain-steps", type=int, default=300, help="--phase finetune: dense pretraining steps")
    args, extra = ap.parse_known_args()
    binary = find_binary(args.binary)
    runs = [r for r in RUNS if not (args.skip_none and "none" in r[0])]
    results = []
    phase_note = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.phase == "finetune":
            weights = os.path.join(tmp, "pretrained.bin")
            pre = run(binary, "pretrain (gpu-adamw, prose corpus)",
                      ["--optimizer", "gpu-adamw", "--save-weights", weights],
                      without_option(extra, "--steps") + ["--steps", str(args.pretrain_steps)], tmp, args.verbose, args.progress_every,
                      f"0/{len(runs)}")
            phase_note = (f"fine-tuning on the shifted corpus from weights pretrained with dense AdamW for "
                          f"{args.pretrain_steps} steps on the prose corpus (eval loss "
                          f"{pre['summary']['eval_loss_initial']:.4f} -> {pre['summary']['eval_loss_final']:.4f})")
            print(f"pretrained: {phase_note}", file=sys.stderr, flush=True)
            extra = extra + ["--init-weights", weights, "--corpus-style", "shifted"]
        for i, (label, flags) in enumerate(runs):
            position = f"{i + 1}/{len(runs)}"
            results.append((label, run(binary, label, flags, extra, tmp, args.verbose, args.progress_every, position)))
    settings = settings_lines(results, extra, phase_note)
    print("\nSettings")
    print("\n".join("  " + line for line in settings))
    print()
    text = table(results)
    print(text)
    print("\nLegend")
    print("\n".join("  " + line for line in legend_lines(results[0][1]["backend"])))
    print("\nMeasured results with their machines and what they mean: docs/benchmarks.md")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({
                "date": datetime.date.today().isoformat(),
                "machine": platform.node(),
                "args": extra,
                "phase": args.phase,
                "settings": settings,
                "table": text,
                "runs": {label: r for label, r in results},
            }, f, indent=2)
        print(f"JSON: {args.json_out}")


if __name__ == "__main__":
    main()
