#!/usr/bin/env python3
"""Exports golden vectors for zenflow's AdamW from torch.optim.AdamW / torch.optim.Adam.

Run by hand (torch is never a dependency of the build or of CI):
    python3 scripts/export_golden_adamw.py [out.json]
Writes tests/optim/golden/adamw_torch.json: for each case the hyper-parameters, the initial
fp32 parameters, the fp32 gradients of every step (already multiplied by the case's grad_scale
when it is not 1: torch has no scale, zenflow applies it inside the update, and g * s is
computed in fp32 here exactly as zenflow computes it), and torch's parameters after every step
plus the final moments.
"""
import json
import os
import sys

import torch

def F32(x):
    """x rounded to the nearest fp32 value, as a Python float."""
    return torch.tensor(x, dtype=torch.float32).item()


CASES = [
    # name, n, steps, lr, beta1, beta2, eps, weight_decay, decoupled, grad_scale
    ("adamw_plain", 37, 5, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, 1.0),
    ("adamw_decay", 64, 6, 3e-3, 0.9, 0.999, 1e-8, 0.1, True, 1.0),
    ("adamw_betas", 19, 8, 1e-2, 0.8, 0.95, 1e-6, 0.01, True, 1.0),
    ("adam_l2", 33, 5, 2e-3, 0.9, 0.999, 1e-8, 0.05, False, 1.0),
    ("adamw_scaled", 21, 4, 1e-3, 0.9, 0.999, 1e-8, 0.02, True, 0.125),
    # Betas that are exact fp32 values: torch computes 1 - beta in double from the Python float,
    # zenflow from the fp32 beta; with these betas both mean the same number, so the moments
    # agree to a few ulps (with 0.999 the two differ by 1.3e-5 relative in 1 - beta2).
    ("adamw_exact_betas", 45, 6, 2e-3, F32(0.9), F32(0.999), 1e-8, 0.05, True, 1.0),
    ("adam_l2_exact_betas", 29, 6, 2e-3, F32(0.9), F32(0.999), 1e-8, 0.05, False, 0.5),
]


def run_case(name, n, steps, lr, beta1, beta2, eps, wd, decoupled, scale, gen):
    p0 = torch.randn(n, generator=gen, dtype=torch.float32)
    grads = [torch.randn(n, generator=gen, dtype=torch.float32) * (1.0 + i) for i in range(steps)]
    param = torch.nn.Parameter(p0.clone())
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls([param], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd, foreach=False)
    params_after = []
    for g in grads:
        param.grad = g * torch.tensor(scale, dtype=torch.float32)
        opt.step()
        params_after.append(param.detach().clone())
    state = opt.state[param]
    f = lambda t: [float(x) for x in t.tolist()]
    return {
        "name": name,
        "n": n,
        "steps": steps,
        "lr": lr,
        "beta1": beta1,
        "beta2": beta2,
        "eps": eps,
        "weight_decay": wd,
        "decoupled": decoupled,
        "grad_scale": scale,
        "betas_fp32_exact": beta1 == F32(beta1) and beta2 == F32(beta2),
        "param0": f(p0),
        "grads": [f(g) for g in grads],
        "params": [f(p) for p in params_after],
        "exp_avg": f(state["exp_avg"]),
        "exp_avg_sq": f(state["exp_avg_sq"]),
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "tests", "optim", "golden", "adamw_torch.json")
    gen = torch.Generator().manual_seed(20261120)
    cases = [run_case(*c, gen) for c in CASES]
    doc = {"torch_version": torch.__version__, "note": "exported by scripts/export_golden_adamw.py", "cases": cases}
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=None, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
