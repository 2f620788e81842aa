"""`run [--resume SUMMARY] [--fresh] STAGE...`: one device call. The stages run in their fixed
order; in each, the items whose binary is here first, then one build of what the stage lacks,
then the rest. The exit status: 1 when an item failed or timed out, 3 when items remain for a
next call, 2 for a wrong command, else 0."""
import datetime
import os
import signal
import subprocess
import sys
from pathlib import Path

from . import benchmarks, build, report, sanitizers, settings, tests
from .binaries import Binaries
from .items import Ledger
from .plan import PLAN
from .runner import Clock, Runner
from .settings import ALL_STAGES, MULTIARCH, SANITIZERS, STAGE_ORDER


class UsageError(Exception):
    pass


def parse_args(args, caller_cwd):
    """(resume file or None, fresh, the stage words in the order given) of `run`'s arguments."""
    resume, fresh, words = None, False, []
    while args and args[0] in ("--resume", "--fresh"):
        if args[0] == "--fresh":
            fresh, args = True, args[1:]
            continue
        if len(args) < 2:
            raise UsageError("--resume needs a summary file")
        resume, args = Path(caller_cwd, args[1]), args[2:]
    for word in args:
        if word == "all":
            words += ALL_STAGES
        elif word == "build":  # accepted for older commands
            continue
        elif word in STAGE_ORDER:
            words.append(word)
        elif word.startswith("sanitize="):
            for tool in word.removeprefix("sanitize=").split(","):
                if tool not in SANITIZERS:
                    raise UsageError(f"unknown sanitizer tool '{tool}'")
            words.append(word)
        else:
            raise UsageError(f"unknown stage '{word}'")
    return resume, fresh, words


def plan_items(ledger, words, root):
    """This call's items, in the order of value per second: the stage order, whatever the order
    of the words."""
    wanted = set(words)
    tests.plan(ledger, wanted)
    benchmarks.plan(ledger, wanted, root)
    sanitizers.plan(ledger, words)
    tests.plan_cpu(ledger, wanted)
    ledger.planned()


STAGE_MODULES = {"test": tests, "pipeline": benchmarks, "trainer": benchmarks, "bench": benchmarks,
                 **{tool: sanitizers for tool in SANITIZERS}}


class Session:
    def __init__(self, s, out, caller_cwd):
        self.s, self.caller_cwd = s, caller_cwd
        self.clock = Clock()
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        work, n = s.work_root / stamp, 1
        while work.exists():  # two calls in one second (the selftest's)
            work, n = s.work_root / f"{stamp}-{n}", n + 1
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True)
        self.src_hash = s.source_hash or settings.source_hash(s.root)
        self.ledger = Ledger()
        self.report = report.Report(s, self.ledger, self.clock, out, work, self.src_hash, stamp)
        # The output of the item in flight: in $OUT, so that a kill leaves it there.
        live = (work if s.write_at_end else out) / "current.log"
        self.runner = Runner(s, self.ledger, self.report, self.clock, live)
        self.binaries = Binaries(s, self.src_hash)

    def env(self, **extra):
        return dict(os.environ, **extra)

    def run(self, resume, fresh, words):
        s, ledger = self.s, self.ledger
        if not fresh:
            if resume is not None:
                self.report.resumed_from = report.resume(ledger, resume, f"summary {resume}", self.src_hash)
            elif s.state_file.is_file():
                self.report.resumed_from = report.resume(ledger, s.state_file, f"state {s.state_file}", self.src_hash)
        (self.report.work / "machine.txt").write_text(machine_text(s, words))
        plan_items(ledger, words, s.root)
        # Every binary found once (ldd is cheap); a missing one is built per stage, an absent one is
        # recorded now, and so is one that cannot be had when builds are off.
        for key in ledger.order:
            t = ledger[key].target
            if t != "-" and t not in self.binaries.found:
                self.binaries.resolve(t)
        (self.report.work / "binaries.txt").write_text(self.binaries.table())
        for key in ledger.order:
            t = ledger[key].target
            if t == "-" or not ledger.pending(key):
                continue
            b = self.binaries[t]
            if b.state == "absent":
                ledger.set(key, "absent", "-", b.why)
            elif b.state == "missing" and not s.builds_allowed:
                ledger.set(key, "failed", "-", f"{b.why}; not built (builds are off here)")
        signal.signal(signal.SIGTERM, self.runner.on_signal)
        signal.signal(signal.SIGINT, self.runner.on_signal)
        self.report.publish()
        self.report.pack()
        for stage in STAGE_ORDER:
            if stage == "sanitize":
                for tool in SANITIZERS:
                    self.run_stage(tool)
            elif stage == "test-cpu":
                tests.run_cpu_stage(self)
            else:
                self.run_stage(stage)
        return self.finish()

    def run_item(self, key):
        item = self.ledger[key]
        exe = self.binaries[item.target].path if item.target != "-" else None
        STAGE_MODULES[item.stage].run_item(self, item, exe)

    def run_stage(self, stage):
        """The stage's items whose binary is here, then a build of what it lacks, then the rest."""
        ledger, missing = self.ledger, []
        for key in ledger.of_stage(stage):
            if not ledger.pending(key):
                continue
            t = ledger[key].target
            state = self.binaries[t].state if t != "-" else "ok"
            if state == "ok":
                self.run_item(key)
            elif state == "missing" and t not in missing:
                missing.append(t)
        if not missing or self.runner.out_of_time:
            return
        build.build_item(self, stage, missing)
        for t in missing:
            self.binaries.resolve(t)
        built = ledger.get(f"build:{stage}")
        build_status = built.status if built else "not-run"
        for key in ledger.of_stage(stage):
            if not ledger.pending(key) or ledger[key].target == "-":
                continue
            b = self.binaries[ledger[key].target]
            if b.state == "ok":
                self.run_item(key)
            elif b.state == "absent":
                ledger.set(key, "absent", "-", b.why)
            elif build_status in ("failed", "timeout"):
                ledger.set(key, "failed", "-", f"not built ({b.why}); build:{stage} {build_status}")
            else:
                ledger[key].detail = f"needs a build ({b.why}); build:{stage} {build_status}"
        self.report.publish()

    def finish(self):
        r, ledger = self.runner, self.ledger
        if r.out_of_time:
            why = r.stopped_by or f"no time left in this call (under {self.s.min_item}s of its {self.s.budget}s)"
            for key in ledger.order:
                item = ledger[key]
                if item.status == "not-run" and not item.detail.startswith("needs"):
                    item.detail = f"{why}: a next call runs it"
        self.report.final = True
        self.report.publish()
        self.report.pack()
        print(f"== gpu-session: summary.txt and {self.report.archive} in {self.report.out}")
        print(self.report.items_section(), flush=True)
        return ledger.exit_status()


def machine_text(s, words):
    """machine.txt: when, the GPU, the compiler, the cores, what this call runs."""
    lines = [datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")]
    for argv, last_line in ((["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                              "clocks.max.mem", "--format=csv,noheader"], False), (["nvcc", "--version"], True)):
        try:
            done = subprocess.run(argv, capture_output=True, text=True)
            text = (done.stdout + done.stderr).strip().splitlines()
            lines += text[-1:] if last_line else text
        except OSError:
            lines.append(f"{argv[0]}: not found")
    lines.append(f"cores: {os.cpu_count()}; stages: {' '.join(words)}; {s.per_binary_timeout}s a binary")
    return "\n".join(lines) + "\n"


def main(args, root, caller_cwd):
    try:
        resume, fresh, words = parse_args(args, caller_cwd)
    except UsageError as e:
        print(f"gpu-session: {e}", file=sys.stderr)
        return 2
    if not words:
        print(PLAN, end="")
        return 2
    s = settings.Settings.from_env(root)
    os.environ["PATH"] += os.pathsep + "/usr/local/cuda/bin"
    # The binaries' libraries: the carried ones, the toolkit's (cuBLAS), NCCL's (the toolkit's or
    # torch's wheel).
    libs = [str(s.prefix / MULTIARCH)]
    nccl, cuda = settings.nccl_root(), settings.cuda_root()
    libs += [str(nccl / "lib")] if nccl else []
    libs += [str(cuda / "lib64")] if cuda else []
    if os.environ.get("LD_LIBRARY_PATH"):
        libs.append(os.environ["LD_LIBRARY_PATH"])
    os.environ["LD_LIBRARY_PATH"] = ":".join(libs)
    if not s.given_build and not s.prefix.is_dir():
        print("no .carry/prefix: run 'scripts/gpu-session prepare' here and carry .carry", file=sys.stderr)
        return 2
    if resume is not None and not fresh and not resume.is_file():
        print(f"gpu-session: no summary {resume} to resume from", file=sys.stderr)
        return 2
    return Session(s, os.environ.get("OUT") or root / "out", caller_cwd).run(resume, fresh, words)
