"""The method matrix of burtorch.fl: the width values travel at (--wire), client sampling by
importance, bidirectional compression (EF21-BC), FedAvg with local optimizers and schedules. Each
rule is checked against an update written here in numpy over a few rounds, and each runs bitwise
alike on the serial and processes executors (Ray: tests/test_fl_executors.py)."""
import math

import numpy as np
import pytest

from burtorch import fl
from burtorch.cli.main import main
from burtorch.fl import streams
from burtorch.fl.logistic import synthetic

N, D = 4, 6


@pytest.fixture(scope="module")
def problem():
    return synthetic(N, 48, D, lam=0.1, split="label", seed=5)


def grad_np(B, lam, x, idx=None):
    """The client's gradient of mean softplus(B x) + lam sum x^2/(1+x^2), in numpy."""
    if idx is not None:
        B = B[idx]
    return B.T @ (1.0 / (1.0 + np.exp(-(B @ x)))) / len(B) + lam * 2 * x / (1 + x * x) ** 2


def f32(v):
    return np.asarray(v, dtype=np.float64).astype(np.float32).astype(np.float64)


def topk_np(v, k):
    out = np.zeros_like(v)
    keep = np.argsort(-np.abs(v), kind="stable")[:k]
    out[keep] = v[keep]
    return out


def rel_close(a, b, tol=1e-14):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(b))))
    assert float(np.max(np.abs(a - b))) <= tol * scale, (a, b)


# ---------------------------------------------------------------- the wire


def test_fp32_wire_rounds_what_the_server_uses_like_numpy(problem):
    lr, k, rounds = 0.05, 2, 6
    fed = fl.Federation(problem, fl.make_method("ef21", lr, fl.make_compressor("topk", D, k)), seed=3)
    x = fed.x.copy()
    fed.run(rounds)
    gi = [f32(grad_np(B, problem.lam, x)) for B in problem.shards]   # round 0: full, rounded
    g = sum(gi) / N
    for _ in range(1, rounds):
        x = x - lr * g
        cs = []
        for i, B in enumerate(problem.shards):
            c = f32(topk_np(grad_np(B, problem.lam, x) - gi[i], k))
            gi[i] = gi[i] + c
            cs.append(c)
        g = g + sum(cs) / N
    rel_close(fed.server["g"], g)
    for i in range(N):
        rel_close(fed.executor.state_of(i)["g"], gi[i])
    assert fed.total_bits == N * (D * 32 + (rounds - 1) * k * (32 + 3))
    # the fp64 wire keeps the values and counts 64 bits each; its iterates differ from fp32's
    wide = fl.Federation(problem, fl.make_method("ef21", lr, fl.make_compressor("topk", D, k, float_bits=64),
                                                 wire="fp64"), seed=3)
    wide.run(rounds)
    assert wide.total_bits == N * (D * 64 + (rounds - 1) * k * (64 + 3))
    assert not np.array_equal(wide.server["g"], fed.server["g"])
    assert np.max(np.abs(wide.server["g"] - fed.server["g"])) < 1e-6


def test_wire_errors(problem):
    with pytest.raises(ValueError, match="unknown wire"):
        fl.make_method("gd", 0.1, wire="fp16")
    with pytest.raises(ValueError, match="float_bits=64"):
        fl.make_method("ef21", 0.1, fl.make_compressor("topk", D, 1), wire="fp64")
    with pytest.raises(ValueError, match="fp32 or fp64"):
        fl.GD(0.1, float_bits=16)


def test_fp32_wire_overflow_stops_the_run_as_diverged(problem):
    with fl.Federation(problem, fl.make_method("gd", 1e300), seed=0) as fed:
        with pytest.raises(fl.federation.Diverged, match="diverged"):
            fed.run(20)
        assert fed.records and fed.stopped
