#!/usr/bin/env python3
"""Whether the engine's "host job not done" stalls cost device time, from a zf_bench_pipeline trace
(overlap_step): for each such stall of the training thread, how long the device's training stream
still had the step's modelled forward + backward ahead when the stall ended (the trainer enqueues
them before step(); > 0: the device was busy all through the stall), and the host job it waited
for (its window AdamW span, relative to the stall's start).

  python3 bench/engine/trace_stall_slack.py trace.json
"""
import json
import sys


def main():
    ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
    for e in ev:
        e["t0"] = e["ts"] / 1e3
        e["t1"] = (e["ts"] + e["dur"]) / 1e3
    bwd = [e for e in ev if e["pid"] == 2 and e["name"] == "backward"]
    fwd = [e for e in ev if e["pid"] == 2 and e["name"] == "forward"]
    jobs = [e for e in ev if e["pid"] == 1 and e["tid"] == 3]
    for s in ev:
        if not (s["pid"] == 1 and s["tid"] == 1 and s["name"] == "stall: host job not done"):
            continue
        # The forward the trainer enqueued right before this step(): the first one still running
        # (or about to) when the stall starts.
        cand = sorted((x for x in fwd if x["t1"] > s["t0"] - 25), key=lambda x: x["t0"])
        if not cand:
            continue
        f = cand[0]
        bw_end = max(x["t1"] for x in bwd if f["t1"] - 0.01 <= x["t0"] < f["t1"] + 45)
        job = [j for j in jobs if j["t0"] < s["t1"] + 0.5 and j["t1"] > s["t0"] - 0.5]
        js = ", ".join(f"job {j['t0'] - s['t0']:+.1f}..{j['t1'] - s['t0']:+.1f}" for j in job)
        print(f"stall {s['dur'] / 1e3:5.2f} ms; device backward of that step ends "
              f"{bw_end - s['t1']:+6.1f} ms after the stall ends; {js}")


if __name__ == "__main__":
    main()
