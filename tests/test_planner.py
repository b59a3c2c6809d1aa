"""The planned step (opt.train_step, grad_oracle(plan="auto")): the choice is a function of the
measured times; every plan gives its path's result (bitwise where the path is); the memory setting
bounds the candidates; the fallbacks (a guard that fails, a model that cannot be traced, momentum,
an optimizer over other parameters, a plan that fails later) happen by themselves and are said."""
import random

import numpy as np
import pytest

import burtorch as bt
from burtorch import planner
from burtorch.nn import MakemoreMLP, MiniGPT
from burtorch.optim import SGD, Adam
from burtorch.planner import EAGER, Plan
from cores import ALLOWED, needs_two


@pytest.fixture(autouse=True)
def _fresh_plans():
    planner.clear()
    yield
    planner.clear()


def _mlp(seed=3, cls=MakemoreMLP, dtype=bt.float64):
    bt.manual_seed(seed)
    return cls(vocab=11, block=4, emb=5, hidden=7, dtype=dtype)


def _gpt(seed=3):
    bt.manual_seed(seed)
    return MiniGPT(vocab=13, block=4, dim=8, layers=1, heads=2, dtype=bt.float64)


def _mlp_batch(r, n):
    return [([r.randrange(11) for _ in range(4)], r.randrange(11)) for _ in range(n)]


def _gpt_batch(r, n):
    return [([r.randrange(13) for _ in range(4)], [r.randrange(13) for _ in range(4)]) for _ in range(n)]


def _values(model):
    return model.parameter_vector().numpy().copy()


# -- the decision ------------------------------------------------------------------------------

def test_choose_is_the_fastest_and_ties_go_to_the_earlier_candidate():
    a, b, c = Plan(True, 0, True, 1), Plan(True, 1, False, 1), EAGER
    assert planner.choose({a: 2.0, b: 1.0, c: 3.0}, [a, b, c]) == b
    assert planner.choose({a: 1.0, b: 1.0, c: 1.0}, [a, b, c]) == a
    assert planner.choose({a: 1.0, b: 1.0}, [b, a, c]) == b
    assert planner.choose({c: 5.0}, [a, b, c]) == c  # untimed candidates do not count
    with pytest.raises(ValueError, match="no candidate"):
        planner.choose({}, [a, b])


class FakeClock:
    """A clock that advances by the injected cost of each trial: measure() sees only these."""

    def __init__(self, cost):
        self.now, self.cost = 0.0, cost

    def __call__(self):
        return self.now

    def trial(self, plan):
        self.now += self.cost[plan]


def test_measure_is_deterministic_given_its_timings_and_keeps_its_budget():
    cands, _ = planner.candidates(32, (1, 2), chunked=True, fusable=True, limit=None)
    cost = {p: (i % 5 + 1) / 128 for i, p in enumerate(cands)}  # binary fractions: the clock's sums are exact
    choices = []
    for _ in range(2):
        clock = FakeClock(cost)
        chosen = planner.measure(cands, clock.trial, budget=10.0, clock=clock)
        choices.append((chosen.plan, dict(chosen.times)))
    assert choices[0] == choices[1]
    assert chosen.plan == planner.choose(chosen.times, cands) == cands[0]  # the lowest cost, the earliest
    assert chosen.times[cands[0]] == 1 / 128
    # a budget of 0.1 s: the first candidate always, then none started after the budget ran out
    clock = FakeClock(cost)
    chosen = planner.measure(cands, clock.trial, budget=0.1, clock=clock, enough=0.0)
    assert 1 <= len(chosen.times) < len(cands)
    assert all(chosen.skipped[p] == "out of the planning budget" for p in cands if p not in chosen.times)
    assert list(chosen.times) == cands[:len(chosen.times)]


def test_a_candidate_that_raises_is_left_out_with_why_and_a_bad_loss_stops_planning():
    a, b = Plan(True, 1, False, 1), EAGER
    clock = FakeClock({a: 0.001, b: 0.002})

    def trial(p):
        if p == a:
            raise bt.TraceError("cannot trace")
        clock.trial(p)

    chosen = planner.measure([a, b], trial, clock=clock)
    assert chosen.plan == b and "TraceError: cannot trace" in chosen.skipped[a]
    assert "cannot trace" in chosen.explain()

    def bad(p):
        raise FloatingPointError("the loss is nan")

    with pytest.raises(FloatingPointError):
        planner.measure([a, b], bad, clock=clock)
    with pytest.raises(RuntimeError, match="no path could run"):
        planner.measure([a], lambda p: trial(a), clock=clock)


def test_plan_spellings_round_trip_and_bad_ones_are_clear():
    for p in (EAGER, Plan(True, 0, True, 2), Plan(False, 8, False, 1), Plan(True, 32, True, 2)):
        assert planner.parse(str(p)) == p
    assert planner.parse("compiled chunk=8", threads=2) == Plan(True, 8, False, 2)
    assert planner.parse("eager") == EAGER
    for bad in ("", "fast", "compiled chunk=0", "eager threads=x", "compiled fused=1", "eager chunk"):
        with pytest.raises(ValueError):
            planner.parse(bad)
    with pytest.raises(TypeError):
        planner.parse(3)


def test_memory_bounds_the_candidates():
    n = 32
    every, _ = planner.candidates(n, (1,), chunked=True, fusable=True, limit=None)
    assert {p.samples_per_graph(n) for p in every} == {1, 8, 32}
    sample, left = planner.candidates(n, (1, 2), chunked=True, fusable=True, limit=0)
    assert sample and all(p.samples_per_graph(n) == 1 and p.threads == 1 for p in sample) and EAGER in sample
    assert Plan(True, 1, False, 2) in left  # a frame per thread: two samples' graphs at once
    assert left and all("one sample's graph at a time" in why for why in left.values())
    budget, left = planner.candidates(n, (1,), chunked=True, fusable=True, limit=10 * 1000, sample_bytes=1000)
    assert {p.samples_per_graph(n) for p in budget} == {1, 8} and all("budget" in w for w in left.values())
    two, _ = planner.candidates(n, (1, 2), chunked=True, fusable=True, limit=10 * 1000, sample_bytes=1000)
    assert Plan(True, 8, False, 1) in two and Plan(True, 8, False, 2) not in two  # 16 samples' frames
    assert Plan(False, 8, False, 2) in two  # eager threads split one graph's records
    assert planner.memory_limit(None) == planner.DEFAULT_MEMORY
    assert planner.memory_limit("sample") == 0 and planner.memory_limit("fast") is None
    for bad, err in (("lots", TypeError), (0, ValueError), (-5, ValueError), (True, TypeError), (1.5, TypeError)):
        with pytest.raises(err):
            planner.memory_limit(bad)


def test_memory_sample_only_ever_builds_one_sample_per_graph():
    model = _mlp()
    opt = SGD(model.parameters(), lr=0.1)
    opt.train_step(model, _mlp_batch(random.Random(1), 16), memory="sample")
    assert opt.plan.plan.samples_per_graph(16) == 1 and opt.plan.plan.threads == 1
    assert all(p.samples_per_graph(16) == 1 and p.threads == 1 for p in opt.plan.times)


# -- every plan gives its path's result ------------------------------------------------------------

def _step_by(plan, make, batch, opt_cls=SGD, **kw):
    model = make()
    opt = opt_cls(model.parameters(), **kw)
    loss = opt.train_step(model, batch, plan=plan)
    return loss, _values(model)


@pytest.mark.parametrize("make,batch_of", [(_mlp, _mlp_batch), (_gpt, _gpt_batch)])
def test_every_candidate_gives_its_paths_step(make, batch_of):
    batch = batch_of(random.Random(2), 16)
    ref_loss, ref = _step_by("eager", make, batch, lr=0.1)
    # by hand, the paths each plan names: the paper's oracle and step, on a twin model
    model = make()
    opt = SGD(model.parameters(), lr=0.1)
    assert bt.grad_oracle(model, batch) == ref_loss
    opt.step()
    assert np.array_equal(_values(model), ref)
    threads = (1, 2) if ALLOWED >= 2 else (1,)
    cands, _ = planner.candidates(16, threads, chunked=True, fusable=True, limit=None)
    for p in cands:
        loss, got = _step_by(p, make, batch, lr=0.1)
        if p.chunk == 1 and not p.fused and p.threads == 1:
            # one sample at a time, in batch order, on one thread: the paper's bits
            assert loss == ref_loss and np.array_equal(got, ref), p
        else:  # several samples per graph (or threads) add the same terms in another order
            assert loss == pytest.approx(ref_loss, rel=1e-12), p
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12, err_msg=str(p))
        # and each plan is bitwise its own path, run again
        again_loss, again = _step_by(p, make, batch, lr=0.1)
        assert again_loss == loss and np.array_equal(again, got), p


def test_the_paper_eager_step_matches_finite_differences():
    model = _mlp()
    batch = _mlp_batch(random.Random(4), 6)
    before = _values(model)
    opt = SGD(model.parameters(), lr=0.5)
    opt.train_step(model, batch, plan="eager")
    step = (before - _values(model)) / 0.5  # the gradient SGD took
    pv = model.parameter_vector()
    pv.set_data(before)
    h = 1e-6
    for i in (0, 7, len(before) // 2, len(before) - 1):
        up, dn = before.copy(), before.copy()
        up[i] += h
        dn[i] -= h
        pv.set_data(up)
        f_up = bt.oracle.mean_loss(model, batch)
        pv.set_data(dn)
        f_dn = bt.oracle.mean_loss(model, batch)
        assert step[i] == pytest.approx((f_up - f_dn) / (2 * h), abs=1e-6)


def test_the_first_planned_step_is_the_chosen_plans_step_alone():
    batch = _gpt_batch(random.Random(5), 8)
    a = _gpt()
    opt_a = SGD(a.parameters(), lr=0.1)
    loss_a = opt_a.train_step(a, batch)
    chosen = opt_a.plan
    assert chosen.plan in chosen.times and chosen.cost > 0
    assert bt.explain_plan(opt_a).startswith(f"plan: {chosen.plan}")
    assert str(chosen.plan) in bt.explain_plan()
    loss_b, b = _step_by(chosen.plan, _gpt, batch, lr=0.1)  # the trials were undone
    assert loss_a == loss_b and np.array_equal(_values(a), b)
    assert opt_a.state.steps == 1
    # cached: the next step of the same structure and shape does not plan again
    opt_a.train_step(a, batch)
    assert opt_a.plan is chosen and opt_a.state.steps == 2


def test_a_new_batch_shape_or_optimizer_kind_plans_again():
    model = _gpt()
    sgd = SGD(model.parameters(), lr=0.1)
    sgd.train_step(model, _gpt_batch(random.Random(1), 8))
    sgd.train_step(model, _gpt_batch(random.Random(1), 4))
    adam = Adam(model.parameters(), lr=1e-3)
    adam.train_step(model, _gpt_batch(random.Random(1), 8))
    assert len(planner.CACHE) == 3
    assert not any(p.fused for p in adam.plan.times)


def test_grad_oracle_plan_auto_gives_the_gradient():
    model = _mlp()
    batch = _mlp_batch(random.Random(6), 12)
    pv = model.parameter_vector()
    ref_loss = bt.grad_oracle(model, batch)
    ref = pv.numpy("grads").copy()
    before = _values(model)
    loss = bt.grad_oracle(model, batch, plan="auto")
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(pv.numpy("grads"), ref, rtol=0, atol=1e-12)
    assert np.array_equal(_values(model), before)  # an oracle never steps
    assert bt.grad_oracle(model, batch, plan="eager") == ref_loss
    assert np.array_equal(pv.numpy("grads"), ref)
    with pytest.raises(ValueError, match="zero_grad"):
        bt.grad_oracle(model, batch, plan="auto", zero_grad=False)
    with pytest.raises(ValueError, match="train_step"):
        bt.grad_oracle(model, batch, plan="compiled chunk=batch fused")
    with pytest.raises(ValueError):
        bt.grad_oracle(model, batch, plan="quick")
    with pytest.raises(ValueError, match="empty"):
        bt.grad_oracle(model, [], plan="auto")


# -- fallbacks ------------------------------------------------------------------------------------

def test_a_batch_that_takes_another_branch_still_gets_its_gradient():
    model = _mlp()
    batch = _mlp_batch(random.Random(9), 16)
    pv = model.parameter_vector()
    cp = pv.arena.checkpoint()
    raw = sorted(model.loss(*s).data for s in batch)
    pv.arena.rewind(cp)
    threshold = (raw[7] + raw[8]) / 2  # half the samples on each side of the traced branch

    def branchy(m, sample):  # a guard: the compiled paths replay it and run failing samples eagerly
        loss = m.loss(*sample)
        return loss * 0.5 if loss > threshold else loss

    ref_loss = bt.grad_oracle(model, batch, branchy)
    ref = pv.numpy("grads").copy()
    assert bt.grad_oracle(model, batch, branchy, plan="compiled") == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(pv.numpy("grads"), ref, rtol=0, atol=1e-12)
    opt = SGD(model.parameters(), lr=0.1)
    before = _values(model)
    loss = opt.train_step(model, batch, branchy)
    assert "custom loss_fn" in opt.plan.explain()
    assert all(p.samples_per_graph(16) == 1 for p in opt.plan.times)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(_values(model), before - 0.1 * ref, rtol=0, atol=1e-12)


class Untraceable(MakemoreMLP):
    """Reads a number out of the graph: a trace cannot record that, so only eager paths run it."""

    def loss(self, ids, target):
        loss = super().loss(ids, target)
        return loss * (1.0 + 0.0 * float(loss.data))

    def loss_batch(self, samples):
        loss = super().loss_batch(samples)
        return loss * (1.0 + 0.0 * float(loss.data))


def test_a_model_that_cannot_be_traced_falls_back_to_eager_paths_and_says_so():
    batch = _mlp_batch(random.Random(10), 8)
    ref_loss, ref = _step_by("eager", lambda: _mlp(cls=Untraceable), batch, lr=0.1)
    model = _mlp(cls=Untraceable)
    opt = SGD(model.parameters(), lr=0.1)
    loss = opt.train_step(model, batch)
    assert not opt.plan.plan.compile
    assert any(p.compile for p in opt.plan.skipped) and "TraceError" in opt.plan.explain()
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(_values(model), ref, rtol=0, atol=1e-12)


def test_momentum_and_other_parameters_are_never_fused_and_the_plan_says_why():
    batch = _mlp_batch(random.Random(11), 8)
    ref_loss, ref = _step_by("eager", _mlp, batch, momentum=0.9, lr=0.1)
    model = _mlp()
    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert opt.train_step(model, batch) == pytest.approx(ref_loss, rel=1e-12)
    np.testing.assert_allclose(_values(model), ref, rtol=0, atol=1e-12)
    assert not any(p.fused for p in opt.plan.times) and "momentum" in opt.plan.explain()
    # an optimizer over the model's last parameter only: the others keep their values
    model = _mlp()
    last = model.parameters()[-1]
    before = [v.numpy().copy() for v in model.parameters()]
    opt = SGD([last], lr=0.1)
    opt.train_step(model, batch)
    assert not any(p.fused for p in opt.plan.times) and "not the model's" in opt.plan.explain()
    for v, b in zip(model.parameters()[:-1], before[:-1]):
        assert np.array_equal(v.numpy(), b)
    assert not np.array_equal(last.numpy(), before[-1])


def test_a_chosen_plan_that_fails_later_runs_that_step_eagerly():
    fast = Plan(True, 1, False, 1)
    ran = []

    def run(p):
        ran.append(p)
        if p == fast and len(ran) > 4:  # fine while planning, failing on a later batch
            raise RuntimeError("replay refused")
        return 1.0

    build = lambda: ([fast, EAGER], {}, [])  # noqa: E731
    undone = []
    _, chosen = planner.planned("k", build, run, run, lambda: undone.append(True), budget=0.0, take=False)
    assert undone == [True] and chosen.plan in (fast, EAGER) and planner.CACHE["k"] is chosen
    chosen.plan = fast
    ran.clear()
    ran.extend([fast] * 5)  # from now on the fast plan fails
    loss, chosen = planner.planned("k", build, run, run)
    assert loss == 1.0 and ran[-2:] == [fast, EAGER]
    assert any("replay refused" in f for f in chosen.fallbacks)


def test_bad_input_is_a_clear_error_and_changes_nothing():
    model = _mlp()
    opt = SGD(model.parameters(), lr=0.1)
    before = _values(model)
    with pytest.raises(ValueError, match="empty"):
        opt.train_step(model, [])
    with pytest.raises(ValueError):
        opt.train_step(model, _mlp_batch(random.Random(1), 4), plan="warp")
    with pytest.raises(ValueError):
        opt.train_step(model, _mlp_batch(random.Random(1), 4), memory=-1)
    with pytest.raises(TypeError):
        opt.train_step(object(), _mlp_batch(random.Random(1), 4))
    with pytest.raises(ValueError, match="threads"):
        opt.train_step(model, _mlp_batch(random.Random(1), 4), threads=ALLOWED + 1)
    with bt.no_grad(), pytest.raises(ValueError, match="no_grad"):
        opt.train_step(model, _mlp_batch(random.Random(1), 4))
    with bt.no_grad(), pytest.raises(ValueError, match="no_grad"):
        bt.grad_oracle(model, _mlp_batch(random.Random(1), 4), plan="auto")
    adam = Adam(model.parameters())
    with pytest.raises(ValueError, match="fuses"):
        adam.train_step(model, _mlp_batch(random.Random(1), 4), plan="eager chunk=batch fused")
    assert np.array_equal(_values(model), before) and opt.state.steps == 0


@needs_two
def test_the_planner_tries_the_threads_this_process_may_use():
    model = _gpt()
    opt = SGD(model.parameters(), lr=0.1)
    opt.train_step(model, _gpt_batch(random.Random(1), 8), memory="fast")
    counts = {p.threads for p in list(opt.plan.times) + list(opt.plan.skipped)}
    assert counts == {1, 2}
    planner.clear()
    opt.train_step(model, _gpt_batch(random.Random(1), 8), threads=1)
    assert {p.threads for p in opt.plan.times} == {1}
