"""One item under the call's budget.

Each item's timeout is min(its own, what is left of the budget less the margin); with under
min_item seconds left nothing more starts. An item's commands run in their own process group (in
this program's session, so that the machine's kill at the call's limit ends them too), output
straight into $OUT/current.log (no pipe whose buffer a kill would lose), TERM at the timeout and
KILL kill_after seconds later, as `timeout -k` does. The summary is published before an item starts
(naming it cut-off "running since", which is what a kill then leaves) and after it ends."""
import os
import re
import shutil
import signal
import subprocess
import time

from .report import safe

TIMED_OUT, KILLED, NOT_FOUND = 124, 137, 127  # timeout(1)'s statuses, and the shell's
FAILURE_LINE = re.compile(r"^\[  FAILED  \]|ERROR SUMMARY|Error:|error:|^FAILED:")
TEST_COUNT = re.compile(r"[0-9]+ tests? from [0-9]+ test suites? ran")
LOG_LIMIT, LOG_HEAD, LOG_TAIL = 2 << 20, 512 << 10, 1536 << 10


class Clock:
    """Whole seconds since the call started (what the summary and the budget count)."""

    def __init__(self):
        self.start = time.monotonic()

    def elapsed(self):
        return int(time.monotonic() - self.start)


class Runner:
    def __init__(self, settings, ledger, report, clock, live):
        self.s, self.ledger, self.report, self.clock = settings, ledger, report, clock
        self.live = live  # the output of the item in flight ($OUT/current.log)
        self.out_of_time = False
        self.stopped_by = ""  # set when a TERM or INT stops the call
        self.proc = None
        self.key = ""
        self.timeout = self.own = self.started = self.commands = 0

    # --- a stop by signal ------------------------------------------------------------------------
    def on_signal(self, signum, _frame):
        """TERM or INT (a polite stop): the item in flight is stopped, recorded as cut-off by
        end(), and nothing more starts; the call still writes its summary and archive."""
        self.stopped_by = f"the call was stopped by a signal at {self.clock.elapsed()}s"
        self.out_of_time = True
        if self.proc is not None:
            _signal_group(self.proc, signal.SIGTERM)

    # --- one item --------------------------------------------------------------------------------
    def start(self, key, own_timeout):
        """True when the item starts now (its timeout set); False when the call has too little
        time left (then nothing more starts)."""
        if self.out_of_time:
            return False
        left = self.s.budget - self.clock.elapsed() - self.s.margin
        if left < self.s.min_item:
            self.out_of_time = True
            return False
        self.own, self.timeout = own_timeout, min(own_timeout, left)
        self.started, self.commands, self.key = self.clock.elapsed(), 0, key
        self.ledger.ran_here.add(key)
        self.report.running = key
        # Written before the item starts: if the call is killed during it, this is what returns.
        self.ledger.set(key, "cut-off", "-", f"running since {self.started}s of the call (timeout {self.timeout}s) "
                        "when this summary was written: the call ended during it; a next call retries it "
                        "(log current.log)")
        self.live.write_bytes(b"")
        self.report.publish()
        print(f"gpu-session: {key} (timeout {self.timeout}s, at {self.started}s of {self.s.budget}s)", flush=True)
        return True

    def exec(self, argv, env=None, stdout=None, line_buffered=False):
        """Runs argv with what is left of the item's timeout (the first command has it whole), its
        output appended to current.log (stdout to the file `stdout` when given). Returns its exit
        status; 124 or 137 when the timeout killed it."""
        seconds = self.timeout
        if self.commands:
            seconds = self.timeout - (self.clock.elapsed() - self.started)
        self.commands += 1
        if seconds <= 0 or self.stopped_by:
            return TIMED_OUT
        if line_buffered and shutil.which("stdbuf"):
            argv = ["stdbuf", "-oL", "-eL", *argv]
        with open(self.live, "ab") as log, open(stdout or os.devnull, "wb") as out:
            try:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out if stdout else log,
                                             stderr=log, env=env, process_group=0)
            except OSError as e:  # not found, not executable
                log.write(f"gpu-session: {argv[0]}: {e.strerror}\n".encode())
                return NOT_FOUND
            if self.stopped_by:  # the signal came while it started
                _signal_group(self.proc, signal.SIGTERM)
            try:
                rc = self.proc.wait(seconds)
                return 128 - rc if rc < 0 else rc  # killed by a signal: the shell's 128 + N
            except subprocess.TimeoutExpired:
                _signal_group(self.proc, signal.SIGTERM)
                try:
                    self.proc.wait(self.s.kill_after)
                    return TIMED_OUT
                except subprocess.TimeoutExpired:
                    _signal_group(self.proc, signal.SIGKILL)
                    self.proc.wait()
                    return KILLED
            finally:
                self.proc = None

    def end(self, key, rc, show=0):
        """Records the item's status from its exit status; `show` lines of its log's tail go into
        the summary on success too (a table); a failure's tail always does."""
        secs = self.clock.elapsed() - self.started
        self.report.running = ""
        if self.stopped_by:  # its output stays in current.log, which the kill left in $OUT
            self.ledger.set(key, "cut-off", secs, f"stopped by a signal after {secs}s; a next call retries it; "
                            "its output: current.log")
            return
        log_name = f"logs/{safe(key)}.log"
        log = self.report.work / log_name
        keep_log(self.live, log)
        text = log.read_text(errors="replace")
        lines = text.splitlines()
        counts = TEST_COUNT.findall(text)
        details = self.report.details_file(key)
        details.parent.mkdir(parents=True, exist_ok=True)
        if rc == 0:
            self.ledger.set(key, "passed", secs, (f"{counts[-1]}; " if counts else "") + f"log {log_name}")
            if show:
                details.write_text("".join(f"{line}\n" for line in lines[-show:]))
        else:
            if rc in (TIMED_OUT, KILLED) and secs >= self.timeout - 1:
                if self.timeout < self.own:
                    self.ledger.set(key, "cut-off", secs, f"killed at the call's budget after {secs}s (it had "
                                    f"{self.timeout}s of its {self.own}s); a next call retries it; log {log_name}")
                else:
                    self.ledger.set(key, "timeout", secs,
                                    f"ran past its own {self.own}s timeout (a hang?); log {log_name}")
            else:
                why = " (a command not found)" if rc == NOT_FOUND else ""
                self.ledger.set(key, "failed", secs, f"exit {rc}{why}; log {log_name}")
            failures = [line for line in lines if FAILURE_LINE.search(line)][:20]
            tail = lines[-max(show, 15):]
            details.write_text("".join(f"{line}\n" for line in failures + [f"... tail of {log_name}:"] + tail))
        self.report.publish()
        self.report.pack()
        print(self.ledger[key].line(), flush=True)


def keep_log(live, log):
    """Moves the item's output into the work folder; past 2 MiB only its first 512 KiB and last
    1.5 MiB (the archive must come back)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    size = live.stat().st_size if live.exists() else 0
    if size <= LOG_LIMIT:
        if live.exists():
            os.replace(live, log)
        else:
            log.write_bytes(b"")
        return
    with open(live, "rb") as f:
        head = f.read(LOG_HEAD)
        f.seek(size - LOG_TAIL)
        tail = f.read()
    note = f"[... gpu-session kept the first 512 KiB and the last 1.5 MiB of {size} bytes ...]\n".encode()
    log.write_bytes(head + note + tail)
    live.unlink()


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
