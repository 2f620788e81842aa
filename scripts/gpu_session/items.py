"""The items of a call and their statuses.

An item is a (stage, binary) pair, keyed "stage:target" (test:zf_core_gpu_tests); a build is
"build:STAGE", a torch baseline "bench:torch_topk" (no target: "-"). Statuses:
  passed, failed, timeout (past its own timeout), absent (not defined by the build): DONE, a later
  call skips them;
  cut-off (killed by the call's budget, or the call ended while it ran) and not-run: a later call
  runs them, in order.
"""
import dataclasses

DONE = ("passed", "failed", "timeout", "absent")
STATUSES = DONE + ("cut-off", "not-run")
EARLIER = "(earlier call) "


@dataclasses.dataclass
class Item:
    key: str
    stage: str = ""
    target: str = "-"
    status: str = "not-run"
    secs: str = "-"
    detail: str = "not reached yet"
    earlier: bool = False  # its status is an earlier call's (resumed), not this call's

    @property
    def done(self):
        return self.status in DONE

    def line(self):
        """The item's line in summary.txt: status, key, seconds, detail."""
        detail = self.detail
        if self.earlier and not detail.startswith(EARLIER.strip()):
            detail = EARLIER + detail
        return f"{self.status:<8} {self.key:<40} {self.secs:>5}  {detail}"


class Ledger:
    """Every item this call knows: the ones it plans (in the order they run) and the ones an
    earlier call recorded that this call does not plan (kept, so that the state stays whole)."""

    def __init__(self):
        self.items = {}  # key -> Item
        self.order = []  # this call's keys, in the order they run
        self.others = []  # an earlier call's keys that this call does not plan
        self.ran_here = set()

    def __getitem__(self, key):
        return self.items[key]

    def get(self, key):
        return self.items.get(key)

    def keys(self):
        return self.order + self.others

    def pending(self, key):
        """Not done, and not run by this call yet."""
        item = self.items.get(key)
        return not (item and item.done) and key not in self.ran_here

    def set(self, key, status, secs, detail):
        item = self.items.setdefault(key, Item(key))
        item.status, item.secs = status, str(secs)
        item.detail = " ".join(detail.replace("\t", " ").split("\n"))
        item.earlier = False

    def remember(self, key, status, secs, detail):
        """An earlier call's record of `key` (from its summary or the state file)."""
        self.items[key] = Item(key, status=status, secs=secs, detail=detail.removeprefix(EARLIER), earlier=True)
        if key not in self.others:
            self.others.append(key)

    def add(self, key, stage, target):
        """Plans `key`: an earlier call's done item stays done; one it did not finish runs again."""
        self.order.append(key)
        item = self.items.get(key)
        if item is None:
            self.items[key] = Item(key, stage, target)
            return
        item.stage, item.target = stage, target
        if not item.done:
            item.detail = f"retried: {item.status} in an earlier call"
            item.status, item.secs, item.earlier = "not-run", "-", False

    def planned(self):
        """After the plan: an earlier item this call plans is listed once, as this call's."""
        self.others = [k for k in self.others if k not in self.order]

    def insert_before(self, first, key, stage):
        """Puts `key` into this call's order just before `first` (a build before its stage)."""
        self.order.insert(self.order.index(first), key)
        item = self.items.setdefault(key, Item(key))
        item.stage, item.target = stage, "-"
        if key in self.others:
            self.others.remove(key)

    def of_stage(self, stage):
        """This call's keys of `stage`, builds left out, in order."""
        return [k for k in self.order if self.items[k].stage == stage and not k.startswith("build:")]

    def counts(self):
        n = dict.fromkeys(("passed", "failed", "cut-off", "not-run", "absent"), 0)
        for key in self.keys():
            status = self.items[key].status
            n["failed" if status == "timeout" else status] += 1
        return n

    def exit_status(self):
        """1 when an item of this call failed or timed out, else 3 when items remain, else 0."""
        mine = [self.items[k].status for k in self.order if not self.items[k].earlier]
        if any(s in ("failed", "timeout") for s in mine):
            return 1
        return 3 if any(s in ("cut-off", "not-run") for s in mine) else 0
