"""Where each target's binary comes from on the device: the carried .carry/bin when it was built
from these very sources and loads here, else one built on this machine by an earlier build item,
else nothing yet ("missing": a build would make it) or never ("absent": no build defines it, e.g.
the NCCL test where there is no NCCL)."""
import dataclasses
import os
import subprocess
from pathlib import Path

BUILT_LIST = "gpu-session-built.txt"  # "HASH TARGET" lines, in the build tree (build.py)
ABSENT_LIST = "gpu-session-absent.txt"


@dataclasses.dataclass
class Binary:
    state: str  # ok, missing or absent
    path: Path = None
    why: str = ""


def cannot_load(exe):
    """What the loader misses for `exe` here ("" when it loads)."""
    try:
        text = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    except OSError:
        return ""
    return " ".join(" ".join(line.split()) for line in text.splitlines() if "not found" in line)


def find_executable(folder, name):
    for parent, _, names in os.walk(folder):
        path = Path(parent) / name
        if name in names and path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def listed(path, line):
    try:
        return line in Path(path).read_text().splitlines()
    except OSError:
        return False


class Binaries:
    def __init__(self, settings, src_hash):
        self.s, self.src_hash = settings, src_hash
        hash_file = settings.carried_bin / "SOURCE_HASH"
        self.carried_hash = hash_file.read_text().strip() if hash_file.is_file() else ""
        self.found = {}  # target -> Binary

    def __getitem__(self, target):
        return self.found[target]

    def resolve(self, target):
        self.found[target] = self._resolve(target)
        return self.found[target]

    def _resolve(self, t):
        s = self.s
        if s.given_build:
            path = find_executable(s.build_dir, t)
            if path:
                return Binary("ok", path, f"from {s.build_dir}")
            return Binary("absent", why=f"not built in {s.build_dir}")
        carried = s.carried_bin / t
        targets_file = s.carried_bin / "TARGETS"
        if not self.carried_hash:
            why = "no .carry/bin (run scripts/gpu-session prepare here and carry .carry)"
        elif self.carried_hash != self.src_hash:
            why = f".carry/bin was built from sources {self.carried_hash}, these are {self.src_hash}"
        elif carried.is_file() and os.access(carried, os.X_OK):
            miss = cannot_load(carried)
            if not miss:
                return Binary("ok", carried, "carried in .carry/bin")
            why = f"the carried one cannot load here: {miss}"
        elif targets_file.is_file() and not listed(targets_file, t):
            return Binary("absent", why="not defined where prepare built .carry/bin (no NCCL there?)")
        else:
            why = "not in .carry/bin"
        # Built on this machine by an earlier build item (this call or an earlier one).
        if listed(s.build_dir / BUILT_LIST, f"{self.src_hash} {t}"):
            path = find_executable(s.build_dir, t)
            if path and not cannot_load(path):
                return Binary("ok", path, f"built in {s.build_dir} ({why})")
        if listed(s.build_dir / ABSENT_LIST, f"{self.src_hash} {t}"):
            return Binary("absent", why="not defined by the build on this machine (no NCCL?)")
        return Binary("missing", why=why)

    def table(self):
        """binaries.txt: each target's state, path and why."""
        return "".join(f"{t}: {b.state} {b.path or ''} ({b.why})\n" for t, b in sorted(self.found.items()))
