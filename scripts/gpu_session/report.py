"""What a call leaves behind: summary.txt (in $OUT and as the state file), the archive of its work
folder (logs, gtest XML, JSON), both rewritten whole after every item so that a kill at any moment
still returns them; and reading a summary back to resume from it."""
import os
import re
import shutil
import tarfile
from pathlib import Path

from .items import STATUSES

HEADER = re.compile(r"^gpu-session summary: sources ([^;]*);")
ITEMS_HEADER = ("== items: status, item, seconds, detail; in the order they run (a next call runs the cut-off and "
                "not-run ones, in this order)")
KEY = re.compile(r"^[a-z-]+:[A-Za-z0-9_.-]+$")


def safe(key):
    """A key as a file name (test:zf_core_gpu_tests -> test-zf_core_gpu_tests)."""
    return key.replace(":", "-")


def replace_whole(text_or_src, dest):
    """Writes `dest` through dest.part and a rename: a kill mid-write leaves the previous one."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    if isinstance(text_or_src, Path):
        shutil.copyfile(text_or_src, part)
    else:
        part.write_text(text_or_src)
    os.replace(part, dest)


class Report:
    """The call's outputs. `out` is $OUT, `work` this call's folder (archived whole)."""

    def __init__(self, settings, ledger, clock, out, work, src_hash, stamp):
        self.settings, self.ledger, self.clock = settings, ledger, clock
        self.out, self.work = Path(out), Path(work)
        self.src_hash, self.stamp = src_hash, stamp
        self.resumed_from = "nothing (a fresh start)"
        self.archive = f"gpu-session-{self.work.name}.tar.gz"
        self.running = ""  # the key of the item in flight
        self.final = False

    def details_file(self, key):
        return self.work / "details" / f"{safe(key)}.txt"

    def render(self):
        s, led = self.settings, self.ledger
        lines = [f"gpu-session summary: sources {self.src_hash}; call {self.stamp}; budget {s.budget}s, "
                 f"margin {s.margin}s; resumed from {self.resumed_from}"]
        machine = self.work / "machine.txt"
        if machine.is_file():
            lines += machine.read_text().splitlines()
        lines.append(ITEMS_HEADER)
        lines += [led[k].line() for k in led.keys()]
        lines.append("== details (logs in the archive)")
        for key in led.order:
            details = self.details_file(key)
            if details.is_file():
                lines.append(f"--- {led[key].status} {key}")
                lines += details.read_text().splitlines()
        n, now = led.counts(), self.clock.elapsed()
        if self.final:
            lines.append(f"== call finished at {now}s: {n['passed']} passed, {n['failed']} failed or timed out, "
                         f"{n['cut-off']} cut-off, {n['not-run']} not-run, {n['absent']} absent")
        else:
            running = f", while {self.running} runs" if self.running else ""
            lines.append(f"== written at {now}s{running}: if this is the last summary, the call was killed then "
                         f"({n['passed']} passed, {n['failed']} failed so far)")
        return "\n".join(lines) + "\n"

    def publish(self):
        """summary.txt into $OUT and the state file, each replaced whole."""
        summary = self.work / "summary.txt"
        summary.write_text(self.render())
        replace_whole(summary, self.settings.state_file)
        if self.settings.write_at_end and not self.final:
            return
        replace_whole(summary, self.out / "summary.txt")

    def pack(self):
        """The archive of the work folder into $OUT, replaced whole."""
        if self.settings.write_at_end and not self.final:
            return
        part = self.out / (self.archive + ".part")
        with tarfile.open(part, "w:gz") as tar:
            tar.add(self.work, arcname=".")
        os.replace(part, self.out / self.archive)

    def items_section(self):
        """The item lines of the summary (what the call prints at its end)."""
        text = (self.work / "summary.txt").read_text().splitlines()
        start = text.index(ITEMS_HEADER)
        end = next(i for i in range(start + 1, len(text)) if text[i].startswith("== "))
        return "\n".join(text[start:end])


def read_summary(text):
    """(source hash, [(status, key, secs, detail)]) of a summary.txt or state file; the hash is
    None when the first line is not a summary's."""
    lines = text.splitlines()
    head = HEADER.match(lines[0]) if lines else None
    records = []
    inside = False
    for line in lines:
        if line.startswith("== items"):
            inside = True
            continue
        if inside and line.startswith("== "):
            break
        if not inside:
            continue
        fields = line.split(None, 3)
        if len(fields) < 3 or fields[0] not in STATUSES or not KEY.match(fields[1]):
            continue
        records.append((fields[0], fields[1], fields[2], fields[3] if len(fields) > 3 else ""))
    return (head.group(1) if head else None), records


def resume(ledger, path, what, src_hash):
    """Loads an earlier call's statuses into `ledger` when it ran these sources; returns what the
    summary's first line then says this call was resumed from."""
    sources, records = read_summary(Path(path).read_text())
    if sources != src_hash:
        return f"nothing: {what} is of sources {sources or 'unknown'}, these are {src_hash}"
    for status, key, secs, detail in records:
        ledger.remember(key, status, secs, detail)
    return what
