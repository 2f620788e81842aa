#!/usr/bin/env python3
"""torch's CPU AdamW (fused and foreach) over the sizes of zf_host_sweep, sampled the same way.

    python3 bench/optim/torch_sweep.py [--threads 2] [--min 4096] [--max 67108864] [--factor 4]
                                       [--rounds 11] [--pause-ms 20] [--sample-mb 256] [--json FILE]

The sampling is zf_host_sweep's (bench/optim/host_sweep.cpp), so that the medians compare the same
thing: per size, one warm-up step per variant (it creates the state), then per round and variant a
pause, one untimed step (torch's threads slept through the pause, as zenflow's and DeepSpeed's
did), and `reps` timed steps back to back, with reps = ceil(sample_mb * 1e6 / (28 n)) for every
variant of a size. fp32 parameter, gradient and moments (28 bytes per parameter), lr 1e-3, weight
decay 0.01, normal random values. The order of the variants rotates every round. torch is not a
dependency of the build; bench/optim/host_sweep_vs_torch.py runs this and zf_host_sweep in
interleaved rounds and merges them.
"""
import argparse
import json
import math
import os
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min", type=int, default=4096)
    ap.add_argument("--max", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--pause-ms", type=float, default=20.0)
    ap.add_argument("--sample-mb", type=float, default=256.0)
    ap.add_argument("--json", default="torch_sweep.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "rounds": a.rounds,
           "pause_ms": a.pause_ms, "sample_mb": a.sample_mb, "sizes": []}
    n = a.min
    while n <= a.max:
        gen = torch.Generator().manual_seed(n)
        variants = []
        for name, kw in (("torch_fused", {"fused": True}), ("torch_foreach", {"foreach": True})):
            p = torch.nn.Parameter(torch.randn(n, generator=gen, dtype=torch.float32))
            p.grad = torch.randn(n, generator=gen, dtype=torch.float32)
            opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **kw)
            opt.step()  # warm-up: creates the state, first touch
            variants.append((name, opt, p, []))
        reps = max(1, math.ceil(a.sample_mb * 1e6 / (28.0 * n)))
        load_before = os.getloadavg()[0]
        for r in range(a.rounds):
            for k in range(len(variants)):
                name, opt, _p, samples = variants[(k + r) % len(variants)]
                time.sleep(a.pause_ms / 1e3)
                opt.step()
                t0 = time.perf_counter()
                for _ in range(reps):
                    opt.step()
                samples.append(1e6 * (time.perf_counter() - t0) / reps)
        row = {"n": n, "load_average_before": load_before, "load_average_after": os.getloadavg()[0]}
        for name, _opt, _p, samples in variants:
            med = statistics.median(samples)
            row[name] = {"median_us": med, "min_us": min(samples), "reps_per_sample": reps,
                         "bytes_per_param": 28.0, "GB_per_s": 28.0 * n / (med * 1e-6) / 1e9,
                         "samples_us": samples}
            print(f"{n:10d}  {name:<16s} {med:10.1f} us {row[name]['GB_per_s']:8.2f} GB/s", flush=True)
        out["sizes"].append(row)
        del variants
        n *= a.factor
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
