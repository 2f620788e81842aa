#!/usr/bin/env python3
"""Baseline for bench/select (gpu_topk, gpu_channel_norms_*): torch.topk(sorted=False) and a
torch channel-norm reduction on the same shapes, timed with CUDA events and an L2 flush, printed as
JSON. Run on the GPU machine in the same session as zf_bench_select; torch is never a build or CI
dependency."""
import json
import sys

import torch


def timed(fn, reps=50):
    flush = torch.empty(int(256e6), dtype=torch.uint8, device="cuda")
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    times.sort()
    return times[len(times) // 2]  # median, microseconds


def main():
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": []}
    g = torch.Generator(device="cuda").manual_seed(3)
    for n in (1 << 20, 1 << 22, 1 << 24):
        s = torch.randn(n, device="cuda", generator=g) ** 2
        for pct in (1, 5, 10):
            k = max(1, n * pct // 100)
            us = timed(lambda: torch.topk(s, k, sorted=False))
            out["results"].append({"name": "torch_topk_unsorted", "n": n, "k_percent": pct, "us": us})
    for channels, length in ((4096, 4096), (4096, 11008), (8192, 28672)):
        w = torch.randn(channels, length, device="cuda", dtype=torch.bfloat16, generator=g)
        us = timed(lambda: w.float().pow(2).sum(dim=1))
        us_fused = timed(lambda: torch.linalg.vector_norm(w, dim=1, dtype=torch.float32))
        out["results"].append({"name": "torch_channel_sq_norms", "channels": channels, "len": length, "us": us,
                               "us_vector_norm": us_fused, "GBps": 2 * channels * length / us / 1e3})
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
