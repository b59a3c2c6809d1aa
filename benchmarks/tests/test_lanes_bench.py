"""python -m burtorch_bench.lanes: every row it times computes the same values and gradients (the
benchmark cross-checks them before timing), and it prints a row per path for W1 and W2."""
from __future__ import annotations

import burtorch as bt
from burtorch_bench import lanes


def test_lanes_bench_runs_and_leaves_lanes_on(capsys):
    lanes.main(["--n1", "70", "--n2", "45", "--reps", "1"])
    out = capsys.readouterr().out
    for graph, n in (("W1", "70"), ("W2", "45")):
        assert f"{graph}: N = {n} inputs" in out
    for row in ("burtorch .map (lanes)", "burtorch .map(out=) (lanes)", "burtorch .map one-sample",
                "traffic floor"):
        assert out.count(row) == 2
    assert bt.lanes_enabled()


def test_lanes_bench_refuses_bad_sizes(capsys):
    import pytest

    with pytest.raises(SystemExit):
        lanes.main(["--n1", "1"])
