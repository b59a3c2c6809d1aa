"""Client sampling: Bernoulli participation (each client on its own seeded coin) next to the
uniform fixed-size draw; frequencies, varying round sizes, empty rounds, executors agreeing."""
import math

import numpy as np
import pytest

from burtorch.cli.main import main
from burtorch.fl import Federation, make_compressor, make_method
from burtorch.fl.logistic import synthetic


def test_bernoulli_participation_frequencies():
    p = synthetic(10, 100, 5, seed=0)
    fed = Federation(p, make_method("gd", lr=0.1), 0.3, seed=5, sampling="bernoulli")
    rounds = 2000
    counts = np.zeros(10)
    sizes = set()
    for t in range(1, rounds + 1):
        chosen = fed.participants(t)
        assert chosen == sorted(set(chosen))
        counts[chosen] += 1
        sizes.add(len(chosen))
    sd = math.sqrt(rounds * 0.3 * 0.7)
    assert np.all(np.abs(counts - rounds * 0.3) < 5 * sd), counts
    assert len(sizes) > 3 and 0 in sizes  # the round's size varies, down to nobody
    uniform = Federation(p, make_method("gd", lr=0.1), 0.3, seed=5)
    assert {len(uniform.participants(t)) for t in range(1, 200)} == {3}


def test_rounds_without_anybody_leave_the_point():
    p = synthetic(4, 100, 5, seed=0)
    with Federation(p, make_method("gd", lr=0.5), 0.2, seed=1, sampling="bernoulli") as fed:
        xs = []
        for _ in range(40):
            rec = fed.round()
            xs.append(fed.x.copy())
        empty = [i for i, r in enumerate(fed.records) if r["participants"] == 0]
        assert empty and all(np.isfinite(r["loss"]) for r in fed.records)
        # GD moves at the start of the round after a round: an empty round's g is zero
        for i in empty:
            if i + 1 < len(xs):
                assert np.array_equal(xs[i + 1], xs[i])
    assert rec["participants"] >= 0


@pytest.mark.parametrize("name", ["ef21-pp", "fedavg", "dcgd"])
def test_bernoulli_runs_agree_across_executors(name):
    p = synthetic(6, 120, 8, seed=3)

    def make():
        comp = make_compressor("topk", 8, 2) if name in ("ef21-pp", "dcgd") else None
        return make_method(name, lr=0.2, compressor=comp, batch=4 if name == "fedavg" else None)

    xs = []
    for executor, workers in (("serial", None), ("processes", 2)):
        with Federation(p, make(), 0.5, executor, workers, seed=2, sampling="bernoulli") as fed:
            fed.run(15)
            xs.append((fed.x, [r["participants"] for r in fed.records]))
    assert np.array_equal(xs[0][0], xs[1][0]) and xs[0][1] == xs[1][1]


def test_sampling_errors(capsys):
    p = synthetic(4, 100, 5, seed=0)
    with pytest.raises(ValueError, match="unknown client sampling"):
        Federation(p, make_method("gd", lr=0.1), 0.5, sampling="poisson")
    assert main(["fl", "--samples", "100", "--clients", "4", "--rounds", "5", "--quiet", "--method", "ef21-pp",
                 "--participation", "0.5", "--sampling", "bernoulli", "--seed", "1"]) == 0
