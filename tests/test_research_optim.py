"""The gradient-estimator methods GD, PAGE, EF21, MARINA of burtorch.optim (burtorch.fl's rules on
one model, in process) on a least-squares problem with a known optimum (realizable: f* = 0 at w*).
The compressors are tested in test_fl_compressors.py."""
import math
import random

import pytest

import burtorch as bt
from burtorch.nn import Module
from burtorch.optim import EF21, GD, MARINA, PAGE, SGD, Identity, RandK, RandomDithering, TopK, mean_loss

D = 5
W_STAR = [1.0, -2.0, 0.5, 3.0, -1.0]


class LeastSquares(Module):
    """f(w) = mean_i 0.5 (a_i . w - b_i)^2, built from a range op (dot) and scalar ops."""

    dtype = bt.float64

    def __init__(self, d=D):
        super().__init__()
        self.param("w", d)

    def loss(self, a, b):
        r = bt.dot(bt.leaves(a, dtype=bt.float64), self.w) - b
        return r * r * 0.5


def make_data(n=40, seed=0):
    rng = random.Random(seed)
    data = []
    for _ in range(n):
        a = [rng.gauss(0.0, 1.0) for _ in range(D)]
        data.append((a, sum(x * w for x, w in zip(a, W_STAR))))
    return data


def shards_of(data, n):
    size = len(data) // n
    return [data[i * size:(i + 1) * size] for i in range(n)]


def full_grad_norm(model, data):
    bt.grad_oracle(model, data)
    return math.sqrt(sum(g * g for g in model.parameter_vector().grad))


def dist_to_opt(model):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(model.w.data, W_STAR)))


def gd_trajectory(data, lr, steps):
    """Reference: plain GD with the existing native SGD step on the full data."""
    model = LeastSquares()
    opt = SGD(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        bt.grad_oracle(model, data)
        opt.step()
        out.append(model.w.data)
    return out


def assert_close_lists(a, b, tol):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert abs(x - y) <= tol * (1.0 + abs(y)), (a, b)


# ---------------------------------------------------------------- methods equal GD in their limits

def test_page_with_p_one_is_gd_step_for_step():
    data, lr, steps = make_data(), 0.1, 15
    reference = gd_trajectory(data, lr, steps)
    model = LeastSquares()
    page = PAGE(model, data, lr=lr, batch_size=4, p=1.0, seed=0)
    for t in range(steps):
        page.step()
        assert_close_lists(model.w.data, reference[t], 1e-14)  # the native step may round once differently
    assert page.full_steps == steps
    assert page.sample_grads == (steps + 1) * len(data)


def test_ef21_with_identity_is_gd_step_for_step():
    data, lr, steps = make_data(), 0.1, 15
    reference = gd_trajectory(data, lr, steps)
    model = LeastSquares()
    ef = EF21(model, shards_of(data, 4), lr=lr, compressor=Identity(D))
    for t in range(steps):
        ef.step()
        assert_close_lists(model.w.data, reference[t], 1e-12)
    assert ef.floats_sent == (steps + 1) * D


def test_marina_with_p_one_is_gd_step_for_step():
    data, lr, steps = make_data(), 0.1, 15
    reference = gd_trajectory(data, lr, steps)
    model = LeastSquares()
    m = MARINA(model, shards_of(data, 4), lr=lr, compressor=RandK(D, 1, seed=0), p=1.0, seed=0)
    for t in range(steps):
        m.step()
        assert_close_lists(model.w.data, reference[t], 1e-12)
    assert m.full_steps == steps and m.floats_sent == (steps + 1) * D


def test_distributed_gd_is_gd():
    data, lr, steps = make_data(), 0.1, 10
    reference = gd_trajectory(data, lr, steps)
    model = LeastSquares()
    gd = GD(model, shards_of(data, 5), lr=lr)
    for t in range(steps):
        gd.step()
        assert_close_lists(model.w.data, reference[t], 1e-12)
    assert gd.bits_sent == (steps + 1) * D * 32


# ---------------------------------------------------------------- the estimators' recursions

def test_page_small_step_uses_the_same_minibatch_at_both_points():
    data = make_data()
    seen = []

    def loss_fn(model, sample):
        seen.append((tuple(model.w.data), id(sample)))
        return model.loss(*sample)

    model = LeastSquares()
    page = PAGE(model, data, lr=0.1, batch_size=3, p=1e-9, loss_fn=loss_fn, seed=4)
    page.step()                      # g_0 on all data, x_1, then a small-batch step
    g0_x0 = tuple([0.0] * D)
    x1 = tuple(model.w.data)
    small = seen[len(data):]
    assert len(small) == 6 and page.full_steps == 0
    assert [p for p, _ in small[:3]] == [x1] * 3 and [p for p, _ in small[3:]] == [g0_x0] * 3
    batch_ids = [s for _, s in small[:3]]
    assert batch_ids == [s for _, s in small[3:]] and len(set(batch_ids)) == 3
    # g_1 = g_0 + grad_b(x_1) - grad_b(x_0), recomputed independently.
    batch = [next(s for s in data if id(s) == i) for i in batch_ids]
    check = LeastSquares()
    bt.grad_oracle(check, data)
    g0 = check.w.grad
    bt.grad_oracle(check, batch)
    at_x0 = check.w.grad
    check.w.set_data(list(x1))
    bt.grad_oracle(check, batch)
    at_x1 = check.w.grad
    assert_close_lists(page.g, [a + b - c for a, b, c in zip(g0, at_x1, at_x0)], 1e-12)
    assert page.sample_grads == len(data) + 6
    assert model.w.data == list(x1)  # the previous point was swapped out again


def test_ef21_worker_states_average_to_the_estimate():
    data = make_data()
    model = LeastSquares()
    ef = EF21(model, shards_of(data, 4), lr=0.1, compressor=TopK(D, 2))
    for _ in range(5):
        ef.step()
    mean = [sum(c) / 4 for c in zip(*ef.worker_g)]
    assert_close_lists(ef.g, mean, 1e-12)
    assert ef.floats_sent == D + 5 * 2


# ---------------------------------------------------------------- convergence on the convex problem

# Step counts: each run is inside all three bounds by a factor of 600 or more by its last step
# (the bounds first hold at step 100 for PAGE and 130 for the others).

def check_converged(model, data):
    assert mean_loss(model, data) < 1e-6
    assert full_grad_norm(model, data) < 1e-3
    assert dist_to_opt(model) < 1e-2


def test_page_converges():
    data, steps = make_data(), 200
    model = LeastSquares()
    page = PAGE(model, data, lr=0.15, batch_size=4, seed=1)
    assert page.p == pytest.approx(4 / 44)
    for _ in range(steps):
        page.step()
    assert 0 < page.full_steps < steps
    check_converged(model, data)


def test_ef21_topk_converges():
    data, steps = make_data(), 250
    model = LeastSquares()
    ef = EF21(model, shards_of(data, 4), lr=0.1, compressor=TopK(D, 1))
    for _ in range(steps):
        ef.step()
    check_converged(model, data)
    assert ef.floats_sent == D + steps


def test_marina_randk_converges():
    data, steps = make_data(), 250
    model = LeastSquares()
    m = MARINA(model, shards_of(data, 4), lr=0.1, compressor=RandK(D, 1, seed=2), seed=3)
    assert m.p == pytest.approx((32 + 3) / (32 * D))
    for _ in range(steps):
        m.step()
    assert 0 < m.full_steps < steps
    check_converged(model, data)
    assert m.floats_sent == D * (1 + m.full_steps) + (steps - m.full_steps)


def test_marina_dithering_converges():
    data = make_data()
    model = LeastSquares()
    m = MARINA(model, shards_of(data, 4), lr=0.1, compressor=RandomDithering(D, s=2, seed=2), p=0.3, seed=3)
    for _ in range(250):
        m.step()
    check_converged(model, data)


# ---------------------------------------------------------------- bad input

def test_method_bad_input():
    data = make_data()
    model = LeastSquares()
    with pytest.raises(ValueError, match="contractive"):
        EF21(model, shards_of(data, 2), lr=0.1, compressor=RandK(D, 1))
    with pytest.raises(ValueError, match="unbiased"):
        MARINA(model, shards_of(data, 2), lr=0.1, compressor=TopK(D, 1))
    with pytest.raises(ValueError, match="d=4"):
        EF21(model, shards_of(data, 2), lr=0.1, compressor=TopK(4, 1))
    with pytest.raises(TypeError):
        EF21(model, shards_of(data, 2), lr=0.1, compressor="topk")
    with pytest.raises(ValueError):
        PAGE(model, data, lr=0.1, batch_size=0)
    with pytest.raises(ValueError):
        PAGE(model, data, lr=0.1, batch_size=4, p=0.0)
    with pytest.raises(ValueError):
        PAGE(model, data, lr=-1.0, batch_size=4)
    with pytest.raises(ValueError):
        PAGE(model, [], lr=0.1, batch_size=1)
    with pytest.raises(ValueError):
        MARINA(model, [], lr=0.1, compressor=RandK(D, 1))
    with pytest.raises(TypeError):
        GD(object(), shards_of(data, 2), lr=0.1)
    with pytest.raises(ValueError):
        EF21(model, shards_of(data, 2), lr=0.1, compressor=TopK(D, 1), init="zeros")


# ---------------------------------------------------------------- the example script stays runnable

def test_example_script_runs_and_prints_its_tables(capsys):
    import pathlib
    import runpy

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "research_optimizers.py"
    main = runpy.run_path(str(path))["main"]
    main(["--budget", "4", "--workers", "2", "--per-worker", "6", "--dim", "4", "--k", "1", "--page-batch", "2"])
    out = capsys.readouterr().out
    for name in ("GD", "EF21 Top-1", "MARINA Rand-1", "MARINA dithering s=4", "PAGE"):
        assert name in out
    rows = [line for line in out.splitlines() if line.startswith(("GD ", "EF21", "MARINA", "PAGE"))]
    assert len(rows) == 6
    for row in rows:
        numbers = [float(x) for x in row.split()[-5:]]
        assert all(v >= 0.0 for v in numbers)
