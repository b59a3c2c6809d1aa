"""Generative tests of issue 41's surfaces: detect_anomaly against a plain run over every op and
range op, eager and compiled; and Python threads building, rewinding and replaying at once. Their
sizes follow BURTORCH_FUZZ (tests/fuzz_profile.py)."""
import math
import random

import numpy as np
import pytest

import burtorch as bt
from fuzz_profile import FUZZ_SEED, MODE_FUZZ_PROGRAMS, THREAD_STRESS_ROUNDS
from op_table import BINARY, NARY, UNARY

HOSTILE = [0.0, -0.0, 1.0, -1.0, 1e-300, -1e-300, 1e300, -1e300, 700.0, 1000.0, -1000.0, math.inf, -math.inf,
           math.nan, 2.5, -2.5]


def _scalar_cases():
    for name, (f, _, _) in UNARY.items():
        yield name, 1, lambda xs, f=f: f(xs[0])
    for name, (f, _, _) in BINARY.items():
        yield name, 2, lambda xs, f=f: f(xs[0], xs[1])
    for name, (f, _, k) in NARY.items():
        n = {"inner_product": 4, "inner_product_with_bias": 5}.get(name, max(k, 3))
        yield name, n, lambda xs, f=f: f(list(xs))


def _range_cases():
    """Range ops, each over Vectors made of the inputs (the inputs are Values: the vectors are
    their copies by bt.vector of Values)."""
    maps = ["exp", "log", "sqrt", "inv", "inv_sqrt", "tanh", "sigmoid", "softplus", "relu", "neg_log", "sqr", "pow3",
            "sin", "cos", "abs"]
    for m in maps:
        yield f"map_{m}", 3, lambda xs, m=m: getattr(bt.vector(xs), m)().sum()
    yield "map_binary_mul", 4, lambda xs: (bt.vector(xs[:2]) * bt.vector(xs[2:])).sum()
    yield "map_binary_div", 4, lambda xs: (bt.vector(xs[:2]) / bt.vector(xs[2:])).sum()
    yield "sum", 3, lambda xs: bt.vector(xs).sum()
    yield "dot", 4, lambda xs: bt.dot(bt.vector(xs[:2]), bt.vector(xs[2:]))
    yield "linear", 6, lambda xs: bt.linear(bt.vector(xs[:2]), bt.vector(xs[2:]).reshape(2, 2)).sum()
    yield "softmax", 3, lambda xs: bt.softmax(bt.vector(xs)).dot(bt.vector([1.0, 2.0, 3.0]))
    yield "cross_entropy", 3, lambda xs: bt.cross_entropy(bt.vector(xs), 1)
    yield "layer_norm", 4, lambda xs: bt.layer_norm(bt.vector(xs), bt.vector([1.0, 2.0, 0.5, 1.0]),
                                                    bt.vector([0.0, 1.0, 0.0, -1.0])).dot(bt.vector([1, -2, 3, 0.5]))
    yield "vmean", 3, lambda xs: bt.vmean(bt.vector(xs))


CASES = list(_scalar_cases()) + list(_range_cases())


def _plain(fn, xs):
    """Whether every number of a run without the mode is finite: each node the ops made, then
    every grad after the backward sweep."""
    arena = bt.current_arena()
    cp = arena.checkpoint()
    try:
        leaves = [bt.Value(x) for x in xs]
        start = leaves[-1].index + 1
        out = fn(leaves)
        end = arena.num_nodes
        values = arena.numpy(start, end, "values", True)
        finite = bool(np.isfinite(values).all())
        if finite:
            out.backward()
            grads = arena.numpy(leaves[0].index, end, "grads", True)
            finite = bool(np.isfinite(grads).all())
        return finite
    finally:
        arena.rewind(cp)


def _anomalous(fn, xs) -> bool:
    arena = bt.current_arena()
    cp = arena.checkpoint()
    try:
        with bt.detect_anomaly():
            out = fn([bt.Value(x) for x in xs])
            out.backward()
        return False
    except bt.AnomalyError:
        return True
    finally:
        arena.rewind(cp)


def _draws(n_args, r):
    return [r.choice(HOSTILE) if r.random() < 0.4 else r.uniform(-3, 3) for _ in range(n_args)]


@pytest.mark.parametrize("name, n_args, fn", CASES, ids=[c[0] for c in CASES])
def test_detect_anomaly_equals_a_non_finite_number_eager(name, n_args, fn):
    r = random.Random(f"{FUZZ_SEED}-{name}")
    seen = set()
    for _ in range(max(4, MODE_FUZZ_PROGRAMS // 20)):
        xs = _draws(n_args, r)
        expected = not _plain(fn, xs)
        assert _anomalous(fn, xs) == expected, f"{name}{tuple(xs)}: a non-finite number {expected}"
        seen.add(expected)


@pytest.mark.parametrize("name, n_args, fn", CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_detect_anomaly_covers_compiled_calls_and_map(name, n_args, fn):
    r = random.Random(f"{FUZZ_SEED}-compiled-{name}")
    argnums = tuple(range(n_args))
    f = bt.value_and_grad(lambda *xs: fn(list(xs)), argnums=argnums)
    rows = [_draws(n_args, r) for _ in range(max(3, MODE_FUZZ_PROGRAMS // 60))]
    for xs in rows:
        expected = not _plain(fn, xs)
        try:
            with bt.detect_anomaly():
                f(*xs)
            raised = False
        except bt.AnomalyError:
            raised = True
        assert raised == expected, f"compiled {name}{tuple(xs)}"
    expected = any(not _plain(fn, xs) for xs in rows)
    try:
        with bt.detect_anomaly():
            f.map(np.array(rows))
        raised = False
    except bt.AnomalyError:
        raised = True
    assert raised == expected, f"map {name}"


# ---------------------------------------------------------------- Python threads at once


def _work(seed: int, shared: dict | None = None):
    """One thread's round: random graphs built and swept (scalar and range ops) in its default
    arena between a checkpoint and a rewind, a compiled function called and mapped, a small
    model's compiled oracle and per-sample gradients, and (when `shared` holds other threads'
    checkpoints) attempts to rewind those, which must be refused. Returns every number it made,
    to compare with the same round run alone."""
    from burtorch.nn import MakemoreMLP

    r = random.Random(seed)
    out = []
    cp = bt.checkpoint()
    if shared is not None:
        shared[seed] = cp
    for _ in range(4):
        xs = [bt.Value(r.uniform(-2, 2)) for _ in range(6)]
        v = bt.vector(xs)
        y = (v.tanh() * v).sum() + bt.softmax(v).dot(v) + xs[0] * xs[1] - xs[2].exp()
        y = y + bt.linear(v, bt.vector([r.uniform(-1, 1) for _ in range(12)]).reshape(2, 6)).sum()
        y.backward()
        out += [y.data] + [x.grad for x in xs]
        if shared is not None:
            for other, their_cp in list(shared.items()):
                if other != seed:
                    try:
                        bt.rewind(their_cp)
                        out.append("rewound another thread's arena")
                    except RuntimeError:
                        pass
    bt.rewind(cp)
    f = bt.value_and_grad(lambda a, b: (a * b).tanh() + bt.vector([a, b]).exp().sum(), argnums=(0, 1))
    for _ in range(3):
        out += list(np.ravel(f(r.uniform(-1, 1), r.uniform(-1, 1))[1]))
    values, grads = f.map(np.array([[r.uniform(-1, 1), r.uniform(-1, 1)] for _ in range(5)]))
    out += values.tolist() + grads.ravel().tolist()
    bt.manual_seed(seed)
    model = MakemoreMLP(vocab=9, block=3, emb=4, hidden=5, dtype=bt.float64)
    batch = [([r.randrange(9) for _ in range(3)], r.randrange(9)) for _ in range(6)]
    out.append(bt.grad_oracle(model, batch, compile=True))
    out += model.parameter_vector().tolist("grads")
    G, L = bt.per_sample_grads(model, batch)
    out += G.ravel().tolist() + L.tolist()
    with bt.detect_anomaly():
        out.append(bt.is_anomaly_enabled())
    out.append(bt.is_anomaly_enabled())
    return out


@pytest.mark.parametrize("n_threads", [2, 4])
def test_threads_build_rewind_and_replay_at_once(n_threads):
    import threading

    rounds = max(2, THREAD_STRESS_ROUNDS // n_threads)
    for k in range(rounds):
        seeds = [FUZZ_SEED * 100 + 10 * k + i for i in range(n_threads)]
        alone = {s: _work(s) for s in seeds}
        results, errors, shared = {}, [], {}
        barrier = threading.Barrier(n_threads)

        def run(s):
            try:
                barrier.wait(10)
                results[s] = _work(s, shared)
            except BaseException as e:  # reported below, with its thread's seed
                errors.append((s, repr(e)))

        threads = [threading.Thread(target=run, args=(s,)) for s in seeds]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        for s in seeds:
            assert results[s] == alone[s], f"round {k}, thread seed {s}: results differ from the same work alone"
