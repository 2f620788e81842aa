#!/usr/bin/env python3
"""charlm_train survives being killed: SIGKILL at random moments, resume, bit-identical result.

Runs the trainer (host backend, a tiny model) once uninterrupted, then again with checkpoint sets
(--checkpoint-dir, --checkpoint-every) killed with SIGKILL many times (after a random step,
mid-step; at a random moment of a save, between its files, inside one and around its renames,
which the trainer's test hook CHARLM_CHECKPOINT_PAUSE_MS stretches; at a random wall-clock time,
start-up and loading included) and resumed with --resume each time, and asserts that the final
weights (--save-weights) and every step's loss (--losses-out) are bit-identical to the
uninterrupted run's. Then a save past a file size limit (RLIMIT_FSIZE, as a full disk: the write
fails) must fail with a clear error and leave the previous set loadable, and bad options
(--resume without --checkpoint-dir, --checkpoint-every 0 or negative, a directory of another
configuration, a directory with sets but no --resume) must be refused by name, changing nothing.

usage: charlm_kill_resume.py TRAINER [--workdir DIR] [--kills N] [--seed S]
"""

import argparse
import hashlib
import os
import queue
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time

STEPS = 60
EVERY = 3  # sets every 3 steps; the engine's windows are 4 steps: sets land mid-window
PAUSE_MS = 8  # the trainer's pause at each stage of a save (test hook)
STEP_PAUSE_MS = 3  # and inside each step, between the gradients and the optimizer's step
SAVE_STAGES = 7  # pauses in one save (checkpoint.hpp)

BASE = [
    "--backend", "host", "--size", "tiny", "--steps", str(STEPS), "--corpus-bytes", "100000",
    "--eval-batches", "2", "--threads", "1", "--host-threads", "1", "--quiet", "--log-every", "8",
    "--optimizer", "zenflow", "--topk-ratio", "0.1", "--update-interval", "4", "--select-strategy", "step",
    "--select-interval", "10", "--overlap-step", "true", "--seed", "3",
]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def snapshot(d):
    """Every file under d but the hidden ones (a partial set, a temporary file): relative path -> sha256."""
    out = {}
    for root, dirs, files in os.walk(d):
        dirs[:] = [x for x in dirs if not x.startswith(".")]
        for f in files:
            if f.startswith("."):
                continue
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def run(trainer, args, env=None, preexec=None, timeout=120):
    return subprocess.run([trainer] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=env, preexec_fn=preexec, restore_signals=False, timeout=timeout)


def read_file(p):
    with open(p, "rb") as fh:
        return fh.read()


class attempt:
    """One trainer process, killed by `policy` or left to finish."""

    def __init__(self, trainer, args, env):
        self.p = subprocess.Popen([trainer] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.step = 0  # the last step reported done
        self.resumed_from = None
        self.saving = False  # a "saving" line seen without its "saved"
        self.saves_seen = 0
        self.stderr = []

    def _read(self):
        for line in self.p.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def note(self, line):
        self.stderr.append(line)
        m = re.match(r"progress (\d+)/", line)
        if m:
            self.step = int(m.group(1))
        m = re.match(r"checkpoint: resuming from .*\(step (\d+)\)", line)
        if m:
            self.resumed_from = int(m.group(1))
            self.step = self.resumed_from
        if line.startswith("checkpoint: saving"):
            self.saving = True
            self.saves_seen += 1
        if line.startswith("checkpoint: saved"):
            self.saving = False

    def drive(self, should_kill_at, deadline_s=60):
        """Reads the trainer's lines; should_kill_at(self, line, now) returns a time to kill at (or None).
        Returns True when killed, False when the process ended by itself."""
        kill_at = should_kill_at(self, None, time.monotonic())
        end = time.monotonic() + deadline_s
        while True:
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                self.p.send_signal(signal.SIGKILL)
                self.p.wait()
                return True
            if now > end:
                self.p.kill()
                self.p.wait()
                raise RuntimeError("trainer hung: " + "".join(self.stderr[-5:]))
            wait = 0.05 if kill_at is None else max(0.0, min(0.05, kill_at - now))
            try:
                line = self.lines.get(timeout=wait)
            except queue.Empty:
                continue
            if line is None:  # stderr closed: the process is ending
                if kill_at is None:
                    self.p.wait()
                    return False
                continue
            self.note(line)
            if kill_at is None:
                kill_at = should_kill_at(self, line, time.monotonic())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trainer")
    ap.add_argument("--workdir", default="charlm_kill_resume")
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--seed", type=int, default=36)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    t_start = time.monotonic()

    # 1. The uninterrupted run, without checkpoints.
    ref_w, ref_l = os.path.join(work, "ref.weights"), os.path.join(work, "ref.losses")
    r = run(a.trainer, BASE + ["--save-weights", ref_w, "--losses-out", ref_l])
    if r.returncode != 0:
        print(r.stderr)
        sys.exit("the uninterrupted run failed")
    ref = (read_file(ref_w), read_file(ref_l))
    check(len(ref[1].splitlines()) == STEPS, "the reference run's --losses-out holds one line per step")

    # 2. Killed and resumed, many times.
    kdir = os.path.join(work, "killed")
    env = dict(os.environ, CHARLM_CHECKPOINT_PAUSE_MS=str(PAUSE_MS), CHARLM_STEP_PAUSE_MS=str(STEP_PAUSE_MS))
    out_w, out_l = os.path.join(work, "killed.weights"), os.path.join(work, "killed.losses")
    ckpt = ["--checkpoint-dir", kdir, "--checkpoint-every", str(EVERY), "--progress-every", "1",
            "--save-weights", out_w, "--losses-out", out_l]
    kinds = {"mid-step": 0, "mid-save": 0, "mid-save, a partial set left": 0, "start-up or load": 0, "other": 0}
    resumed_steps = []
    kills = 0
    first = True
    finished_early = 0
    save_window = PAUSE_MS * SAVE_STAGES / 1000.0
    while kills < a.kills:
        mode = rng.choice(["step", "step", "save", "save", "time"])
        jitter = rng.random()
        target_ahead = rng.randint(1, 3 * EVERY)  # past one or two saves, or not
        pick = {"target": None}

        def policy(at, line, now, mode=mode, jitter=jitter, target_ahead=target_ahead, pick=pick):
            if mode == "time":
                return now + 0.02 + jitter * 0.25 if line is None else None
            if line is None:
                return None
            if mode == "step":
                if at.resumed_from is not None and pick["target"] is None:
                    pick["target"] = at.resumed_from + target_ahead
                target = pick["target"] if pick["target"] is not None else target_ahead
                target += 1 if target % EVERY == 0 else 0  # no save follows: the kill lands in the next step
                if line.startswith("progress") and at.step >= target:
                    return now + jitter * STEP_PAUSE_MS / 1000.0  # within the next step
                return None
            if line.startswith("checkpoint: saving"):  # mode "save": somewhere in this save
                return now + jitter * save_window
            return None

        at = attempt(a.trainer, BASE + ckpt + ([] if first else ["--resume"]), env)
        killed = at.drive(policy)
        if at.resumed_from is not None:
            resumed_steps.append(at.resumed_from)
        if not killed:
            if not check(at.p.returncode == 0, "a resumed run failed: " + "".join(at.stderr[-5:])):
                break
            finished_early += 1  # the whole run done before the kill: start over in an empty directory
            shutil.rmtree(kdir)
            first = True
            continue
        kills += 1
        first = False
        if os.environ.get("CHARLM_KILL_VERBOSE"):
            print("kill %d: %s, resumed from %s, last step reported %d, saving %s" %
                  (kills, mode, at.resumed_from, at.step, at.saving), flush=True)
        if at.saving:
            kinds["mid-save"] += 1
        elif mode == "step":
            kinds["mid-step"] += 1
        elif at.step == 0 or (at.resumed_from is not None and at.step == at.resumed_from):
            kinds["start-up or load"] += 1
        else:
            kinds["other"] += 1
        if at.saving and any(n.startswith(".partial-") for n in os.listdir(kdir)):
            kinds["mid-save, a partial set left"] += 1

    # The last run goes to the end.
    at = attempt(a.trainer, BASE + ckpt + ["--resume"], env)
    check(not at.drive(lambda *_: None, deadline_s=120) and at.p.returncode == 0,
          "the final resumed run failed: " + "".join(at.stderr[-5:]))
    if at.resumed_from is not None:
        resumed_steps.append(at.resumed_from)
    check(read_file(out_l) == ref[1], "the losses of the killed run equal the uninterrupted run's, bit for bit")
    check(read_file(out_w) == ref[0], "the final weights of the killed run equal the uninterrupted run's, bit for bit")
    left = sorted(os.listdir(kdir))
    check(left == ["latest", "set-%010d" % STEPS], "the directory holds the last set only, got %s" % left)
    check(kinds["mid-save"] >= 5, "at least 5 kills landed mid-save (%d)" % kinds["mid-save"])
    check(kinds["mid-step"] >= 3, "at least 3 kills landed mid-step (%d)" % kinds["mid-step"])
    check(len(set(resumed_steps)) >= 5, "resumed from at least 5 different steps (%s)" % sorted(set(resumed_steps)))
    print("survived %d SIGKILLs (%s), resumed %d times from steps %s; the whole run %d time(s) before a kill; "
          "weights and %d losses bit-identical" % (kills, ", ".join("%s %d" % kv for kv in kinds.items()),
                                                   len(resumed_steps), sorted(set(resumed_steps)), finished_early,
                                                   STEPS), flush=True)

    # 3. A full disk mid-save (a file size limit: the write fails with EFBIG) leaves the previous
    # set loadable.
    fdir = os.path.join(work, "full")
    fw, fl = os.path.join(work, "full.weights"), os.path.join(work, "full.losses")
    fargs = BASE + ["--checkpoint-dir", fdir, "--checkpoint-every", str(EVERY), "--progress-every", "1", "--save-weights", fw,
                    "--losses-out", fl]
    at = attempt(a.trainer, fargs, dict(os.environ))
    at.drive(lambda at, line, now: now if line is not None and line.startswith("checkpoint: saved set-0000000006")
             else None)
    before = snapshot(fdir)
    with open(os.path.join(fdir, "latest")) as fh:
        latest = fh.read().strip()

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    r = run(a.trainer, fargs + ["--resume"], preexec=small_files)
    full_error = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    check(r.returncode != 0, "a save past the file size limit fails the run")
    check("--checkpoint-dir: saving set-" in r.stderr and "File too large" in r.stderr and
          ("the previous set %s is intact" % latest) in r.stderr,
          "a save past the file size limit says so, naming the set kept: " + r.stderr.strip())
    check(snapshot(fdir) == before, "the failed save left the directory as it was")
    r = run(a.trainer, fargs + ["--resume"])
    check(r.returncode == 0 and ("resuming from %s/%s" % (fdir, latest)) in r.stderr,
          "the previous set resumes after the failed save: " + r.stderr[-300:])
    check(read_file(fl) == ref[1] and read_file(fw) == ref[0],
          "resumed after the failed save: weights and losses bit-identical")
    print("a save past RLIMIT_FSIZE: " + full_error, flush=True)

    # 4. Bad options: refused by name, nothing written.
    def refused(args, needle, what, d=None):
        before = snapshot(d) if d else None
        r = run(a.trainer, BASE + args)
        ok = check(r.returncode != 0 and needle in r.stderr, "%s: refused naming '%s' (rc %d: %s)" %
                   (what, needle, r.returncode, r.stderr.strip()))
        if d:
            check(snapshot(d) == before, what + ": the directory is unchanged")
        return ok

    refused(["--resume"], "--resume: needs --checkpoint-dir", "--resume without --checkpoint-dir")
    refused(["--checkpoint-dir", kdir, "--checkpoint-every", "0", "--resume"], "--checkpoint-every: must be >= 1",
            "--checkpoint-every 0", kdir)
    refused(["--checkpoint-dir", kdir, "--checkpoint-every", "-2", "--resume"], "--checkpoint-every: must be >= 1",
            "--checkpoint-every -2", kdir)
    refused(["--checkpoint-every", "3"], "--checkpoint-every: needs --checkpoint-dir",
            "--checkpoint-every without --checkpoint-dir")
    refused(["--checkpoint-dir", kdir], "holds checkpoint sets already", "a directory with sets, no --resume", kdir)
    refused(["--checkpoint-dir", kdir, "--resume", "--batch", "16"], "'--batch 32' there, '--batch 16' here",
            "--resume under another --batch", kdir)
    refused(["--checkpoint-dir", kdir, "--resume", "--topk-ratio", "0.2"], "topk_ratio",
            "--resume under another zenflow setting", kdir)
    refused(["--checkpoint-dir", os.path.join(work, "nowhere"), "--resume"], "does not exist",
            "--resume from a missing directory")
    bad = os.path.join(work, "corrupted")
    shutil.copytree(kdir, bad)
    engine_file = os.path.join(bad, "set-%010d" % STEPS, "engine.zfck")
    with open(engine_file, "r+b") as fh:  # one byte of the only set's engine file
        fh.seek(os.path.getsize(engine_file) // 2)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0x40]))
    refused(["--checkpoint-dir", bad, "--resume"], "passes its checks", "--resume where no set passes its checks",
            bad)

    print("%.1f s" % (time.monotonic() - t_start))
    if failures:
        sys.exit("%d check(s) failed" % len(failures))
    print("OK: survived %d kills" % kills)


if __name__ == "__main__":
    main()
