"""per_sample --against: both interpreters' processes run, their medians and ratio are printed,
and the G hashes are compared (here one interpreter against itself: they must match)."""
import sys

import pytest

from burtorch_bench import per_sample


def test_against_reports_medians_ratio_and_matching_hashes(capsys):
    with pytest.raises(SystemExit) as e:
        per_sample.main(["--n", "6", "--hidden", "3", "--against", sys.executable, "--rounds", "1", "--calls", "2",
                         "--warmup", "1"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.count("round 1:") == 2
    assert "this  (" in out and "other (" in out and "median" in out
    assert "other / this = " in out and "G's SHA-256 match" in out


def test_against_a_python_that_fails_says_so():
    with pytest.raises(SystemExit, match="failed"):
        per_sample.main(["--n", "2", "--hidden", "2", "--against", sys.executable + "-no-such", "--rounds", "1"])
