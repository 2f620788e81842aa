"""`selftest`: the program without a GPU, here and in CI (ctest -L cpu, ~15 s).

First its parts: the stage selection, the plan, the summary read back, the exit status, the
source hash (against the sha256sum pipeline it replaced), an item's log and a command not found.
Then whole calls, side by side, over fake GPU binaries (one passes, one fails, one hangs, one cannot
load), fake compute-sanitizer, ldd, cmake and ninja, budgets of seconds and a SIGKILL of the call's
whole process session at a set second, as the device tool ends a command at its timeout_s; each
asserts what $OUT then holds. Call C writes its results only at the end (ZF_GPU_SESSION_WRITE_AT_END)
and must fail B's checks: the checks can tell."""
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest
from pathlib import Path

from . import items, plan, prepare, report, runner, session, settings

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "scripts/gpu-session"

FAKE_GTEST = """#!/usr/bin/env python3
import os, sys, time
mode = "{mode}"
with open(os.environ["ZF_FAKE_RAN"], "a") as f:
    f.write(os.path.basename(sys.argv[0]) + " " + os.environ.get("ZF_FAKE_UNDER", "plain") + "\\n")
print("[ RUN      ] fake.case", flush=True)
if mode == "hang" and os.path.exists(os.environ["ZF_FAKE_UNHANG"]):
    mode = "pass"
if mode == "pass":
    print("[       OK ] fake.case (0 ms)")
    print("[==========] 1 test from 1 test suite ran. (0 ms total)")
    sys.exit(0)
if mode == "fail":
    print("fake_test.cu:1: Failure")
    print("[  FAILED  ] fake.case")
    sys.exit(1)
time.sleep(30)
print("woke after 30 s: nothing stopped the hang")
sys.exit(1)
"""
# ldd: the carried optim binary misses a library (it is dropped alone; the others run).
FAKE_LDD = """#!/usr/bin/env python3
import sys
print("\\tlibzf_missing.so.1 => not found" if sys.argv[1].endswith("/carry/bin/zf_optim_gpu_tests")
      else "\\tnot a dynamic executable")
"""
# compute-sanitizer: runs the binary (the first executable argument) with the rest.
FAKE_SANITIZER = """#!/usr/bin/env python3
import os, sys
args = sys.argv[1:]
tool = args[args.index("--tool") + 1]
exe = next(i for i, a in enumerate(args) if os.path.isfile(a) and os.access(a, os.X_OK))
os.execve(args[exe], args[exe:], dict(os.environ, ZF_FAKE_UNDER=tool))
"""
# cmake: configure makes build.ninja; a build copies a passing binary for each --target (or hangs).
FAKE_CMAKE = """#!/usr/bin/env python3
import os, shutil, sys, time
args = sys.argv[1:]
with open(os.environ["ZF_FAKE_RAN"], "a") as f:
    f.write("cmake " + " ".join(args) + "\\n")
if args[0] == "--preset":
    folder = args[args.index("-B") + 1]
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, "build.ninja"), "w").close()
    sys.exit(0)
if os.environ.get("ZF_FAKE_SLOW_BUILD"):
    time.sleep(30)
folder = args[1]
os.makedirs(os.path.join(folder, "bin"), exist_ok=True)
targets = args[args.index("--target") + 1:]
for t in targets[:targets.index("--")] if "--" in targets else targets:
    shutil.copy(os.environ["ZF_FAKE_PASSING"], os.path.join(folder, "bin", t))
"""
# ninja: the targets the fake build defines (no NCCL ones), and "no work to do" for a built one.
FAKE_NINJA = """#!/usr/bin/env python3
import os, sys
folder = sys.argv[2]
if sys.argv[3] == "-t":
    for t in ("zf_core_gpu_tests", "zf_select_gpu_tests", "zf_optim_gpu_tests", "zf_transport_gpu_tests",
              "zf_engine_gpu_tests", "zf_examples_gpu_tests", "zf_bench_pipeline_cuda"):
        print(t + ": phony")
elif sys.argv[3] == "-n" and os.access(os.path.join(folder, "bin", sys.argv[4]), os.X_OK):
    print("ninja: no work to do.")
"""
FAKE_BINARIES = {"zf_core_gpu_tests": "pass", "zf_select_gpu_tests": "fail", "zf_optim_gpu_tests": "pass",
                 "zf_transport_gpu_tests": "hang"}


def write_program(path, text):
    path.write_text(text)
    path.chmod(0o755)


def session_pids(sid):
    """The processes of session `sid` (read from /proc: no ps needed)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[3] == str(sid):  # state, ppid, pgrp, session
            pids.append(int(stat.parent.name))
    return pids


def statuses(out):
    """{key: status} of the summary.txt in `out` ({} when there is none)."""
    summary = Path(out, "summary.txt")
    if not summary.is_file():
        return {}
    return {key: status for status, key, _, _ in report.read_summary(summary.read_text())[1]}


def archive_names(out):
    archives = list(Path(out).glob("gpu-session-*.tar.gz"))
    if not archives:
        return []
    with tarfile.open(archives[0]) as tar:
        return tar.getnames()


def problems(out, *expected):
    """What is wrong with what a call left in `out`: each expected "status key" missing from its
    summary, more than the 8 files the device tool returns, no archive holding the summary."""
    out = Path(out)
    if not (out / "summary.txt").is_file():
        held = [p.name for p in out.rglob("*") if p.is_file()] if out.is_dir() else []
        return [f"no summary.txt in $OUT (it holds: {' '.join(held)})"]
    found, bad = statuses(out), []
    for e in expected:
        status, key = e.split(" ", 1)
        if found.get(key) != status:
            bad.append(f"summary.txt does not say '{e}' (it says {found.get(key)})")
    n = sum(1 for p in out.rglob("*") if p.is_file())
    if n > 8:
        bad.append(f"{n} files in $OUT, the device tool returns 8")
    if not any(name.endswith("summary.txt") for name in archive_names(out)):
        bad.append("no archive holding summary.txt in $OUT")
    return bad


class Fixture:
    """The fake GPU binaries, tools and carried folders every call shares."""

    def __init__(self, tmp):
        self.tmp = Path(tmp)
        carry_bin, fakebin = self.tmp / "carry/bin", self.tmp / "fakebin"
        carry_bin.mkdir(parents=True)
        (self.tmp / "carry/prefix").mkdir()
        fakebin.mkdir()
        for name, mode in FAKE_BINARIES.items():
            write_program(carry_bin / name, FAKE_GTEST.format(mode=mode))
        (carry_bin / "SOURCE_HASH").write_text("selftest\n")
        (carry_bin / "TARGETS").write_text("".join(f"{t}\n" for t in FAKE_BINARIES))
        for name, text in (("ldd", FAKE_LDD), ("compute-sanitizer", FAKE_SANITIZER), ("cmake", FAKE_CMAKE),
                           ("ninja", FAKE_NINJA)):
            write_program(fakebin / name, text)
        # For I and J: a .carry/bin of other sources, so that the stage builds what it needs.
        shutil.copytree(self.tmp / "carry", self.tmp / "carry-stale")
        (self.tmp / "carry-stale/bin/SOURCE_HASH").write_text("stale\n")
        self.build_env = {"ZF_GPU_SESSION_CARRY": str(self.tmp / "carry-stale"), "ZF_GPU_SESSION_NO_BUILD": "0",
                          "ZF_FAKE_PASSING": str(carry_bin / "zf_core_gpu_tests")}

    def ran(self, name):
        """The lines the fakes wrote in call `name` ("BINARY TOOL", "cmake ARGS")."""
        path = self.tmp / f"ran-{name}.txt"
        return path.read_text().splitlines() if path.is_file() else []


class Call:
    """One device call: the program in its own session, and a watchdog that SIGKILLs every process
    of that session at `kill_at` seconds if it still runs (as the device tool ends a command), or
    with `polite`, sends the program alone a TERM then."""

    def __init__(self, fx, name, budget, kill_at, args, polite=False, **extra_env):
        self.fx, self.name = fx, name
        self.out = fx.tmp / f"out-{name}"
        self.out.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZF_GPU_SESSION_")}
        t = fx.tmp
        env.update(OUT=str(self.out), ZF_GPU_SESSION_CARRY=str(t / "carry"),
                   ZF_GPU_SESSION_STATE=str(t / f"state-{name}.txt"),
                   ZF_GPU_SESSION_WORK=str(t / f"work-{name}"), ZF_GPU_SESSION_SOURCE_HASH="selftest",
                   ZF_GPU_SESSION_NO_BUILD="1", ZF_GPU_SESSION_BUDGET=str(budget), ZF_GPU_SESSION_MARGIN="2",
                   ZF_GPU_SESSION_MIN_ITEM="1", ZF_FAKE_RAN=str(t / f"ran-{name}.txt"),
                   ZF_FAKE_UNHANG=str(t / f"unhang-{name}"), PATH=f"{t / 'fakebin'}{os.pathsep}{os.environ['PATH']}")
        env.update(extra_env)
        with open(t / f"stdout-{name}.txt", "w") as log:
            self.proc = subprocess.Popen([str(PROGRAM), "run", *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.killed, self.polite = False, polite
        self.watchdog = threading.Thread(target=self._watch, args=(kill_at,))
        self.watchdog.start()

    def _watch(self, kill_at):
        deadline = time.monotonic() + kill_at
        while self.proc.poll() is None:
            if time.monotonic() >= deadline:
                if self.polite:
                    self.proc.send_signal(signal.SIGTERM)
                else:
                    self.kill_session()
                self.killed = True
                return
            time.sleep(0.05)

    def kill_session(self):
        for pid in session_pids(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self):
        """(killed, exit status); nothing of the call's session outlives it (what was left when the
        program ended is in `leftover`)."""
        self.watchdog.join()
        rc = self.proc.wait()
        self.leftover = session_pids(self.proc.pid)
        self.kill_session()
        return self.killed, rc


def call_output(fx):
    return "".join(f"## {p.name}\n{p.read_text()}" for p in sorted(fx.tmp.glob("stdout-*.txt")))


# --- the parts ----------------------------------------------------------------------------------
class StageSelection(unittest.TestCase):
    def keys(self, *words):
        ledger = items.Ledger()
        _, _, stage_words = session.parse_args(list(words), "/")
        session.plan_items(ledger, stage_words, ROOT)
        return ledger.order

    def test_the_stage_order_holds_whatever_the_words_order(self):
        tests = [f"test:{t}" for t in settings.GPU_TEST_TARGETS]
        memcheck = [f"memcheck:{t}" for t in settings.GPU_TEST_TARGETS]
        racecheck = ["racecheck:zf_select_gpu_tests", "racecheck:zf_optim_gpu_tests",
                     "racecheck:zf_transport_gpu_tests", "racecheck:zf_engine_gpu_tests"]
        self.assertEqual(self.keys("sanitize=racecheck,memcheck", "test"), tests + memcheck + racecheck)

    def test_bench_plans_the_gbench_programs_then_the_torch_baselines(self):
        self.assertEqual(self.keys("bench"), ["bench:zf_bench_bandwidth", "bench:zf_bench_select",
                                              "bench:zf_bench_optim",
                                              "bench:zf_bench_transport", "bench:torch_topk", "bench:torch_adamw"])

    def test_all_is_every_stage_but_test_cpu(self):
        keys = self.keys("all", "build")
        self.assertEqual(len(keys), 8 + 1 + 1 + 6 + 8 + 3 * 4)
        self.assertEqual(keys[8:10], ["pipeline:zf_bench_pipeline_cuda", "trainer:charlm_train"])
        self.assertNotIn("test-cpu:ctest", keys)
        self.assertEqual(self.keys("test-cpu"), ["test-cpu:ctest"])

    def test_a_wrong_word_is_named(self):
        for words, message in ((["tests"], "unknown stage 'tests'"), (["sanitize=memcheck,leakcheck"],
                                                                      "unknown sanitizer tool 'leakcheck'")):
            with self.assertRaises(session.UsageError) as caught:
                session.parse_args(words, "/")
            self.assertEqual(str(caught.exception), message)

    def test_resume_is_read_from_where_the_program_was_called(self):
        resume, fresh, words = session.parse_args(["--fresh", "--resume", "s.txt", "test"], "/somewhere")
        self.assertEqual((resume, fresh, words), (Path("/somewhere/s.txt"), True, ["test"]))

    def test_no_stage_prints_the_plan_and_fails(self):
        for args, rc in ((["run", "build"], 2), (["plan"], 0)):
            done = subprocess.run([str(PROGRAM), *args], capture_output=True, text=True)
            self.assertEqual((done.returncode, done.stdout), (rc, plan.PLAN))

    def test_the_plans_timeout_s_is_the_budget_plus_the_margin_it_names(self):
        budget = settings.Settings.from_env(ROOT, {}).budget
        self.assertIn(f"timeout_s {budget + 20}. The program's budget is {budget} s", plan.PLAN)


class Summary(unittest.TestCase):
    def ledger_of_every_status(self):
        ledger = items.Ledger()
        for n, status in enumerate(items.STATUSES):
            ledger.add(f"test:zf_{n}_gpu_tests", "test", f"zf_{n}_gpu_tests")
            ledger.set(f"test:zf_{n}_gpu_tests", status, n if n % 2 else "-", f"detail {n}\twith a tab\nand a line")
        return ledger

    def render(self, ledger, tmp, src_hash="abc"):
        s = settings.Settings.from_env(tmp, {})
        rep = report.Report(s, ledger, runner.Clock(), tmp, tmp, src_hash, "STAMP")
        return rep.render()

    def test_a_summary_reads_back_as_written(self):
        with tempfile.TemporaryDirectory() as tmp:
            ledger = self.ledger_of_every_status()
            text = self.render(ledger, tmp) + "passed   not a key  1  x\nfailed   test:zf_x  1  after the items\n"
        sources, records = report.read_summary(text)
        self.assertEqual(sources, "abc")
        self.assertEqual(records, [(status, f"test:zf_{n}_gpu_tests", str(n) if n % 2 else "-",
                                    f"detail {n} with a tab and a line") for n, status in enumerate(items.STATUSES)])

    def test_a_resumed_call_keeps_what_is_done_and_retries_the_rest(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "summary.txt")
            path.write_text(self.render(self.ledger_of_every_status(), tmp))
            ledger = items.Ledger()
            self.assertEqual(report.resume(ledger, path, "summary S", "abc"), "summary S")
            for n in range(len(items.STATUSES)):
                ledger.add(f"test:zf_{n}_gpu_tests", "test", f"zf_{n}_gpu_tests")
            ledger.planned()
            got = [(ledger[k].status, ledger[k].earlier) for k in ledger.order]
            self.assertEqual(got, [("passed", True), ("failed", True), ("timeout", True), ("absent", True),
                                   ("not-run", False), ("not-run", False)])
            self.assertEqual(ledger["test:zf_4_gpu_tests"].detail, "retried: cut-off in an earlier call")
            line = ledger["test:zf_0_gpu_tests"].line()
            self.assertTrue(line.endswith("(earlier call) detail 0 with a tab and a line"), line)
            self.assertEqual(ledger.others, [])
            other = items.Ledger()
            self.assertEqual(report.resume(other, path, "summary S", "def"),
                             "nothing: summary S is of sources abc, these are def")
            self.assertEqual(other.keys(), [])

    def test_the_exit_status_counts_this_calls_items_only(self):
        ledger = items.Ledger()
        ledger.remember("test:a", "failed", "1", "earlier")
        ledger.add("test:a", "test", "a")
        ledger.add("test:b", "test", "b")
        ledger.set("test:b", "passed", 1, "")
        self.assertEqual(ledger.exit_status(), 0)
        ledger.add("test:c", "test", "c")
        self.assertEqual(ledger.exit_status(), 3)
        ledger.set("test:c", "timeout", 1, "")
        self.assertEqual(ledger.exit_status(), 1)


class Parts(unittest.TestCase):
    def test_the_source_hash_is_the_sha256sum_pipelines(self):
        with tempfile.TemporaryDirectory() as tmp:
            for rel, text in (("CMakeLists.txt", "a"), ("include/z/b.hpp", "b"), ("include/z/B.cuh", "c"),
                              ("bench/results/x/r.cpp", "d"), ("tests/t.cpp", "e"), ("tests/notes.md", "f")):
                Path(tmp, rel).parent.mkdir(parents=True, exist_ok=True)
                Path(tmp, rel).write_text(text)
            pipeline = ("find CMakeLists.txt include tests bench -type f \\( -name '*.hpp' -o -name '*.cuh' -o -name "
                        "'*.cpp' -o -name CMakeLists.txt \\) -not -path 'bench/results/*' | LC_ALL=C sort | "
                        "xargs sha256sum | sha256sum | cut -c1-16")
            first = settings.source_hash(tmp)
            self.assertEqual(first, subprocess.run(pipeline, shell=True, cwd=tmp, capture_output=True,
                                                   text=True).stdout.strip())
            Path(tmp, "bench/results/x/r.cpp").write_text("changed")
            Path(tmp, "tests/notes.md").write_text("changed")
            self.assertEqual(settings.source_hash(tmp), first)
            Path(tmp, "include/z/B.cuh").write_text("changed")
            self.assertNotEqual(settings.source_hash(tmp), first)

    def test_a_long_log_keeps_its_head_and_tail(self):
        with tempfile.TemporaryDirectory() as tmp:
            live, log = Path(tmp, "current.log"), Path(tmp, "logs/x.log")
            live.write_bytes(b"h" * (runner.LOG_HEAD + 5) + b"m" * (1 << 20) + b"t" * runner.LOG_TAIL)
            runner.keep_log(live, log)
            kept = log.read_bytes()
            self.assertFalse(live.exists())
            self.assertTrue(kept.startswith(b"h" * runner.LOG_HEAD + b"[... gpu-session kept"))
            self.assertTrue(kept.endswith(b"]\n" + b"t" * runner.LOG_TAIL))

    def test_a_command_not_found_is_a_failure_that_says_so(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = {"ZF_GPU_SESSION_STATE": f"{tmp}/state.txt", "ZF_GPU_SESSION_BUDGET": "60"}
            s = settings.Settings.from_env(tmp, env)
            ledger, clock = items.Ledger(), runner.Clock()
            rep = report.Report(s, ledger, clock, Path(tmp, "out"), Path(tmp, "work"), "h", "STAMP")
            rep.out.mkdir()
            rep.work.mkdir()
            run = runner.Runner(s, ledger, rep, clock, rep.out / "current.log")
            ledger.add("test:x", "test", "x")
            self.assertTrue(run.start("test:x", 10))
            run.end("test:x", run.exec([f"{tmp}/no-such-binary"]))
            self.assertEqual(ledger["test:x"].status, "failed")
            self.assertIn("exit 127 (a command not found)", ledger["test:x"].detail)
            self.assertEqual(statuses(rep.out), {"test:x": "failed"})


# --- whole calls --------------------------------------------------------------------------------
A_SAYS = ("passed test:zf_core_gpu_tests", "failed test:zf_select_gpu_tests", "failed test:zf_optim_gpu_tests",
          "cut-off test:zf_transport_gpu_tests", "absent test:zf_engine_gpu_tests",
          "not-run memcheck:zf_core_gpu_tests")


class Calls(unittest.TestCase):
    """A to J: calls run side by side in two waves (D and E resume from A's state and summary)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gpu-session-selftest.")
        fx = cls.fx = Fixture(cls.tmp)
        t = fx.tmp
        # A: the program keeps its own budget (7 s): the hung binary is cut off at budget - margin,
        # the call packs and ends before the SIGKILL at the budget (7 s), as the machine would send it.
        # B: the machine's SIGKILL lands while the hung binary runs (budget 60 s, kill at 3 s): the
        # summary written before it started still names it, and its output so far came back.
        # C, the negative check: results written only at the end must fail B's checks.
        first = {"a": Call(fx, "a", 7, 7, ["test", "sanitize=memcheck"]),
                 "b": Call(fx, "b", 60, 3, ["test", "sanitize=memcheck"]),
                 "c": Call(fx, "c", 60, 3, ["test", "sanitize=memcheck"], ZF_GPU_SESSION_WRITE_AT_END="1")}
        cls.result = {name: call.wait() for name, call in first.items()}
        cls.leftover = {name: call.leftover for name, call in first.items()}
        for name in "def":
            (t / f"unhang-{name}").touch()
        # D: a second call on the same machine resumes from A's state file: the cut-off item first,
        # the passed and failed ones not again, then what A did not reach.
        shutil.copy(t / "state-a.txt", t / "state-d.txt")
        # F: a summary of other sources is not resumed.
        summary_a = (t / "out-a/summary.txt").read_text()
        (t / "summary-other.txt").write_text(summary_a.replace("sources selftest;", "sources other;", 1))
        second = {
            "d": Call(fx, "d", 20, 25, ["test", "sanitize=memcheck"]),
            # E: a fresh machine resumes from the summary call A returned.
            "e": Call(fx, "e", 30, 40, ["--resume", str(t / "out-a/summary.txt"), "test"]),
            "f": Call(fx, "f", 30, 40, ["--resume", str(t / "summary-other.txt"), "test"]),
            # G: an item past its own timeout is a "timeout", a failure.
            "g": Call(fx, "g", 30, 40, ["test"], ZF_GPU_SESSION_TIMEOUT="2"),
            # I: the test stage builds its own targets only, in one timed item, and runs what it
            # built; a target the build does not define is absent. J: the same with a build that
            # hangs: cut off at the budget, the call ends by itself.
            "i": Call(fx, "i", 20, 25, ["test"], **fx.build_env, ZF_GPU_SESSION_BUILD_DIR=str(t / "build-i")),
            "j": Call(fx, "j", 6, 6, ["test"], **fx.build_env, ZF_GPU_SESSION_BUILD_DIR=str(t / "build-j"),
                      ZF_FAKE_SLOW_BUILD="1"),
            # K: a TERM (a polite stop) while the hung binary runs: the call stops it, records it,
            # writes its summary and archive and ends by itself.
            "k": Call(fx, "k", 60, 3, ["test"], polite=True),
        }
        cls.result.update({name: call.wait() for name, call in second.items()})
        cls.leftover.update({name: call.leftover for name, call in second.items()})

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("ZF_GPU_SESSION_SELFTEST_KEEP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def out(self, name):
        return self.fx.tmp / f"out-{name}"

    def assertLeft(self, name, *expected):
        self.assertEqual(problems(self.out(name), *expected), [], call_output(self.fx))

    def test_a_the_call_ends_by_itself_inside_its_budget(self):
        self.assertEqual(self.result["a"], (False, 1))  # 1: an item failed
        self.assertEqual(self.leftover["a"], [], "the cut-off item outlived the call")
        self.assertLeft("a", *A_SAYS)
        summary = (self.out("a") / "summary.txt").read_text()
        self.assertRegex(summary, r"cut-off +test:zf_transport_gpu_tests .*killed at the call")
        self.assertIn("./logs/test-zf_core_gpu_tests.log", archive_names(self.out("a")))
        ran = self.fx.ran("a")  # the unloadable binary was dropped alone: never run, the others ran
        self.assertEqual((ran.count("zf_optim_gpu_tests plain"), ran.count("zf_core_gpu_tests plain")), (0, 1))

    def test_b_a_sigkill_mid_item_still_returns_what_was_done(self):
        self.assertTrue(self.result["b"][0], "the call was not killed")
        self.assertLeft("b", *A_SAYS[:4], "not-run memcheck:zf_core_gpu_tests")
        self.assertIn("./logs/test-zf_core_gpu_tests.log", archive_names(self.out("b")))
        self.assertIn("RUN", (self.out("b") / "current.log").read_text())  # the cut-off item's output

    def test_c_results_written_only_at_the_end_fail_those_checks(self):
        self.assertTrue(self.result["c"][0], "the call was not killed")
        self.assertNotEqual(problems(self.out("c"), A_SAYS[0], A_SAYS[1], A_SAYS[3]), [])

    def test_d_a_second_call_resumes_from_the_state_file(self):
        self.assertEqual(self.result["d"], (False, 1))  # memcheck of the failing binary
        self.assertLeft("d", "passed test:zf_core_gpu_tests", "failed test:zf_select_gpu_tests",
                        "passed test:zf_transport_gpu_tests", "passed memcheck:zf_core_gpu_tests",
                        "failed memcheck:zf_select_gpu_tests", "failed memcheck:zf_optim_gpu_tests",
                        "passed memcheck:zf_transport_gpu_tests")
        ran = self.fx.ran("d")  # the cut-off item first, nothing passed or failed again
        self.assertEqual((ran[0], ran.count("zf_core_gpu_tests plain"), ran.count("zf_select_gpu_tests plain")),
                         ("zf_transport_gpu_tests plain", 0, 0))

    def test_e_a_fresh_machine_resumes_from_a_returned_summary(self):
        self.assertEqual(self.fx.ran("e"), ["zf_transport_gpu_tests plain"])
        self.assertLeft("e", "passed test:zf_core_gpu_tests", "passed test:zf_transport_gpu_tests")

    def test_f_a_summary_of_other_sources_is_not_resumed(self):
        self.assertEqual(self.fx.ran("f").count("zf_core_gpu_tests plain"), 1)

    def test_g_a_hang_past_its_own_timeout_is_a_failure_named_timeout(self):
        self.assertLeft("g", "timeout test:zf_transport_gpu_tests")

    def test_i_the_fallback_build_builds_the_stages_own_targets_once(self):
        builds = [line for line in self.fx.ran("i") if "--build" in line]
        self.assertEqual(len(builds), 1, self.fx.ran("i"))
        targets = builds[0].split("--target ")[1].split(" --")[0].split()
        self.assertEqual(targets, ["zf_core_gpu_tests", "zf_select_gpu_tests", "zf_optim_gpu_tests",
                                   "zf_transport_gpu_tests", "zf_engine_gpu_tests", "zf_examples_gpu_tests"])
        self.assertLeft("i", "passed build:test", "passed test:zf_core_gpu_tests", "passed test:zf_select_gpu_tests",
                        "passed test:zf_optim_gpu_tests", "absent test:zf_comm_nccl_gpu_tests")

    def test_j_a_build_that_hangs_is_cut_off_and_leaves_its_items_for_a_next_call(self):
        self.assertEqual(self.result["j"], (False, 3))  # 3: items left
        self.assertLeft("j", "cut-off build:test", "not-run test:zf_core_gpu_tests")


    def test_k_a_term_stops_the_item_in_flight_and_the_call_still_reports(self):
        self.assertEqual(self.result["k"], (True, 1))  # 1: the failing binary
        self.assertLeft("k", "passed test:zf_core_gpu_tests", "cut-off test:zf_transport_gpu_tests")
        summary = (self.out("k") / "summary.txt").read_text()
        self.assertRegex(summary, r"cut-off +test:zf_transport_gpu_tests .*stopped by a signal")
        self.assertIn("== call finished at", summary)
        self.assertNotIn("woke", (self.out("k") / "current.log").read_text())
        self.assertIn("RUN", (self.out("k") / "current.log").read_text())
        self.assertEqual(self.leftover["k"], [], "the stopped item outlived the call")


class Travel(unittest.TestCase):
    """H: prepare's size check, on a small git checkout: 3 MiB tracked + 1 MiB untracked + 1 MiB
    carried travel; 5 MiB ignored do not."""

    def test_h_what_travels(self):
        with tempfile.TemporaryDirectory() as tmp:
            repo = Path(tmp)
            (repo / ".carry").mkdir()
            (repo / ".gitignore").write_text("/ignored.bin\n/.carry/\n")
            for name, mib in (("tracked.bin", 3), ("untracked.bin", 1), ("ignored.bin", 5), (".carry/blob", 1)):
                (repo / name).write_bytes(bytes(mib << 20))
            subprocess.run("git init -q . && git add tracked.bin .gitignore", shell=True, cwd=repo, check=True)
            total = prepare.travel_bytes(repo)
            self.assertEqual(total >> 20, 5, total)
            said = io.StringIO()
            with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                over, under = prepare.check_travel(repo, 4), prepare.check_travel(repo, 6)
            self.assertIn(f"what travels is {total} B", said.getvalue())
            self.assertEqual((over, under), (False, True))


def main(root):
    started = time.monotonic()
    suite = unittest.TestSuite()
    for case in (StageSelection, Summary, Parts, Travel, Calls):
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors)
    print(f"gpu-session selftest: {failed} failed check(s), {time.monotonic() - started:.0f} s")
    return 0 if result.wasSuccessful() else 1
