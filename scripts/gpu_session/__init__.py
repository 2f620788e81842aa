"""Runs zenflow's GPU checks on a lent GPU machine (H100/H200) that has nvcc, CMake, ninja,
compute-sanitizer and python3 with torch, but none of our C++ dependencies and no network.

A task that draws a GPU gets 15 minutes of device time in all, the machine's start included; one
command runs at most 10 minutes and is then killed, and what it left under $OUT (at most 8 files)
is all that comes back. So the GPU binaries are built HERE beforehand and carried, and a call never
keeps its results for the end: a kill at any moment still returns them.

  scripts/gpu-session prepare [--no-prebuild]
        HERE (Debian dev machine, no device time): copy the C++ dependencies into .carry/prefix,
        then build the GPU binaries for sm_90 (build/gpu-prebuild; ~15-20 min on 2 cores) and copy
        them into .carry/bin with the hash of the sources they were built from. Both are
        git-ignored; carry ".carry". Fails when what travels (tracked and untracked-not-ignored
        files, shared/, .carry) would exceed 60 MiB (the tool refuses 64).
  scripts/gpu-session run [--resume SUMMARY] [--fresh] STAGE...
        THERE (device tool, carry [".carry"]): run the stages' items
  scripts/gpu-session plan
        print the calls of a session that fits 15 minutes of device time
  scripts/gpu-session selftest
        HERE and in CI (ctest -L cpu): the stage selection, the plan and the report's parsing;
        then whole calls over fake GPU binaries (one passes, one fails, one hangs, one cannot
        load), a budget of seconds and a SIGKILL at the budget as the machine would send it,
        asserting what $OUT then holds

Stages, always run in this order (value per second of device time), whatever the command says:
  test               every gpu test binary with ZENFLOW_REQUIRE_GPU=1 (a skip fails)
  pipeline           zf_bench_pipeline_cuda, issue 11's benchmark on the CUDA backend (its JSON
                     checked by check_pipeline_json.py; ZF_GPU_SESSION_PIPELINE_ARGS sets the size)
  trainer            the example trainer's three-mode table on the CUDA backend (--backend cuda:
                     no silent fall back to the host backend)
  bench              the GPU cases of the Google Benchmark programs, then the torch baselines
  sanitize[=TOOLS]   compute-sanitizer by binary; TOOLS is a comma list of memcheck,racecheck,
                     synccheck,initcheck (default: all four, in that order); sanitizers.py says
                     which binaries and cases each tool runs
  test-cpu           the cpu suite in build/gpu (builds everything there first; CI runs it anyway)
  all                test pipeline trainer bench sanitize
  build              accepted for older commands; binaries are found (or built) per stage

The unit of work is an ITEM, a (stage, binary) pair such as test:zf_core_gpu_tests or
memcheck:zf_engine_gpu_tests. Binaries come from .carry/bin when it was built from these very
sources and the binary loads here (ldd); one that cannot load is dropped alone. What a stage still
lacks is then built in build/gpu (the targets that stage needs only, one timed item build:STAGE).

Time: the call's budget is ZF_GPU_SESSION_BUDGET seconds (default 540) from the program's start.
Each item's timeout is min(its own, budget - elapsed - ZF_GPU_SESSION_MARGIN (default 15)); own
timeouts: ZF_GPU_SESSION_TIMEOUT (150 s) for a test, sanitizer or benchmark binary, twice that for
the pipeline and the trainer, ZF_GPU_SESSION_BUILD_TIMEOUT (300) for a build. An item killed by the
budget is "cut-off", one that ran past its own timeout is "timeout" (a failure); with under
ZF_GPU_SESSION_MIN_ITEM (20) seconds left nothing more starts ("not-run"). So the program ends
inside the budget, and the device tool's timeout_s is the budget plus ~20 s.

Resume: the item statuses live in build/gpu-session/state.txt (ZF_GPU_SESSION_STATE), which stays
on the machine while it is held; a later call runs the items not passed, failed or absent there,
first the one the last call stopped in. On a fresh machine, give it the summary.txt that call
returned instead: copy it into .carry/ here and add `--resume .carry/summary-call1.txt`. A state or
summary of other sources is not resumed. --fresh ignores both.

Output, in $OUT (at most 5 files, the tool takes 8): summary.txt, rewritten whole before each item
starts (the item named "cut-off ... running since" until it ends) and after it ends; the archive
gpu-session-STAMP.tar.gz (logs, gtest XML, JSON), re-packed after each item; current.log, the output
of the item running now (what a kill leaves of it); and for an instant the *.part files of those
rewrites. Unpack the archives into bench/results/DATE-h100 (or -h200). The exit status is 1 when an
item failed or timed out, 3 when items remain for a next call, 2 for a wrong command, else 0.

Other knobs (the selftest's, and dry runs here): ZF_GPU_SESSION_CARRY (.carry), _STATE, _WORK
(build/gpu-session), _BUILD_DIR (the fallback build's tree, build/gpu), _BUILD (run from a tree
already built, nothing built), _NO_BUILD=1, _SOURCE_HASH, _TRAVEL_LIMIT_MIB (60), _WRITE_AT_END=1
(the selftest's negative check only: results kept for the end, as a first version once did).

The modules, one per stage of a session:
  settings.py    the knobs above, the target lists, the source hash
  prepare.py     HERE: the carried prefix and binaries, what travels
  build.py       the fallback build on the device (configure, build, what each target became)
  binaries.py    where each target's binary comes from (carried, built here, absent)
  items.py       the items of a call and their statuses (the ledger)
  report.py      summary.txt, the state file, the archive: written, and read back to resume
  runner.py      one item under the call's budget: its timeout, its log, its status
  tests.py, sanitizers.py, benchmarks.py
                 the stages' items and the command each runs
  session.py     `run`: the stages in order, builds where needed, the exit status
  plan.py        the text of `plan`
  selftest.py    `selftest`
Python 3.11, standard library only (the GPU machine is bare).
"""
