"""burtorch_bench.isa_parity: two builds (ISA levels) alternated on the benchmark grid."""
from __future__ import annotations

import argparse
import sys

import pytest

import burtorch as bt
from burtorch_bench import isa_parity


def test_sides_parse_and_bad_ones_are_rejected():
    assert isa_parity.side("avx512") == ("avx512", sys.executable)
    assert isa_parity.side("native@/opt/py") == ("native", "/opt/py")
    with pytest.raises(argparse.ArgumentTypeError):
        isa_parity.side("@/opt/py")
    with pytest.raises(SystemExit):
        isa_parity.main(["--a", "generic", "--b", "generic", "--rounds", "0"])


def test_the_grid_is_the_issues():
    labels = [isa_parity.row_label(w, p) for w, points in isa_parity.GRID.items() for p in points]
    assert labels == ["W1", "W4 e=4 b=1", "W4 e=4 b=64", "W4 e=64 b=1", "W4 e=64 b=64", "W4 e=1024 b=1",
                      "W4 e=1024 b=64", "W5 b=1", "W5 b=64"]


def test_rounds_alternate_the_two_sides_and_give_their_ratios():
    level = bt.build_info()["isa"]
    seen = []
    rows = isa_parity.measure([(level, sys.executable), (level, sys.executable)], rounds=2,
                              only=["W1", "W4 e=4 b=1"], reps=2, progress=seen.append)
    assert [r["row"] for r in rows] == ["W1", "W4 e=4 b=1"]
    for r in rows:
        assert r["rounds"] == 2
        assert 0 < r["ratio_min"] <= r["ratio_median"] <= r["ratio_max"]
        assert r["a_median_s"] > 0 and r["b_median_s"] > 0
    assert len(seen) == 4 and seen[0].startswith("round 1/2 W1") and seen[-1].startswith("round 2/2 W4 e=4 b=1")
    table = isa_parity.render(rows, level, level)
    assert table.splitlines()[0].startswith(f"| row | {level} / {level} (median)") and "| W4 e=4 b=1 |" in table


def test_the_level_reaches_the_child_process():
    # an unknown level fails the child's import: the run's error names it, never a silent default
    with pytest.raises(RuntimeError, match="unknown level"):
        isa_parity.measure([("sse9", sys.executable), ("sse9", sys.executable)], rounds=1, only=["W1"], reps=1)
