"""Stages `test` (every gpu test binary, a skip failing) and `test-cpu` (the cpu suite in the
fallback build's tree, which it builds whole first; CI runs that suite anyway)."""
from . import build
from .settings import GPU_TEST_TARGETS

CPU_KEY = "test-cpu:ctest"
CPU_TIMEOUT = 300


def plan(ledger, wanted):
    if "test" in wanted:
        for t in GPU_TEST_TARGETS:
            ledger.add(f"test:{t}", "test", t)


def plan_cpu(ledger, wanted):
    if "test-cpu" in wanted:
        ledger.add(CPU_KEY, "test-cpu", "-")


def run_item(session, item, exe):
    r = session.runner
    if not r.start(item.key, session.s.per_binary_timeout):
        return
    xml = session.report.work / "xml"
    xml.mkdir(parents=True, exist_ok=True)
    rc = r.exec([str(exe), f"--gtest_output=xml:{xml}/test-{item.target}.xml"],
                env=session.env(ZENFLOW_REQUIRE_GPU="1"), line_buffered=True)
    r.end(item.key, rc)


def run_cpu_stage(session):
    """The cpu suite: in the tree given (built already), else after build:test-cpu builds
    everything in build/gpu."""
    ledger, r = session.ledger, session.runner
    if CPU_KEY not in ledger.order or not ledger.pending(CPU_KEY) or r.out_of_time:
        return
    if not session.s.given_build:
        if not session.s.builds_allowed:
            ledger.set(CPU_KEY, "failed", "-", f"needs a build of everything in {session.s.build_dir} "
                       "(builds are off here)")
            return
        build.build_item(session, "test-cpu", ["--all"])
        status = ledger["build:test-cpu"].status
        if status != "passed":
            if ledger["build:test-cpu"].done:
                ledger.set(CPU_KEY, "failed", "-", f"build:test-cpu {status}")
            return
    if r.start(CPU_KEY, CPU_TIMEOUT):
        rc = r.exec(["ctest", "--test-dir", str(session.s.build_dir), "-L", "cpu", "--output-on-failure", "-j", "8",
                     "--timeout", "300"])
        r.end(CPU_KEY, rc)
