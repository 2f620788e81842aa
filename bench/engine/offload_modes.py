#!/usr/bin/env python3
"""The three-mode benchmark: the same model, seed and data trained with GPU-resident AdamW,
synchronous offload (ZeRO-Offload-like) and ZenFlow, printed as one table.

Runs the example trainer (examples/charlm, binary charlm_train) once per mode, ZenFlow with the
library's defaults (docs/defaults.md) plus ZenFlow with host_lr_scale "none" (DeepSpeed's
behaviour); reads each
run's --json-out; prints ms/step, the ratio to GPU-resident AdamW, the stall fraction, PCIe
bytes per step over the model size and the final losses. Arguments it does not know are passed
to every run (e.g. --size, --steps, --backend, --topk-ratio, --update-interval).

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


def run(binary, label, flags, extra, workdir, verbose):
    out = os.path.join(workdir, "".join(c if c.isalnum() else "_" for c in label) + ".json")
    cmd = [binary] + flags + extra + ["--json-out", out]
    if not verbose:
        cmd.append("--quiet")
    print(f"[{label}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=None if verbose else subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def zenflow_knob(result, key):
    return result.get("deepspeed_config", {}).get("zero_optimization", {}).get("zenflow", {}).get(key, "?")


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
    ap.add_argument("--verbose", action="store_true", help="show each run's progress lines")
    ap.add_argument("--phase", choices=["scratch", "finetune"], default="scratch",
                    help="scratch: every mode from a fresh init; finetune: from dense-pretrained weights "
                         "on the shifted corpus")
    ap.add_argument("--pretrain-steps", type=int, default=300, help="--phase finetune: dense pretraining steps")
    args, extra = ap.parse_known_args()
    binary = find_binary(args.binary)
    runs = [r for r in RUNS if not (args.skip_none and "none" in r[0])]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.phase == "finetune":
            weights = os.path.join(tmp, "pretrained.bin")
            pre = run(binary, "pretrain (gpu-adamw, prose corpus)",
                      ["--optimizer", "gpu-adamw", "--save-weights", weights], extra + [
                          "--steps", str(args.pretrain_steps)], tmp, args.verbose)
            print(f"pretrained: eval loss {pre['summary']['eval_loss_initial']:.4f} -> "
                  f"{pre['summary']['eval_loss_final']:.4f} on the prose corpus; fine-tuning on the shifted "
                  f"corpus", file=sys.stderr, flush=True)
            extra = extra + ["--init-weights", weights, "--corpus-style", "shifted"]
        for label, flags in runs:
            results.append((label, run(binary, label, flags, extra, tmp, args.verbose)))
    first = results[0][1]
    zen = results[2][1]
    m = first["model"]
    print(f"\ncharlm on the {first['backend']} backend: {m['parameters']:,} parameters "
          f"({m['bytes_bf16'] / 1e6:.1f} MB bf16; hidden {m['hidden']} x {m['layers']} layers), "
          f"{first['run']['steps']} steps of batch {first['run']['batch']}, seed {first['run']['seed']}"
          f"{', fine-tuning on the shifted corpus from dense-pretrained weights' if args.phase == 'finetune' else ''}; "
          f"zenflow topk_ratio {zenflow_knob(zen, 'topk_ratio')}, "
          f"update_interval {zenflow_knob(zen, 'update_interval')}, "
          f"host_lr_scale {zenflow_knob(zen, 'host_lr_scale')}\n")
    text = table(results)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({
                "date": datetime.date.today().isoformat(),
                "machine": platform.node(),
                "args": extra,
                "phase": args.phase,
                "table": text,
                "runs": {label: r for label, r in results},
            }, f, indent=2)
        print(f"\nJSON: {args.json_out}")


if __name__ == "__main__":
    main()
