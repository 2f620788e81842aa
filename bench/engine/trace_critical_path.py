#!/usr/bin/env python3
"""The per-step critical path of a zf_bench_pipeline trace (engine::write_trace on the emulated
device): where each step's time goes between one modelled forward and the next, and when and why
the D2H wire is idle.

  python3 bench/engine/trace_critical_path.py trace.json [--compute-ms 60] [--json out.json]

Per step (cycle = start of its forward to the start of the next step's forward):
  compute      the modelled forward + backward as it ran (start of forward to end of the last
               backward), against C: the excess is the device's sleep overshoot between ops
  after_bwd    end of the backward to the next forward, split into
    s1_kernels   the training stream's kernels (prologue norms, selective AdamW, a close's scatter):
                 real host code on this machine, microseconds on a GPU
    pack_tail    packs (pack stream) still running after the training stream's last kernel: the
                 next forward waits for them (gradient_release::at_step joins them in)
    other        what remains: thread wake-ups, the training thread's wait and enqueue
  job_ovl      the host job's window AdamW (host threads on the same cores) running after the
               backward, beside the kernels
  d2h          the wire: the copies that start in the cycle, their ms as run and as modelled
               (bytes / B; the difference is what the emulation added), and the
               idle ms split by what the next copy waited for (a pack still running: "packs";
               otherwise "other": the record, the ring, a wake-up)
"""
import argparse
import json
import statistics

S_TRAIN, S_UP, S_D2H, S_PACK = (2, 1), (2, 2), (2, 3), (2, 4)


def load(path):
    ev = json.load(open(path))["traceEvents"]
    spans = [e for e in ev if e["ph"] == "X"]
    for e in spans:
        e["t0"] = e["ts"] / 1e3
        e["t1"] = (e["ts"] + e["dur"]) / 1e3
        e["key"] = (e["pid"], e["tid"])
    spans.sort(key=lambda e: e["t0"])
    return spans


def busy_in(spans, a, b):
    """Union length of spans clipped to [a, b)."""
    iv = sorted((max(a, s["t0"]), min(b, s["t1"])) for s in spans if s["t1"] > a and s["t0"] < b)
    total, cur0, cur1 = 0.0, None, None
    for x0, x1 in iv:
        if cur1 is None or x0 > cur1:
            if cur1 is not None:
                total += cur1 - cur0
            cur0, cur1 = x0, x1
        else:
            cur1 = max(cur1, x1)
    if cur1 is not None:
        total += cur1 - cur0
    return total


def analyse(spans, compute_ms, bps):
    fwd = [s for s in spans if s["key"] == S_TRAIN and s["name"] == "forward"]
    bwd = [s for s in spans if s["key"] == S_TRAIN and s["name"] == "backward"]
    kern = [s for s in spans if s["key"] == S_TRAIN and s["cat"] == "kernel"]
    packs = [s for s in spans if s["key"] == S_PACK]
    d2h = [s for s in spans if s["key"] == S_D2H]
    steps = [s for s in spans if s["key"] == (1, 1) and s["cat"] == "step"]
    jobs = [s for s in spans if s["key"] == (1, 3)]
    rows = []
    for i in range(len(fwd) - 1):
        a, b = fwd[i]["t0"], fwd[i + 1]["t0"]
        bw = [s for s in bwd if a <= s["t0"] < b]
        if not bw:
            continue
        bwd_end = max(s["t1"] for s in bw)
        k = [s for s in kern if bwd_end <= s["t0"] < b]
        p = [s for s in packs if bwd_end <= s["t0"] < b]
        k_busy = busy_in(k, bwd_end, b)
        k_end = max([s["t1"] for s in k], default=bwd_end)
        pack_tail = max(0.0, min(b, max([s["t1"] for s in p], default=k_end)) - k_end)
        after = b - bwd_end
        # The wire in this cycle: busy, modelled, idle gaps and what the next copy waited for.
        c = [s for s in d2h if a <= s["t0"] < b]
        busy = sum(s["t1"] - s["t0"] for s in c)  # the copies that start in the cycle, whole
        modelled = sum(s.get("args", {}).get("bytes", 0) for s in c) / bps * 1e3 if bps else 0.0
        idle_packs = idle_other = 0.0
        prev_end = max([s["t1"] for s in d2h if s["t0"] < a], default=a)
        for s in c:
            gap = s["t0"] - max(prev_end, a)
            if gap > 0.05:
                # A pack that ended within 0.3 ms before this copy: the copy waited for it.
                fed = [q for q in packs if q["t1"] <= s["t0"] + 0.01 and q["t1"] > max(prev_end, a)]
                if fed:
                    idle_packs += gap
                else:
                    idle_other += gap
            prev_end = max(prev_end, s["t1"])
        stall = sum(s.get("args", {}).get("stall_us", 0) for s in steps if a <= s["t0"] < b) / 1e3
        rows.append({
            "step": i,
            "cycle_ms": b - a,
            "compute_ms": bwd_end - a,
            "compute_excess_ms": bwd_end - a - compute_ms,
            "after_backward_ms": after,
            "s1_kernels_ms": k_busy,
            "s1_kernels": {n: sum(s["dur"] for s in k if s["name"] == n) / 1e3 for n in sorted({s["name"] for s in k})},
            "packs_busy_ms": busy_in(p, bwd_end, b),
            "pack_tail_ms": pack_tail,
            "after_other_ms": after - k_busy - pack_tail,
            "d2h_busy_ms": busy,
            "d2h_modelled_ms": modelled,
            "d2h_copies": len(c),
            "d2h_idle_waiting_packs_ms": idle_packs,
            "d2h_idle_other_ms": idle_other,
            "engine_stall_ms": stall,
            # The host job's window AdamW (host_threads threads) running beside the kernels.
            "host_job_overlap_ms": busy_in(jobs, bwd_end, b),
        })
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--compute-ms", type=float, default=60.0)
    ap.add_argument("--pcie-gbps", type=float, default=0.709, help="B, GB/s (the bench prints it)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    rows = analyse(load(a.trace), a.compute_ms, a.pcie_gbps * 1e9)
    cols = ["cycle_ms", "compute_ms", "compute_excess_ms", "after_backward_ms", "s1_kernels_ms", "pack_tail_ms",
            "after_other_ms", "packs_busy_ms", "d2h_busy_ms", "d2h_modelled_ms", "d2h_idle_waiting_packs_ms",
            "d2h_idle_other_ms", "engine_stall_ms", "host_job_overlap_ms"]
    short = ["cycle", "compute", "c_exc", "after_bw", "s1_kern", "pk_tail", "other", "packs", "d2h_busy",
             "d2h_mod", "idle_pk", "idle_oth", "stall", "job_ovl"]
    print("step " + " ".join(f"{c:>8s}" for c in short))
    for r in rows:
        print(f"{r['step']:4d} " + " ".join(f"{r[c]:8.2f}" for c in cols))
    med = {c: statistics.median(r[c] for r in rows) for c in cols}
    print("med  " + " ".join(f"{med[c]:8.2f}" for c in cols))
    for label, sel in (("with", [r for r in rows if r["host_job_overlap_ms"] > 0.5]),
                       ("without", [r for r in rows if r["host_job_overlap_ms"] <= 0.5])):
        if sel:
            print(f"  cycles {label} the host job after the backward: {len(sel)}, median cycle "
                  f"{statistics.median(r['cycle_ms'] for r in sel):.2f} ms, after the backward "
                  f"{statistics.median(r['after_backward_ms'] for r in sel):.2f} ms")
    names = sorted({n for r in rows for n in r["s1_kernels"]})
    kmed = {n: statistics.median(r["s1_kernels"].get(n, 0.0) for r in rows) for n in names}
    for n in names:
        print(f"  training stream after the backward, median ms: {n}: {kmed[n]:.2f}")
    if a.json:
        json.dump({"trace": a.trace, "compute_ms": a.compute_ms, "median": med, "kernels_median": kmed,
                   "steps": rows}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
