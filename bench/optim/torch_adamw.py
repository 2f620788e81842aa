#!/usr/bin/env python3
"""Baseline for bench/optim: torch.optim.AdamW step time on N fp32 parameters.

    python3 bench/optim/torch_adamw.py --device cpu  [--params 64M] [--threads N]
    python3 bench/optim/torch_adamw.py --device cuda [--params 256M]

Measures the foreach and fused implementations (fused on CPU needs torch >= 2.4) and prints
one JSON line per variant: ms per step and GB/s counted like zenflow's benchmark (28 bytes per
parameter: read g p m v, write p m v). torch is not a dependency of the build.
"""
import argparse
import json
import time

import torch


def parse_count(s):
    s = s.upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--params", default="64M")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    n = parse_count(a.params)
    dev = torch.device(a.device)
    for variant in ("foreach", "fused"):
        p = torch.nn.Parameter(torch.zeros(n, dtype=torch.float32, device=dev))
        p.grad = torch.full((n,), 0.01, dtype=torch.float32, device=dev)
        kw = {"foreach": True} if variant == "foreach" else {"fused": True}
        try:
            opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
            opt.step()  # creates the state
        except (RuntimeError, TypeError) as e:
            print(json.dumps({"variant": variant, "error": str(e)[:200]}))
            continue
        best = float("inf")
        for _ in range(a.steps):
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        print(json.dumps({"torch": torch.__version__, "device": a.device, "threads": torch.get_num_threads(),
                          "variant": variant, "params": n, "ms": round(best * 1e3, 3),
                          "GBps": round(28.0 * n / best / 1e9, 2)}))
        del opt, p


if __name__ == "__main__":
    main()
