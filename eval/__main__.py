"""``python -m eval ...`` is ``rlvr-div eval ...``."""

import sys

from eval.cli import main
from rlvr_div.cli import run_command

if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
