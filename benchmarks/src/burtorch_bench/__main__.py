"""``python -m burtorch_bench ...``: the ``burtorch-bench`` command."""
import sys

from .cli import main

sys.exit(main(prog="python -m burtorch_bench"))
