#!/usr/bin/env python3
"""Baseline for bench/optim: torch.optim.AdamW step time on N fp32 parameters.

    python3 bench/optim/torch_adamw.py --device cpu  [--params 64M] [--threads N]
    python3 bench/optim/torch_adamw.py --device cuda [--params 256M]

Measures the foreach and fused implementations (fused on CPU needs torch >= 2.4): one warm-up
step each, then --rounds interleaved rounds (foreach, fused, foreach, ...), and prints one JSON
line per variant: the median ms per step (and min, max), threads, and GB/s counted like zenflow's
benchmark (28 bytes per parameter: read g p m v, write p m v). torch is not a dependency of the
build.
"""
import argparse
import json
import statistics
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
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    n = parse_count(a.params)
    dev = torch.device(a.device)
    variants = {}
    for variant in ("foreach", "fused"):
        p = torch.nn.Parameter(torch.zeros(n, dtype=torch.float32, device=dev))
        p.grad = torch.full((n,), 0.01, dtype=torch.float32, device=dev)
        kw = {"foreach": True} if variant == "foreach" else {"fused": True}
        try:
            opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
            opt.step()  # warm-up: creates the state
        except (RuntimeError, TypeError) as e:
            print(json.dumps({"variant": variant, "error": str(e)[:200]}))
            continue
        variants[variant] = (opt, p, [])
    for _ in range(a.rounds):  # interleaved, so that a noisy moment hits every variant alike
        for variant, (opt, _p, times) in variants.items():
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    for variant, (_opt, _p, times) in variants.items():
        med = statistics.median(times)
        print(json.dumps({"torch": torch.__version__, "device": a.device, "threads": torch.get_num_threads(),
                          "variant": variant, "params": n, "rounds": a.rounds, "ms": round(med * 1e3, 3),
                          "ms_min": round(min(times) * 1e3, 3), "ms_max": round(max(times) * 1e3, 3),
                          "GBps": round(28.0 * n / med / 1e9, 2)}))


if __name__ == "__main__":
    main()
