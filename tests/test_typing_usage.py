"""tests/typing/api_usage.py, which CI type-checks with mypy, also runs: its typed uses are real."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("numpy")  # its federated part runs on numpy

MINIGPT_PAPER_PARAMETERS = 46_289
SCRIPT = os.path.join(os.path.dirname(__file__), "typing", "api_usage.py")


def test_the_type_checked_usage_runs():
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]  # the script prints one line (a development build may print more)
    numbers = [float(x) for x in last.replace("(", " ").replace(")", " ").replace(",", " ").split()]
    assert len(numbers) == 8  # scalar_graph's pair, then one number from each other use
    assert all(x == x for x in numbers)  # no nan
    assert numbers[4] == MINIGPT_PAPER_PARAMETERS + 4 + 1  # models(): the GPT, the MLP's 4 blocks, 1 output
