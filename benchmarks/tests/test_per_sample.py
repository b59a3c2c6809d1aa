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


def test_table_has_the_compute_alone_and_streamed_floor_rows(monkeypatch, capsys):
    """The table's burtorch rows agree bitwise, and the bounds line sets out= against the streamed
    write floor and the compute alone (peers left out: their compilation is not what is tested)."""
    rows = tuple(r for r in per_sample.ROWS if not r[0].startswith(("torch", "jax")))
    monkeypatch.setattr(per_sample, "ROWS", rows)
    per_sample.main(["--n", "9", "--hidden", "3", "--reps", "1", "--inner", "1"])
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for name in ("burtorch-compiled-out", "burtorch-out-plain", "burtorch-out-stream", "burtorch-out-lanes-off"):
        assert lines[name].endswith("ok, bitwise"), lines[name]
    for name in ("burtorch-out-discard", "write-stream"):
        assert lines[name].rstrip().endswith("-"), lines[name]
    assert "streamed write floor " in out and "compute alone (rows made, not stored)" in out
    assert "x their sum" in out
