#!/usr/bin/env python3
"""When a step's packs and copies start, from zf_bench_pipeline traces (engine::write_trace on the
emulated device): per cycle, from the end of the modelled backward to the start of the first pack
(the pack stream), to the end of the prologue (finish_scalars) and to the start of the first
gradient D2H copy (64 KiB and more: the records' copies are smaller). Medians over the cycles of
all traces given, the first cycle of each left out (selection, warm-up).

  python3 bench/engine/trace_pack_start.py t1.json [t2.json ...]
"""
import json
import statistics
import sys


def cycles(path):
    ev = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    for e in ev:
        e["t0"] = e["ts"] / 1e3
        e["t1"] = (e["ts"] + e["dur"]) / 1e3
    fwd = sorted(e["t0"] for e in ev if e["name"] == "forward")
    bwd = [e for e in ev if e["name"] == "backward"]
    rows = []
    for a, b in zip(fwd, fwd[1:]):
        bw = [e["t1"] for e in bwd if a <= e["t0"] < b]
        if not bw:
            continue
        end = max(bw)
        nxt = [x for x in fwd if x > end]
        lim = nxt[0] if nxt else b
        pk = [e["t0"] for e in ev if e["name"] == "zenflow::engine: gather_channels" and end <= e["t0"] < lim]
        fs = [e["t1"] for e in ev if e["name"] == "zenflow::engine: finish_scalars" and end <= e["t0"] < lim]
        cp = [e["t0"] for e in ev
              if e["cat"] == "copy D2H" and e.get("args", {}).get("bytes", 0) >= 65536 and e["t0"] >= end]
        if pk and fs and cp:
            rows.append((min(pk) - end, max(fs) - end, min(cp) - end))
    return rows[1:]


def main():
    rows = [r for path in sys.argv[1:] for r in cycles(path)]
    for i, name in enumerate(("first pack", "prologue end", "first gradient D2H copy")):
        print(f"{name}: median {statistics.median(r[i] for r in rows):.2f} ms after the backward (n={len(rows)})")


if __name__ == "__main__":
    main()
