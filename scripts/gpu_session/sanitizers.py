"""Stage `sanitize[=TOOLS]`: compute-sanitizer by binary, one item per (tool, binary), the tools
in the order memcheck, racecheck, synccheck, initcheck.

memcheck runs on every gpu binary; racecheck, synccheck and initcheck are slow, so they run on the
select, optim, transport and engine binaries, where shared memory, barriers and uninitialised
scratch live, and not on the sharded engine's (its collectives are NCCL's kernels, not ours to
check). Left out under the tools (`test` runs them): the engine's 300-step scenarios and, under
memcheck, the NCCL revoke test (`case_filter`)."""
import re

from .settings import GPU_TEST_TARGETS, SANITIZERS

SLOW_TOOL_TARGETS = re.compile(r"_(select|optim|transport|engine)_")


def tools_of(stage_words):
    """The tools that `sanitize` and `sanitize=a,b` words ask for, in the run order."""
    wanted = set()
    for word in stage_words:
        if word == "sanitize":
            wanted.update(SANITIZERS)
        elif word.startswith("sanitize="):
            wanted.update(word.removeprefix("sanitize=").split(","))
    return [t for t in SANITIZERS if t in wanted]


def targets_of(tool):
    return [t for t in GPU_TEST_TARGETS
            if tool == "memcheck" or (SLOW_TOOL_TARGETS.search(t) and t != "zf_engine_sharded_gpu_tests")]


def plan(ledger, stage_words):
    for tool in tools_of(stage_words):
        for t in targets_of(tool):
            ledger.add(f"{tool}:{t}", tool, t)


def tool_args(tool):
    return {"memcheck": ["--leak-check", "full"], "racecheck": ["--racecheck-report", "hazard"],
            "initcheck": ["--track-unused-memory", "no"]}.get(tool, [])


def case_filter(tool, target):
    """The gtest filter of one (tool, binary), or None."""
    if target == "zf_engine_gpu_tests":
        # 300 steps of several scenarios, host and GPU, take minutes under any sanitizer; the kernels
        # they run are the ones the reference cases run (kept), and `test` runs them unsanitized.
        return "--gtest_filter=-*three_hundred_step_scenarios*"
    if target == "zf_comm_nccl_gpu_tests" and tool == "memcheck":
        # The revoke test leaks on purpose: a revoked communicator keeps its buffers (NCCL or a copy may
        # still use them; include/zenflow/comm/nccl_communicator.cuh, the destructor), which
        # --leak-check full reports. It also spins a kernel on a host flag, slow under the tool. The
        # other NCCL cases keep the leak check; `test` runs the revoke one unsanitized.
        return "--gtest_filter=-*the_watchdog_revokes*"
    return None


def run_item(session, item, exe):
    r = session.runner
    if not r.start(item.key, session.s.per_binary_timeout):
        return
    tool = item.stage
    case = case_filter(tool, item.target)
    argv = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "1", *tool_args(tool), str(exe)]
    rc = r.exec(argv + ([case] if case else []), env=session.env(ZENFLOW_REQUIRE_GPU="1"))
    r.end(item.key, rc)
