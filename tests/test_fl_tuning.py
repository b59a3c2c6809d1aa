"""Step-size search: the best step of a grid by final gradient norm, the same on every executor,
diverging steps scored inf, and the comparison run at the tuned steps."""
import json
import math

import pytest

from burtorch.cli.main import main
from burtorch.fl import make_compressor, make_method
from burtorch.fl.logistic import synthetic
from burtorch.fl.tuning import score, search, with_lr

GRID = [0.01, 0.3, 1.0, 30.0, 1e300]


def setup():
    p = synthetic(4, 100, 5, seed=2)
    methods = []
    for label, name, comp in (("gd", "gd", None), ("ef21", "ef21", make_compressor("topk", 5, 1))):
        m = make_method(name, lr=0.1, compressor=comp)
        m.bind(5, 4, 1.0, p.smoothness(), p.shard_sizes())
        methods.append((label, m))
    return p, methods


def test_search_picks_the_smallest_final_gradient_norm():
    p, methods = setup()
    found = search(p, methods, GRID, 1.0, seed=3, rounds=20)
    for label, m in methods:
        direct = {lr: score(p, with_lr(m, lr), 1.0, 3, 20) for lr in GRID}
        assert found[label]["scores"] == direct
        assert math.isinf(direct[1e300])
        assert found[label]["lr"] == min(direct, key=direct.get)
        assert direct[found[label]["lr"]] < direct[0.01]  # the grid's smallest step is not the best here
    assert methods[0][1].lr == 0.1  # the methods given are not changed


def test_search_on_processes_is_bitwise_the_serial_search():
    p, methods = setup()
    assert search(p, methods, GRID[:3], 1.0, 3, 10, "processes", workers=2) == search(p, methods, GRID[:3], 1.0, 3, 10)


def test_search_errors():
    p, methods = setup()
    with pytest.raises(ValueError, match="positive"):
        search(p, methods, [0.1, -1.0], 1.0, 0, 5)
    with pytest.raises(ValueError, match="every step of the grid"):
        search(p, methods, [1e300], 1.0, 0, 5)


ARGS = ["fl", "--clients", "4", "--samples", "100", "--dim", "5", "--rounds", "20", "--seed", "3", "--quiet",
        "--k", "1", "--compare", "gd,ef21"]


def test_cli_compares_at_the_tuned_steps(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(ARGS + ["--tune", "0.01,0.3,1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for run in data["runs"]:
        assert run["settings"]["lr"] == data["tuning"][run["label"]]["lr"]
    assert "tuned gd: lr" in capsys.readouterr().out
    for bad, message in (("0.1,x", "comma-separated"), ("0.1,-2", "positive"), ("1e300", "every step")):
        assert main(ARGS + ["--tune", bad]) == 2
        assert message in capsys.readouterr().err


def test_search_on_ray_tasks_is_bitwise_the_serial_search():
    ray = pytest.importorskip("ray")
    p, methods = setup()
    assert search(p, methods, GRID[:3], 1.0, 3, 10, "ray", workers=2) == search(p, methods, GRID[:3], 1.0, 3, 10)
    assert not ray.is_initialized()  # the session it started is stopped
