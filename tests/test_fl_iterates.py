"""EF21 + TopK's iterates, bitwise, against the formulation they had before its client round was
fused into one pass (the message C(grad - g_i) selected from the difference as it is read): the
run is replayed here with the same gradients (the problem's own oracle) and numpy alone for the
rest (the difference written out, the top k by a stable sort, the wire's rounding, the server's
sum in client order), and every broadcast point, server estimate and client state must be the
same bits. Executors reuse the client code, and test_fl_executors checks they match serial."""
import numpy as np
import pytest

from burtorch import fl
from burtorch.fl.client import ClientGroup
from burtorch.fl.logistic import synthetic

N, D, K, SEED = 6, 40, 3, 21


@pytest.fixture(scope="module")
def problem():
    return synthetic(N, 240, D, lam=0.1, split="label", seed=9)


def wire(v, bits):
    return v.astype(np.float32).astype(np.float64) if bits == 32 else v


def top_k(v, k):
    keep = np.sort(np.lexsort((np.arange(len(v)), -np.abs(v)))[:k])
    return keep, v[keep]


def by_hand(problem, method, rounds, participants):
    """(points, server g, client g_i) of EF21 replayed in numpy over the problem's gradients."""
    oracle = ClientGroup(problem, fl.EF21(0.1, fl.TopK(D, K)), range(N))
    bits, lr = method.float_bits, method.lr
    x = problem.initial_point(SEED)
    gi: dict[int, np.ndarray] = {}
    g = None
    points = []
    for t in range(rounds):
        if t > 0:
            x = x - lr * g
        points.append(x)
        acc = np.zeros(D)
        for i in participants(t):
            grad = oracle.evaluate(i, x)[1]
            if i not in gi:  # round 0 (init="full"): the whole gradient at the wire's width
                gi[i] = np.array(wire(grad, bits))
                acc += gi[i]
                continue
            idx, val = top_k(grad - gi[i], K)
            val = wire(val, bits)
            gi[i][idx] += val
            acc[idx] += val
        acc /= N
        g = acc if g is None else g + acc
    return points, g, gi


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_ef21_topk_iterates_are_the_unfused_formulation_bitwise(problem, bits, participation):
    method = fl.EF21(0.3, fl.TopK(D, K, float_bits=bits))
    rounds = 12
    with fl.Federation(problem, method, participation=participation, seed=SEED, eval_every=0) as fed:
        points = []
        for _ in range(rounds):
            fed.round()
            points.append(fed.x.copy())  # EF21's absorb leaves the round's point where it was
        chosen = {t: fed.participants(t) for t in range(rounds)}
        states = {i: fed.executor.state_of(i)["g"] for i in range(N)}
        want_points, want_g, want_gi = by_hand(problem, method, rounds, chosen.__getitem__)
        assert [p.tobytes() for p in points] == [p.tobytes() for p in want_points]
        assert fed.server["g"].tobytes() == want_g.tobytes()
        assert all(states[i].tobytes() == want_gi[i].tobytes() for i in range(N))
    # the run moved: the comparison is of points that differ from round to round
    assert len({p.tobytes() for p in points}) == rounds
