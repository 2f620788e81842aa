"""The command line: prepare, plan, run, selftest (and _build, the fallback build's child)."""
import os
import sys
from pathlib import Path

import gpu_session

from . import build, plan, prepare, session

ROOT = Path(__file__).resolve().parents[2]  # the checkout: scripts/gpu_session/cli.py


def main(argv):
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    caller_cwd = os.getcwd()  # --resume FILE is read from where the program was called
    os.chdir(ROOT)  # the items run in the checkout
    if command == "prepare":
        return prepare.main(args)
    if command == "plan":
        print(plan.PLAN, end="")
        return 0
    if command == "run":
        return session.main(args, ROOT, caller_cwd)
    if command == "_build":
        return build.internal_build(args)
    if command == "selftest":
        from . import selftest  # noqa: PLC0415 (the selftest's fixtures only when asked for)

        return selftest.main(ROOT)
    print(gpu_session.__doc__, end="")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
