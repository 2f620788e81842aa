#!/usr/bin/env python3
"""Checks a pipeline benchmark's JSON (zf_bench_pipeline or zf_bench_pipeline_cuda) against its own
raw columns, recomputed here independently of the program:

- every expected mode is there, every number finite (null only where a device does not measure it);
- the bound is issue 11's max(C, down / B_down, up / B_up, host window / S, accumulation) of the
  file's own terms, its name the largest term's, and x bound = mean step / bound;
- the ratios to gpu_adamw and offload_sync are the mean steps' quotients;
- the mean step is within [min, max] of the step times, stall share in [0, 1];
- bytes at a fixed S (no selection in the timed steps): down, the unselected rows, (channels - k) x
  len x 2 B per matrix, k = max(1, floor(r x channels)), plus under 1 KiB of step record; up, exactly
  1 / S of those rows; gpu_adamw moves only the step record's header;
- the selected rows' state on the device: 12 B per element of the k rows (once: no doubled copy),
  plus at most 16 B per channel; where the device was asked (the GPU program), the memory it says
  the engine took within 5% + 64 MiB of the engine's own count;
- host B/p is the whole host footprint (state + accumulators + ring + upload + landing) over the
  parameters, and the planner's (zenflow::plan, files from 2026-11-28 on) host bytes equal the
  engine's buffer by buffer;
- the planner's predicted step, recomputed here for ZenFlow at a fixed S: max(C + K, down / B, up / B,
  window bytes / S / H, accumulation bytes / H) with K the device's kernel time after the backward
  (the device's own step time beside C, measured in the run), down = the unselected rows (bf16), up = down /
  S, a window 34 B per unselected element (26 with bf16 moments), an accumulation 10 B, and H the
  host bandwidth the file records (the standalone accumulation's bytes over its time), and
  x_predicted = mean / predicted. With --prediction-within F every such mode's mean step must be
  within F of it (the issue's 10%: F = 0.1); with --rss-within F the process's resident growth
  over the engine's construction and warm-up must be within F of what the engine counts, plus the
  file's rss_allowance_bytes (the emulated device's quarantine of freed memory, 64 MiB) (ZenFlow
  modes: gpu_adamw never touches its ring and staging, offload_sync not every slot of them).

  check_pipeline_json.py FILE [--modes LABEL,LABEL,...] [--standard-modes] [--self-test]
                         [--prediction-within F] [--rss-within F]
Prints one line per check group and exits 1 on the first failure, naming it. --self-test then
makes sure each check can fail: it alters a copy of FILE's numbers one way at a time (a byte count,
a ratio, the bound, the device state) and expects the check to refuse every copy.
"""
import argparse
import copy
import json
import math
import sys


class CheckFailed(Exception):
    pass


def fail(what):
    raise CheckFailed(what)


# Relative tolerance of a comparison: the file's printed precision ("number_digits"; files before
# 2026-11-27 have none and print 6 significant digits), set by check().
TOLERANCE = 2e-5


def close(a, b, rel=None):
    """Equal within the JSON's printed precision."""
    return abs(a - b) <= (TOLERANCE if rel is None else rel) * max(abs(a), abs(b), 1e-300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--self-test", action="store_true", help="then check that altered copies are refused")
    ap.add_argument("file")
    ap.add_argument("--modes", default="", help="comma-separated labels that must be present")
    ap.add_argument("--standard-modes", action="store_true",
                    help="require the programs' eight: gpu_adamw, offload_sync, zenflow S = 2, 4, auto x r = 0.05, 0.1")
    ap.add_argument("--prediction-within", type=float, default=None,
                    help="require |mean / predicted - 1| <= F for ZenFlow at a fixed S")
    ap.add_argument("--rss-within", type=float, default=None,
                    help="require the resident growth within F of the engine's count")
    args = ap.parse_args()
    if args.standard_modes:
        args.modes += ",gpu_adamw,offload_sync," + ",".join(
            f"zenflow S={S} r={r}" for r in ("0.05", "0.1") for S in ("2", "4", "auto"))
    d = json.load(open(args.file))
    try:
        check(d, args)
    except CheckFailed as e:
        print(f"check_pipeline_json: FAILED: {e}")
        sys.exit(1)
    print(f"check_pipeline_json: {args.file}: pipeline JSON ok")
    if args.self_test:
        self_test(d, args)


def self_test(d, args):
    """Each alteration must be refused (a check that cannot fail checks nothing)."""
    label = next(m["label"] for m in d["modes"] if m["label"].startswith("zenflow") and m["update_interval"] > 0)

    def alter(f):
        e = copy.deepcopy(d)
        f(next(m for m in e["modes"] if m["label"] == label))
        return e

    alterations = {
        "a byte up": lambda m: m.__setitem__("h2d_bytes_per_step", m["h2d_bytes_per_step"] + 1024),
        "4 KiB more down": lambda m: m.__setitem__("d2h_bytes_per_step", m["d2h_bytes_per_step"] + 4096),
        "x bound 1% off": lambda m: m.__setitem__("ratio_to_bound", m["ratio_to_bound"] * 1.01),
        "the bound 10% low": lambda m: m.__setitem__("bound_ms", m["bound_ms"] * 0.9),
        "the selected state doubled": lambda m: m["device_bytes"].__setitem__(
            "selected_state", 2 * m["device_bytes"]["selected_state"]),
        "a step time missing": lambda m: m["step_ms"].pop(),
        "x gpu_adamw 1% off": lambda m: m.__setitem__("x_gpu_adamw", m["x_gpu_adamw"] * 1.01),
    }
    if "plan" in d["modes"][0]:
        alterations.update({
            "the planned ring one slot more": lambda m: m["plan"]["host_bytes"].__setitem__(
                "ring", m["plan"]["host_bytes"]["ring"] + d["ring_slot_bytes"]),
            "the predicted step 5% low": lambda m: m["plan"].__setitem__(
                "predicted_step_ms", m["plan"]["predicted_step_ms"] * 0.95),
            "host B/p without the ring": lambda m: m.__setitem__(
                "host_bytes_per_param", m["host_bytes_per_param"] - m["host_bytes"]["ring"] / d["params"]),
        })
    for what, f in alterations.items():
        try:
            check(alter(f), args, say=lambda _: None)
        except CheckFailed:
            continue
        print(f"check_pipeline_json: FAILED: self-test: {what} in '{label}' passed the check")
        sys.exit(1)
    print(f"check_pipeline_json: self-test: all {len(alterations)} alterations of '{label}' refused")


def check(d, args, say=print):
    global TOLERANCE
    TOLERANCE = 5.0 * 10.0 ** (1 - d.get("number_digits", 6))
    modes = {m["label"]: m for m in d["modes"]}
    for label in filter(None, args.modes.split(",")):
        if label not in modes:
            fail(f"mode '{label}' missing (have {sorted(modes)})")
    if not modes:
        fail("no modes")
    down_bps = d.get("pcie_down_bytes_per_second", d["pcie_bytes_per_second"])
    up_bps = d.get("pcie_up_bytes_per_second", d["pcie_bytes_per_second"])
    model = d["model_bytes"]
    C = d["compute_ms"]
    channels = d["hidden"]
    nullable = {"d2h_tail_ms", "device_bytes_per_param_measured"}
    for label, m in modes.items():
        for key, v in m.items():
            if isinstance(v, float) or isinstance(v, int):
                if not math.isfinite(v):
                    fail(f"{label}: {key} = {v}")
            elif v is None and key not in nullable:
                fail(f"{label}: {key} is null")
        terms = {
            "compute": C,
            "d2h": m["d2h_bytes_per_step"] / down_bps * 1e3,
            "h2d": m["h2d_bytes_per_step"] / up_bps * 1e3,
            "host_window/S": m["host_window_ms_per_step"],
            "accumulate": m["accumulate_ms"],
        }
        name = max(terms, key=lambda k: terms[k])
        # Ties are common by design (B is set so that r = 0.1's D2H takes C): any term at the max.
        if not close(m["bound_ms"], terms[name]) or not close(terms.get(m["bound_term"], -1.0), terms[name]):
            fail(f"{label}: bound {m['bound_ms']} ({m['bound_term']}) but the terms give {terms[name]} ({name})")
        if not close(m["ratio_to_bound"], m["step_ms_mean"] / m["bound_ms"]):
            fail(f"{label}: x bound {m['ratio_to_bound']} != mean / bound")
        if not (m["step_ms_min"] <= m["step_ms_median"] <= m["step_ms_max"]):
            fail(f"{label}: median step outside [min, max]")
        if len(m["step_ms"]) != d["steps"] or len(m["stall_ms"]) != d["steps"]:
            fail(f"{label}: {len(m['step_ms'])} step times for {d['steps']} steps")
        if not (0.0 <= m["stall_share"] <= 1.0):
            fail(f"{label}: stall share {m['stall_share']}")
        pcie = (m["d2h_bytes_per_step"] + m["h2d_bytes_per_step"]) / model
        if not close(m["pcie_model_ratio"], pcie):
            fail(f"{label}: pcie_model_ratio {m['pcie_model_ratio']} != (down + up) / model {pcie}")
        params, layers = d["params"], d["matrices"]
        k = channels if label == "gpu_adamw" else max(1, math.floor(m["topk_ratio"] * channels))
        # The selected rows' fp32 master, m and v on the device (12 B an element, once: no doubled
        # copy), plus at most 16 B per channel of counts and indices.
        selected = m["device_bytes"]["selected_state"]
        if label != "offload_sync" and not (12 * k * channels * layers <= selected
                                            <= 12 * k * channels * layers + 16 * channels * layers):
            fail(f"{label}: selected state {selected} B on the device, 12 x k x len x matrices is "
                 f"{12 * k * channels * layers}")
        if label == "gpu_adamw":
            if m["h2d_bytes_per_step"] != 0 or m["d2h_bytes_per_step"] > 64:  # the step record's header
                fail(f"gpu_adamw moved {m['d2h_bytes_per_step']} B down, {m['h2d_bytes_per_step']} up a step")
        if label.startswith("zenflow") and m["update_interval"] > 0 and m["selections"] == 0:
            # Each step packs the unselected rows (bf16) down, with the step record (header and
            # Zen-auto's masses: under 1 KiB here); each window's weights go up once, 1 / S a step.
            S = m["update_interval"]
            rows_bytes = (channels - k) * channels * 2 * layers
            # (close(): files before 2026-11-27 print 6 significant digits)
            if not (close(m["d2h_bytes_per_step"], rows_bytes) or rows_bytes <= m["d2h_bytes_per_step"]) \
                    or m["d2h_bytes_per_step"] > rows_bytes + 1024:
                fail(f"{label}: {m['d2h_bytes_per_step']} B down a step, the unselected rows are {rows_bytes}")
            if d["steps"] % S == 0 and not close(m["h2d_bytes_per_step"], rows_bytes / S):
                fail(f"{label}: {m['h2d_bytes_per_step']} B up a step, the formula gives {rows_bytes / S}")
        measured = m.get("device_bytes_per_param_measured")
        if measured is not None:
            slack = 0.05 * m["device_bytes_per_param"] + 64 * 2**20 / params
            if abs(measured - m["device_bytes_per_param"]) > slack:
                fail(f"{label}: the device says {measured:.3f} B/param, the engine counts "
                     f"{m['device_bytes_per_param']:.3f}")
    say(f"check_pipeline_json: bounds, ratios and step times consistent in {len(modes)} modes")
    gpu, sync = modes.get("gpu_adamw"), modes.get("offload_sync")
    for label, m in modes.items():
        if gpu is not None and not close(m["x_gpu_adamw"], m["step_ms_mean"] / gpu["step_ms_mean"]):
            fail(f"{label}: x_gpu_adamw")
        if sync is not None and not close(m["offload_sync_over_this"],
                                          sync["step_ms_mean"] / m["step_ms_mean"]):
            fail(f"{label}: offload_sync_over_this")
    say("check_pipeline_json: ratios to gpu_adamw and offload_sync consistent")
    if "plan" in next(iter(modes.values())):
        check_plan(d, modes, args, say)


def check_plan(d, modes, args, say):
    """The whole host footprint, the planner's counts and its prediction (files from 2026-11-28)."""
    params, channels, layers, C = d["params"], d["hidden"], d["matrices"], d["compute_ms"]
    B = min(d.get("pcie_down_bytes_per_second", d["pcie_bytes_per_second"]),
            d.get("pcie_up_bytes_per_second", d["pcie_bytes_per_second"]))
    checked = 0
    for label, m in modes.items():
        hb, p = m["host_bytes"], m["plan"]
        if not close(m["host_bytes_per_param"], sum(hb.values()) / params):
            fail(f"{label}: host B/p {m['host_bytes_per_param']} != the buffers' sum over the parameters "
                 f"{sum(hb.values()) / params}")
        for key in ("state", "accumulators", "ring", "upload"):
            if not close(p["host_bytes"][key], hb[key]):
                fail(f"{label}: the planner counts {p['host_bytes'][key]} B of host {key}, the engine {hb[key]}")
        if not close(p["x_predicted"], m["step_ms_mean"] / p["predicted_step_ms"]):
            fail(f"{label}: x_predicted {p['x_predicted']} != mean / predicted")
        if p["within_10pct"] != (abs(p["x_predicted"] - 1) <= 0.10):
            fail(f"{label}: within_10pct {p['within_10pct']} for x_predicted {p['x_predicted']}")
        fixed_zen = label.startswith("zenflow") and m["update_interval"] > 0
        if p["checked"] != fixed_zen:
            fail(f"{label}: prediction checked = {p['checked']}")
        if fixed_zen:
            S, H = m["update_interval"], p["host_bytes_per_s"]
            k = max(1, math.floor(m["topk_ratio"] * channels))
            unsel = (channels - k) * channels * layers
            window = 26 if d.get("host_moments") == "bf16" else 34
            terms = [C + m["kernel_ms_after_backward"], unsel * 2 / B * 1e3, unsel * 2 / S / B * 1e3, unsel * window / S / H * 1e3,
                     unsel * 10 / H * 1e3]
            if not close(p["predicted_step_ms"], max(terms), 1e-6):
                fail(f"{label}: predicted step {p['predicted_step_ms']} ms, the formulas give {max(terms)}")
            if not close(terms[4], m["accumulate_ms"], 1e-6):
                fail(f"{label}: the planner's accumulation {terms[4]} ms is not the measured {m['accumulate_ms']}")
            checked += 1
            if args.prediction_within is not None and abs(p["x_predicted"] - 1) > args.prediction_within:
                fail(f"{label}: mean step {m['step_ms_mean']:.3f} ms is {p['x_predicted']:.3f}x the "
                     f"predicted {p['predicted_step_ms']:.3f} ms (allowed: within {args.prediction_within})")
        if args.rss_within is not None and m.get("rss_counted_bytes") is not None and label.startswith("zenflow"):
            growth = m["rss_at_warm_bytes"] - m["rss_before_bytes"]
            allowance = m.get("rss_allowance_bytes", 0)
            if abs(growth - m["rss_counted_bytes"]) > args.rss_within * m["rss_counted_bytes"] + allowance:
                fail(f"{label}: resident memory grew {growth / 1e6:.1f} MB, the engine counts "
                     f"{m['rss_counted_bytes'] / 1e6:.1f} MB (allowed: within {args.rss_within} + "
                     f"{allowance / 2**20:.0f} MiB)")
    say(f"check_pipeline_json: host footprint and the planner's counts consistent in {len(modes)} modes, "
        f"its prediction recomputed in {checked}" +
        ("" if args.prediction_within is None else f", each within {args.prediction_within}") +
        ("" if args.rss_within is None else f"; resident growth within {args.rss_within} of the count"))


if __name__ == "__main__":
    main()
