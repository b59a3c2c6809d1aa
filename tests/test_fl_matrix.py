"""The method matrix of burtorch.fl: the width values travel at (--wire), client sampling by
importance, bidirectional compression (EF21-BC), FedAvg with local optimizers and schedules. Each
rule is checked against an update written here in numpy over a few rounds (each runs bitwise alike
on the serial, processes and Ray executors: tests/test_fl_executors.py)."""
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


def ef21_clients_np(problem, x, gi, k):
    """One EF21 round on the clients over an fp32 wire, in numpy: each g_i moves by its rounded
    Top-k message (in place); returns the mean of the messages, the server's update of g."""
    cs = []
    for i, B in enumerate(problem.shards):
        c = f32(topk_np(grad_np(B, problem.lam, x) - gi[i], k))
        gi[i] = gi[i] + c
        cs.append(c)
    return sum(cs) / N


def test_fp32_wire_rounds_what_the_server_uses_like_numpy(problem):
    lr, k, rounds = 0.05, 2, 6
    fed = fl.Federation(problem, fl.make_method("ef21", lr, fl.make_compressor("topk", D, k)), seed=3)
    x = fed.x.copy()
    fed.run(rounds)
    gi = [f32(grad_np(B, problem.lam, x)) for B in problem.shards]   # round 0: full, rounded
    g = sum(gi) / N
    for _ in range(1, rounds):
        x = x - lr * g
        g = g + ef21_clients_np(problem, x, gi, k)
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


# ---------------------------------------------------------------- client sampling by importance


def test_importance_probabilities_follow_L_and_cap_at_one():
    from burtorch.fl.sampling import importance_probabilities

    p = importance_probabilities([1.0, 2.0, 3.0, 4.0], 2.0)
    rel_close(p, [0.2, 0.4, 0.6, 0.8])
    p = importance_probabilities([1.0, 1.0, 1.0, 97.0], 2.0)  # the big one is capped, the rest share one
    rel_close(p, [1 / 3, 1 / 3, 1 / 3, 1.0])
    assert importance_probabilities([3.0, 5.0], 2.0) == (1.0, 1.0)
    for bad_L, tau in (([1.0, 0.0], 1.0), ([1.0, float("nan")], 1.0), ([1.0, 2.0], 0.0), ([1.0, 2.0], 3.0)):
        with pytest.raises(ValueError):
            importance_probabilities(bad_L, tau)


def test_importance_sampled_gd_is_the_reweighted_estimate_in_numpy(problem):
    lr, rounds, tau = 0.2, 8, 0.5
    L_local = np.array(problem.smoothness().L_local)
    p = tau * N * L_local / L_local.sum()
    assert np.all(p < 1) and len(set(np.round(p, 6))) > 1   # no capping, unequal probabilities here
    fed = fl.Federation(problem, fl.make_method("gd", lr), tau, seed=9, sampling="importance")
    rel_close(fed.probabilities, p)
    x = fed.x.copy()
    fed.run(rounds)
    sizes, g = [], np.zeros(D)
    for t in range(rounds):
        if t > 0:
            x = x - lr * g
        chosen = [i for i in range(N) if streams.rng(9, streams.PARTICIPANTS, t, i + 1).random() < p[i]]
        sizes.append(len(chosen))
        g = sum(f32(grad_np(problem.shards[i], problem.lam, x)) / (N * p[i]) for i in chosen) + np.zeros(D)
    rel_close(fed.server["g"], g)
    assert sizes == [r["participants"] for r in fed.records] and len(set(sizes)) > 1


def test_importance_rounds_that_draw_everybody_are_reweighted_too(problem):
    # with p_i near 1 many rounds draw all four clients; the estimate still divides by n p_i
    for seed in range(100):  # a run whose round 0 drew everybody
        fed = fl.Federation(problem, fl.make_method("gd", 0.2), 0.7, seed=seed, sampling="importance")
        if len(fed.participants(0)) == N:
            break
    p = np.array(fed.probabilities)
    x = fed.x.copy()
    fed.round()
    chosen = fed.participants(0)
    assert len(chosen) == N and np.all(p < 1)
    g = sum(f32(grad_np(problem.shards[i], problem.lam, x)) / (N * p[i]) for i in chosen)
    rel_close(fed.server["g"], g)


def test_importance_sampling_frequencies_and_unbiased_estimate(problem):
    fed = fl.Federation(problem, fl.make_method("dcgd", 0.1, fl.make_compressor("identity", D)), 0.5, seed=1,
                        sampling="importance")
    p = np.array(fed.probabilities)
    rounds = 4000
    counts = np.zeros(N)
    for t in range(1, rounds + 1):
        counts[fed.participants(t)] += 1
    sd = np.sqrt(rounds * p * (1 - p))
    assert np.all(np.abs(counts - rounds * p) < 5 * sd), (counts, rounds * p)
    # the reweighted mean of fixed messages averages to their plain mean over the draws
    from burtorch.optim.compressors import full_message
    from burtorch.optim.methods.base import participant_mean
    from burtorch.optim.rounds import Reply, Round

    msgs = [np.arange(D, dtype=float) * (i + 1) for i in range(N)]
    ctx = Round(1, np.zeros(D), None, None, 1, N, tuple(p))
    acc = np.zeros(D)
    for t in range(1, rounds + 1):
        acc += participant_mean([Reply(i, full_message(msgs[i], 64), 0, None) for i in fed.participants(t)], ctx, D)
    target = sum(msgs) / N
    assert np.all(np.abs(acc / rounds - target) < 0.05 * np.abs(target).max())


def test_importance_lr_is_the_stated_rule(problem):
    from burtorch.fl.sampling import importance_lr

    sm = problem.smoothness()
    fed = fl.Federation(problem, fl.make_method("gd", 0.1), 0.5, seed=1, sampling="importance")
    p = np.array(fed.probabilities)
    A = max(np.array(sm.L_local) * (1 - p) / (N * p))
    assert importance_lr(sm.L, sm.L_local, fed.probabilities, 100) == pytest.approx(
        min(1 / sm.L, 1 / math.sqrt(sm.L * A * 100)), rel=1e-14)
    assert importance_lr(sm.L, sm.L_local, (1.0,) * N, 100) == 1 / sm.L
    # EF21-PP's theory step counts on the slowest client: alpha -> min_i p_i alpha
    from burtorch.optim.methods.ef21 import ef21_lr

    ef = fl.Federation(problem, fl.make_method("ef21-pp", None, fl.make_compressor("topk", D, 2)), 0.5, seed=1,
                       sampling="importance")
    assert ef.method.lr == pytest.approx(ef21_lr(sm.L, sm.L_tilde, 2 / D * min(p)), rel=1e-14)


def test_partial_participation_refusals_say_why(problem):
    with pytest.raises(ValueError, match="running sum"):
        fl.Federation(problem, fl.make_method("marina", 0.1, fl.make_compressor("randk", D, 1)), 0.5)
    with pytest.raises(ValueError, match="shift"):
        fl.Federation(problem, fl.make_method("diana", 0.1, fl.make_compressor("randk", D, 1)), 0.5,
                      sampling="importance")
    from burtorch.fl.problem import SampleProblem

    no_L = SampleProblem(lambda: None, [[1], [2]])
    with pytest.raises(ValueError, match="per-client smoothness"):
        fl.Federation(no_L, fl.make_method("gd", 0.1), 0.5, sampling="importance")


# ---------------------------------------------------------------- bidirectional compression


def test_ef21_bc_against_numpy_with_bits_both_ways(problem):
    lr, k, kd, rounds = 0.1, 2, 3, 7
    method = fl.make_method("ef21-bc", lr, fl.make_compressor("topk", D, k), downlink=fl.make_compressor("topk", D, kd))
    fed = fl.Federation(problem, method, seed=4)
    x = fed.x.copy()
    fed.run(rounds)
    gi = [f32(grad_np(B, problem.lam, x)) for B in problem.shards]
    g = sum(gi) / N
    b = f32(g)                                   # round 0: b = g, sent whole
    for _ in range(1, rounds):
        x = x - lr * b
        g = g + ef21_clients_np(problem, x, gi, k)
        b = b + f32(topk_np(g - b, kd))
    rel_close(fed.server["g"], g)
    rel_close(fed.server["b"], b)
    rel_close(fed.x - lr * fed.server["b"], x - lr * b)
    up = N * (D * 32 + (rounds - 1) * k * (32 + 3))
    down = N * (D * 32 + (rounds - 1) * kd * (32 + 3))
    assert fed.total_bits == up and fed.total_bits_down == down
    assert fed.records[-1]["bits_down_per_client"] == down / N
    # a downlink that sends everything on an fp64 wire is EF21 (b = g up to b + (g - b) rounding)
    same = fl.Federation(problem, fl.make_method("ef21-bc", lr, fl.make_compressor("topk", D, k, float_bits=64),
                                                 downlink=fl.make_compressor("identity", D, float_bits=64),
                                                 wire="fp64"), seed=4)
    plain = fl.Federation(problem, fl.make_method("ef21", lr, fl.make_compressor("topk", D, k, float_bits=64),
                                                  wire="fp64"), seed=4)
    same.run(rounds)
    plain.run(rounds)
    rel_close(same.x, plain.x, 1e-13)
    assert same.total_bits == plain.total_bits
    assert plain.total_bits_down == N * rounds * 64 * D    # the default downlink: x at fp64


def test_ef21_bc_errors(problem):
    topk = fl.make_compressor("topk", D, 1)
    with pytest.raises(ValueError, match="downlink compressor"):
        fl.Federation(problem, fl.make_method("ef21-bc", 0.1, topk))
    with pytest.raises(ValueError, match="contractive"):
        fl.Federation(problem, fl.make_method("ef21-bc", 0.1, topk, downlink=fl.make_compressor("randk", D, 1)))
    with pytest.raises(ValueError, match="d=3"):
        fl.Federation(problem, fl.make_method("ef21-bc", 0.1, topk, downlink=fl.make_compressor("topk", 3, 1)))
    with pytest.raises(ValueError, match="needs lr"):
        fl.Federation(problem, fl.make_method("ef21-bc", None, topk, downlink=topk))
    with pytest.raises(ValueError, match="downlink message"):
        fl.Federation(problem, fl.make_method("ef21-bc", 0.1, topk, downlink=topk), 0.5)
    with pytest.raises(ValueError, match="for ef21-bc"):
        fl.make_method("ef21", 0.1, topk, downlink=topk)
    assert main(["fl", "--samples", "100", "--clients", "4", "--rounds", "3", "--quiet", "--method", "ef21-bc",
                 "--downlink", "randk", "--lr", "0.1", "--seed", "1"]) == 2


# ---------------------------------------------------------------- FedAvg: local optimizers, schedules


def _schedule(kind, lr, t, period, decay=0.5):
    if kind == "constant":
        return lr
    if kind == "step":
        return lr * decay ** (t // period)
    return lr * (1 + math.cos(math.pi * min(t, period) / period)) / 2


@pytest.mark.parametrize("opt,schedule", [("adam", "cosine"), ("sgd", "step"), ("adam", "constant")])
def test_fedavg_local_optimizer_and_schedule_against_numpy(problem, opt, schedule):
    lr, K, b, slr, rounds, period = 0.05, 3, 4, 0.7, 5, 4
    method = fl.make_method("fedavg", lr, batch=b, local_steps=K, server_lr=slr, local_optimizer=opt,
                            schedule=schedule, period=period, decay=0.3)
    fed = fl.Federation(problem, method, 0.5, seed=6)
    x = fed.x.copy()
    fed.run(rounds)
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(rounds):
        chosen = sorted(streams.rng(6, streams.PARTICIPANTS, t).sample(range(N), 2))
        step = _schedule(schedule, lr, t, period, 0.3)
        deltas = []
        for i in chosen:
            y, m, v = x.copy(), np.zeros(D), np.zeros(D)
            for k in range(K):
                idx = sorted(streams.rng(6, streams.MINIBATCH, i, t, k).sample(range(12), b))
                g = grad_np(problem.shards[i], problem.lam, y, idx)
                if opt == "adam":
                    m = b1 * m + (1 - b1) * g
                    v = b2 * v + (1 - b2) * g * g
                    y = y - step * (m / (1 - b1 ** (k + 1))) / (np.sqrt(v / (1 - b2 ** (k + 1))) + eps)
                else:
                    y = y - step * g
            deltas.append(f32(x - y))
        x = x - slr * sum(deltas) / len(chosen)
    rel_close(fed.x, x)
    assert fed.method.round_lr(rounds) == pytest.approx(_schedule(schedule, lr, rounds, period, 0.3), rel=1e-15)


def test_fedavg_importance_sampled_is_reweighted(problem):
    lr, rounds = 0.1, 4
    fed = fl.Federation(problem, fl.make_method("fedavg", lr, local_steps=2), 0.5, seed=2, sampling="importance")
    p = np.array(fed.probabilities)
    x = fed.x.copy()
    fed.run(rounds)
    for t in range(rounds):
        chosen = [i for i in range(N) if streams.rng(2, streams.PARTICIPANTS, t, i + 1).random() < p[i]]
        acc = np.zeros(D)
        for i in chosen:
            y = x.copy()
            for _ in range(2):
                y = y - lr * grad_np(problem.shards[i], problem.lam, y)
            acc = acc + f32(x - y) / (N * p[i])
        x = x - acc
    rel_close(fed.x, x)


def test_fedavg_option_errors(problem):
    with pytest.raises(ValueError, match="local optimizer"):
        fl.make_method("fedavg", 0.1, local_optimizer="lbfgs")
    with pytest.raises(ValueError, match="schedule"):
        fl.make_method("fedavg", 0.1, schedule="linear")
    with pytest.raises(ValueError, match="period"):
        fl.make_method("fedavg", 0.1, schedule="cosine")
    with pytest.raises(ValueError, match="decay"):
        fl.make_method("fedavg", 0.1, schedule="step", period=3, decay=2.0)
    with pytest.raises(ValueError, match="fedavg's"):
        fl.make_method("gd", 0.1, local_optimizer="adam")
    base = ["fl", "--samples", "100", "--clients", "4", "--rounds", "6", "--quiet", "--method", "fedavg", "--lr", "0.1",
            "--seed", "1"]
    assert main(base + ["--local-optimizer", "adam", "--schedule", "cosine", "--server-lr", "0.5"]) == 0
    assert main(base + ["--schedule", "step", "--lr-decay", "3"]) == 2


# ---------------------------------------------------------------- the command line


def test_command_line_options_of_the_matrix(tmp_path, capsys):
    import json

    base = ["fl", "--samples", "120", "--clients", "4", "--dim", "6", "--rounds", "5", "--seed", "3", "--quiet",
            "--k", "1"]
    runs = {}
    for wire in ("fp32", "fp64"):
        out = tmp_path / f"{wire}.json"
        assert main(base + ["--method", "ef21", "--lr", "0.1", "--wire", wire, "--json", str(out)]) == 0
        runs[wire] = json.loads(out.read_text())["runs"][0]
    b32, b64 = (runs[w]["records"][-1]["bits_per_client"] for w in ("fp32", "fp64"))
    assert b32 == 6 * 32 + 4 * (32 + 3) and b64 == 6 * 64 + 4 * (64 + 3)
    assert runs["fp64"]["settings"]["wire"] == "fp64"
    out = tmp_path / "imp.json"
    assert main(base + ["--method", "gd", "--lr", "0.2", "--participation", "0.5", "--sampling", "importance",
                        "--json", str(out)]) == 0
    recs = json.loads(out.read_text())["runs"][0]["records"]
    assert all(r["bits_down"] == r["participants"] * 64 * 6 for r in recs)
    # without --lr, importance-sampled GD takes the stated rule's step for --rounds rounds
    from burtorch.fl.logistic import synthetic as make
    from burtorch.fl.sampling import importance_lr, importance_probabilities

    out = tmp_path / "imp-theory.json"
    assert main(base + ["--method", "gd", "--participation", "0.5", "--sampling", "importance", "--json",
                        str(out)]) == 0
    sm = make(4, 120, 6, seed=3).smoothness()
    expected = importance_lr(sm.L, sm.L_local, importance_probabilities(sm.L_local, 2.0), 5)
    assert json.loads(out.read_text())["runs"][0]["settings"]["lr"] == pytest.approx(expected, rel=1e-14)
    assert main(base + ["--method", "ef21-bc", "--lr", "0.2", "--downlink", "topk", "--downlink-k", "2"]) == 0
    assert "down" in capsys.readouterr().out
    assert main(base + ["--method", "marina", "--compressor", "randk", "--participation", "0.5"]) == 2
    assert "running sum" in capsys.readouterr().err
