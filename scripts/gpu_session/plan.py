"""The text of `plan`: the device calls of a GPU session that fits 15 minutes of device time."""
from .settings import DEFAULT_BUDGET, TIMEOUT_S_OVER_BUDGET

B, T = DEFAULT_BUDGET, DEFAULT_BUDGET + TIMEOUT_S_OVER_BUDGET

PLAN = f"""\
A GPU task has 15 minutes (900 s) of device time in all: the machine's start takes 1-2 minutes,
each call's transfers some seconds, and a warm machine's idle time counts too. So:
  here, first:  scripts/gpu-session prepare    (no device time: the GPU binaries built here, ~20 min;
                it fails if what travels would exceed 60 MiB) and change no source after it (a
                changed source makes .carry/bin stale: then the device builds, spending its minutes)
  call 1:  bash scripts/gpu-session run all
           device tool: carry [".carry"], timeout_s {T}. The program's budget is {B} s
           (ZF_GPU_SESSION_BUDGET); every item's timeout is cut to what is left of it, so the call
           ends by itself inside timeout_s, and summary.txt and the archive in $OUT are current
           after every item even if it does not. Items in order of value per second:
           gpu suite, pipeline benchmark, trainer table, GPU microbenchmarks and torch baselines,
           then memcheck by binary, then racecheck, synccheck, initcheck by binary.
  call 2, at once (the machine stays held ~30 s after a call) if status says >= 150 s are left:
           ZF_GPU_SESSION_BUDGET=B bash scripts/gpu-session run all
           B = budget_left_s - 60 (at most {B}), timeout_s = B + {TIMEOUT_S_OVER_BUDGET}. It resumes from
           build/gpu-session/state.txt on the machine: the item call 1 was cut off in first, then
           the ones it did not reach; passed, failed and absent items are not run again.
           If the machine was lost in between (a fresh one needs 4 minutes left to start): copy
           call 1's summary.txt to .carry/summary-call1.txt here and add
           --resume .carry/summary-call1.txt.
  then give_back.
Each call returns summary.txt (status of every item: passed, failed, timeout, cut-off, not-run,
absent), one archive and, if it was killed, current.log; unpack the archives into
bench/results/DATE-h100 (or -h200) and record the figures, dated, in docs/benchmarks.md.
"""
