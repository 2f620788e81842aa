#!/usr/bin/env python3
"""Baseline for bench/select: torch.topk(sorted=False) and a torch channel-norm reduction on the
same shapes as zenflow's benchmarks, printed as JSON.

    python3 bench/select/torch_topk.py                  # CUDA: events, L2 flushed before each call
    python3 bench/select/torch_topk.py --device cpu [--threads N]

Every case gets a warm-up call, then --rounds interleaved rounds over all cases (so that a noisy
moment hits every case alike); each row reports the median. Each row says how many threads ran
it: on the CPU torch.topk parallelises over rows only, so top-k of one 1-D tensor runs on one
thread whatever torch.get_num_threads() says (zenflow's host top-k splits one row over its
pool), while the channel norms use torch's intra-op threads. torch is never a build or CI
dependency."""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=21)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    intra = torch.get_num_threads()
    flush = torch.empty(int(256e6), dtype=torch.uint8, device=dev) if cuda else None
    g = torch.Generator(device=dev).manual_seed(3)
    cases = []  # (row, fn)
    for n in (1 << 20, 1 << 22, 1 << 24):
        s = torch.randn(n, device=dev, generator=g) ** 2
        for pct in (1, 5, 10):
            k = max(1, n * pct // 100)
            cases.append(({"name": "torch_topk_unsorted", "n": n, "k_percent": pct,
                           "threads": "gpu" if cuda else 1},
                          lambda s=s, k=k: torch.topk(s, k, sorted=False)))
    for channels, length in ((4096, 4096), (4096, 11008), (8192, 28672)):
        w = torch.randn(channels, length, device=dev, dtype=torch.bfloat16, generator=g)
        row = {"channels": channels, "len": length, "threads": "gpu" if cuda else intra, "bytes": 2 * channels * length}
        cases.append((dict(row, name="torch_channel_sq_norms"), lambda w=w: w.float().pow(2).sum(dim=1)))
        cases.append((dict(row, name="torch_channel_vector_norm"),
                      lambda w=w: torch.linalg.vector_norm(w, dim=1, dtype=torch.float32)))

    def once(fn):
        if cuda:
            flush.zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            return start.elapsed_time(stop) * 1e3
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6

    for _, fn in cases:  # warm-up
        once(fn)
    times = [[] for _ in cases]
    for _ in range(a.rounds):
        for i, (_, fn) in enumerate(cases):
            times[i].append(once(fn))
    out = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           "intra_op_threads": intra, "rounds": a.rounds, "results": []}
    for (row, _), t in zip(cases, times):
        r = dict(row, us=statistics.median(t), us_min=min(t))
        if "bytes" in r:
            r["GBps"] = r["bytes"] / r["us"] / 1e3
        out["results"].append(r)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
