"""`python3 scripts/gpu_session ARGS` (what scripts/gpu-session runs)."""
import os
import sys

if not __package__:  # run as a folder: import the package from scripts/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from gpu_session.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
