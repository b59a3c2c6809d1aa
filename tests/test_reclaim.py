"""Automatic reclamation of the arena's top and compaction of holes, against a pure-Python
reference (issue 43).

The reference knows the arena as a stack of nodes and, for every live handle (a Value, a Vector,
a numpy view, a checkpoint), the highest node it pins. Its rule: when the last pin of the top node
goes, the arena shrinks to one past the highest pinned node; a rewind drops everything from the
checkpoint up (handles there go stale); a handle released on another thread than the one owning a
thread's default arena unpins without reclaiming. A sweep (backward) may compact: the reference
then checks that the nodes that moved moved as one block by the number of nodes given back, over
a hole no handle pinned, that no Vector, numpy view or checkpoint was moved, and follows the moved
Values to their new places. Every step compares the arena's size, each live handle's value
(Values, Vectors and numpy views read what they were created with: a reclaimed or moved slot is
never read through an old handle) and each stale handle's refusal.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import burtorch as bt
from burtorch.views import numpy_view


class Handle:
    def __init__(self, kind: str, obj: object, top: int, expect: list[float]) -> None:
        self.kind, self.obj, self.top, self.expect = kind, obj, top, expect


class Reclaim(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.arena = bt.Arena(bt.float64)
        self.n = 0  # the reference arena's size
        self.live: list[Handle] = []
        self.stale: list[Handle] = []
        self.checkpoints: list[tuple[bt.Checkpoint, int]] = []  # (checkpoint, position), droppable
        self.counter = 0.0

    # ---------------------------------------------------------------- the reference's rule
    def pinned_top(self) -> int:
        tops = [h.top for h in self.live] + [pos - 1 for _, pos in self.checkpoints if pos > 0]
        return max(tops, default=-1)

    def pins_on(self, slot: int) -> int:
        return sum(h.top == slot for h in self.live) + sum(pos - 1 == slot for _, pos in self.checkpoints)

    def release(self, slot: int, reclaims: bool = True) -> None:
        # called after the handle left self.live / self.checkpoints
        if reclaims and slot == self.n - 1 and self.pins_on(slot) == 0:
            self.n = self.pinned_top() + 1

    def value_handles(self) -> list[Handle]:
        return [h for h in self.live if h.kind in ("value", "loss")]

    # ---------------------------------------------------------------- rules
    @rule()
    def leaf(self) -> None:
        self.counter += 1.0
        with self.arena:
            v = bt.Value(self.counter)
        self.live.append(Handle("value", v, self.n, [self.counter]))
        self.n += 1

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6), j=st.integers(0, 10**6))
    def add(self, i: int, j: int) -> None:
        vs = self.value_handles()
        a, b = vs[i % len(vs)], vs[j % len(vs)]
        out = a.obj + b.obj  # type: ignore[operator]
        self.live.append(Handle("value", out, self.n, [a.expect[0] + b.expect[0]]))
        self.n += 1

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6), j=st.integers(0, 10**6))
    def vector(self, i: int, j: int) -> None:
        vs = self.value_handles()
        a, b = vs[i % len(vs)], vs[j % len(vs)]
        vec = bt.vector([a.obj, b.obj])  # a view: no new nodes
        self.live.append(Handle("vector", vec, max(a.top, b.top), a.expect + b.expect))

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6))
    def view(self, i: int) -> None:
        vs = self.value_handles()
        a = vs[i % len(vs)]
        self.live.append(Handle("numpy", numpy_view(a.obj), a.top, list(a.expect)))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6))
    def drop(self, i: int) -> None:
        h = self.live.pop(i % len(self.live))
        del h.obj
        self.release(h.top)

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6))
    def drop_on_another_thread(self, i: int) -> None:
        # A user-made arena may be reclaimed from any thread holding the GIL.
        vs = self.value_handles()
        h = vs[i % len(vs)]
        self.live.remove(h)
        box = [h.obj]
        del h.obj
        t = threading.Thread(target=box.clear)
        t.start()
        t.join()
        self.release(h.top)

    @rule()
    def checkpoint(self) -> None:
        self.checkpoints.append((bt.checkpoint(self.arena), self.n))

    @precondition(lambda self: self.checkpoints)
    @rule(i=st.integers(0, 10**6))
    def drop_checkpoint(self, i: int) -> None:
        _, pos = self.checkpoints.pop(i % len(self.checkpoints))
        if pos > 0:
            self.release(pos - 1)

    @precondition(lambda self: self.checkpoints)
    @rule(i=st.integers(0, 10**6))
    def rewind(self, i: int) -> None:
        cp, pos = self.checkpoints[i % len(self.checkpoints)]
        if pos > self.n:  # only a rewind below the checkpoint discards it; pins keep it otherwise
            raise AssertionError("a live checkpoint was reclaimed")
        bt.rewind(cp)
        self.n = pos
        for h in [h for h in self.live if h.top >= pos]:
            self.live.remove(h)
            if h.kind != "numpy":  # a numpy view is not checked for staleness (documented)
                self.stale.append(h)
        self.checkpoints = [(c, p) for c, p in self.checkpoints if p <= pos]

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6), length=st.sampled_from([3, 70, 150]))
    def graph(self, i: int, length: int) -> None:
        # a chain of `length` nodes over a live Value; only its root stays bound (long chains
        # leave holes worth compacting when their root goes)
        vs = self.value_handles()
        a = vs[i % len(vs)]
        x = a.obj
        for _ in range(length):
            x = x + 1.0  # type: ignore[operator]
        self.live.append(Handle("value", x, self.n + length - 1, [a.expect[0] + length]))
        self.n += length

    def sweep_from(self, i: int, run: object) -> None:
        vs = self.value_handles()
        h = vs[i % len(vs)]
        before = self.arena.stats()["compactions"]
        run(h.obj)  # type: ignore[operator]
        if self.arena.stats()["compactions"] == before:
            assert self.arena.num_nodes == self.n
            return
        shift = self.n - self.arena.num_nodes
        assert shift > 0
        moved = [g for g in self.value_handles() if g.obj.index != g.top]  # type: ignore[attr-defined]
        assert moved and all(g.top - g.obj.index == shift for g in moved)  # type: ignore[attr-defined]
        g1 = min(g.top for g in moved)
        assert all(g.top < g1 - shift for g in self.live if g not in moved), "a pinned node was in the hole"
        assert all(pos <= g1 - shift for _, pos in self.checkpoints)
        for g in moved:
            g.top -= shift
        self.n -= shift

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6), length=st.sampled_from([70, 150]), steps=st.integers(1, 3))
    def loop_steps(self, i: int, length: int, steps: int) -> None:
        # the loop of micrograd's demo: the next graph is built while the previous loss is bound,
        # the loss is rebound (the previous graph becomes a hole), then backward
        vs = [h for h in self.value_handles() if h.kind == "value"] or self.value_handles()
        base = vs[i % len(vs)]  # the parameter each step's graph reads (kept across the steps)
        if base.kind == "loss":
            steps = 1
        for _ in range(steps):
            prev = [h for h in self.live if h.kind == "loss"]
            self.graph(self.value_handles().index(base), length)
            new = self.live[-1]
            new.kind = "loss"
            for h in prev:
                self.live.remove(h)
                del h.obj
                self.release(h.top)
            self.sweep_from(0, lambda v: new.obj.backward())  # type: ignore[attr-defined]

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6))
    def sweep(self, i: int) -> None:
        self.sweep_from(i, lambda v: v.backward())

    @precondition(lambda self: self.value_handles())
    @rule(i=st.integers(0, 10**6))
    def sweep_on_another_thread(self, i: int) -> None:
        # a user-made arena may compact on any thread holding the GIL
        def run(v: bt.Value) -> None:
            t = threading.Thread(target=v.backward)
            t.start()
            t.join()

        self.sweep_from(i, run)

    @rule()
    def refill(self) -> None:
        # new nodes over reclaimed (or rewound) slots: old handles must not see them
        with self.arena:
            vs = [bt.Value(-7.0) for _ in range(3)]
        self.live.extend(Handle("value", v, self.n + k, [-7.0]) for k, v in enumerate(vs))
        self.n += 3

    # ---------------------------------------------------------------- checks
    @invariant()
    def size_matches(self) -> None:
        assert self.arena.num_nodes == self.n

    @invariant()
    def live_handles_read_their_values(self) -> None:
        for h in self.live:
            if h.kind in ("value", "loss"):
                assert h.obj.alive and h.obj.data == h.expect[0]  # type: ignore[attr-defined]
            elif h.kind == "vector":
                assert h.obj.data == h.expect  # type: ignore[attr-defined]
            else:
                assert list(h.obj) == h.expect  # type: ignore[call-overload]

    @invariant()
    def stale_handles_refuse(self) -> None:
        for h in self.stale[-5:]:
            with pytest.raises(bt.StaleValueError):
                h.obj.data  # type: ignore[attr-defined]  # noqa: B018

    @invariant()
    def stats_name_the_highest_pin(self) -> None:
        s = self.arena.stats()
        assert s["pinned_top"] == self.pinned_top()


TestReclaim = Reclaim.TestCase
TestReclaim.settings = settings(max_examples=60, stateful_step_count=50, deadline=None)


def test_a_dropped_graph_gives_its_nodes_back():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(0.5)
        base = arena.num_nodes
        for _ in range(50):
            loss = (w * 3.0 + 1.0) ** 2
            loss.backward()
            assert w.grad == pytest.approx(2 * (0.5 * 3 + 1) * 3)
            w.grad = 0.0
            del loss
            assert arena.num_nodes == base
    assert arena.stats()["reclaims"] == 50


def test_a_kept_loss_keeps_its_graph_and_stats_name_it():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(0.5)
        kept = []
        for _ in range(3):
            loss = w * w + 1.0
            kept.append(loss)
        del loss
    s = arena.stats()
    assert s["pinned_top"] == kept[-1].index and s["nodes"] == kept[-1].index + 1
    kept.clear()
    assert arena.num_nodes == 1


def test_a_numpy_view_pins_what_it_shows():
    arena = bt.Arena(bt.float64)
    with arena:
        v = bt.Value(2.0) * 3.0
    arr = numpy_view(v)
    del v
    assert arena.num_nodes == 2 and arr[0] == 6.0
    del arr
    assert arena.num_nodes == 0


def test_another_threads_release_does_not_reclaim_a_private_arena():
    out: dict[str, object] = {}

    def work() -> None:
        v = bt.Value(1.0) * 2.0
        out["arena"], out["n"] = v.arena, v.arena.num_nodes
        out["v"] = v

    t = threading.Thread(target=work)
    t.start()
    t.join()
    arena = out["arena"]
    n = out["n"]
    del out["v"]  # released here, not on the arena's thread: the nodes stay
    assert arena.num_nodes == n  # type: ignore[attr-defined]


def test_reclaimed_slots_are_reused_and_old_vectors_never_read_them():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        x = w * 2.0
        vec = bt.vector([w, x])
        del x
        assert vec.data == [1.0, 2.0]
        del vec
        assert arena.num_nodes == 1
        y = w * 5.0
        assert y.index == 1 and np.isclose(y.data, 5.0)


# ---------------------------------------------------------------- compaction of holes (issue 43)
def chain(x: bt.Value, n: int, c: float = 1.0) -> bt.Value:
    for _ in range(n):
        x = x + c
    return x


def test_a_loop_that_rebinds_its_loss_stays_bounded_and_matches_explicit_rewinds():
    # micrograd's demo loop, with a small MLP of burtorch Values: the previous loss is bound while
    # the next graph is built; the arena must stay at one step's graph above the parameters, and
    # the losses and parameters must equal, bit for bit, those of the loop that rewinds by hand.
    import random

    def run(rewind: bool) -> tuple[list[float], list[float], list[int]]:
        arena = bt.Arena(bt.float64)
        rng = random.Random(3)
        with arena:
            w1 = [[bt.Value(rng.uniform(-1, 1)) for _ in range(2)] for _ in range(8)]
            w2 = [bt.Value(rng.uniform(-1, 1)) for _ in range(8)]
            params = [p for row in w1 for p in row] + w2
            data = [([rng.uniform(-1, 1), rng.uniform(-1, 1)], rng.choice([-1.0, 1.0])) for _ in range(16)]
            cp = bt.checkpoint(arena)
            losses, sizes = [], []
            for k in range(12):
                out = []
                for x, y in data:
                    xs = [bt.Value(v) for v in x]
                    h = [sum((wi * xi for wi, xi in zip(row, xs)), bt.Value(0.0)).tanh() for row in w1]
                    s = sum((a * b for a, b in zip(w2, h)), bt.Value(0.0))
                    out.append((1 + -y * s).relu())
                loss = sum(out) * (1.0 / len(out))
                del out, h, s, xs
                for p in params:
                    p.grad = 0.0
                loss.backward()
                for p in params:
                    p.data -= (0.5 - 0.02 * k) * p.grad
                losses.append(loss.data)
                sizes.append(arena.num_nodes)
                if rewind:
                    bt.rewind(cp)
            if not rewind:
                assert arena.stats()["compactions"] >= 10
            return losses, [p.data for p in params], sizes

    own, params_own, sizes = run(rewind=False)
    ref, params_ref, _ = run(rewind=True)
    assert own == ref and params_own == params_ref
    # from the third step on, the arena holds the parameters and one step's graph, every step
    assert sizes[2] < 2 * (sizes[2] - 24) and len(set(sizes[2:])) == 1


def test_moved_handles_follow_their_nodes_even_when_moved_twice_untouched():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(2.0)
        p = chain(w, 300)
        a = chain(w, 400)
        c = chain(w * 5.0, 100)
        h = c - 7.0
        h.label = "inner"
        h_index = h.index
        c = h * 1.0
        del a  # a hole of 400 nodes right below c's graph
        c.backward()
        assert arena.stats()["compactions"] == 1
        del p  # now a hole of 300 nodes right below it
        c.backward()
        s = arena.stats()
        assert s["compactions"] == 2 and s["relocations_pending"] == 2  # h, moved twice, was not touched
        assert h.alive and h.data == 2.0 * 5.0 + 100 - 7.0 and h.label == "inner"
        assert h.index == h_index - 400 - 300 and h.op == "add_const" and h.grad == 1.0  # as without moves
        assert arena.stats()["relocations_pending"] == 0
        assert c.data == h.data and w.grad == 10.0  # swept twice from c
        assert arena.num_nodes == c.index + 1 and arena.value(h.index).data == h.data


def test_a_stale_handle_stays_stale_when_its_old_slot_is_moved_over():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        cp = bt.checkpoint(arena)
        old = chain(w, 300)  # old's slot will be inside what moves
        bt.rewind(cp)
        del cp
        a = chain(w, 200)
        b = chain(w * 2.0, 200)
        del a
        b.backward()
    assert arena.stats()["compactions"] == 1
    assert not old.alive
    with pytest.raises(bt.StaleValueError):
        old.data  # noqa: B018
    assert b.data == 202.0


@pytest.mark.parametrize("holder", ["numpy", "vector", "checkpoint"])
def test_views_and_checkpoints_above_a_hole_block_compaction(holder: str):
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        a = chain(w, 300)
        b = chain(w * 2.0, 200, 0.5)
        keep: object = {"numpy": lambda: numpy_view(b), "vector": lambda: bt.vector([b]),
                        "checkpoint": lambda: bt.checkpoint(arena)}[holder]()
        n = arena.num_nodes
        del a
        b.backward()
        s = arena.stats()
        assert s["compactions"] == 0 and arena.num_nodes == n
        assert "above the hole" in s["compaction_refused"]
        if holder == "numpy":
            assert keep[0] == 102.0  # type: ignore[index]
        elif holder == "vector":
            assert keep.data == [102.0]  # type: ignore[attr-defined]
        del keep
        b.backward()  # once the view or checkpoint is gone, the next sweep compacts
        assert arena.stats()["compactions"] == 1 and b.data == 102.0 and arena.num_nodes == b.index + 1


def test_a_graph_computed_from_the_previous_one_is_not_moved():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        mid = chain(w, 200)
        a = chain(mid, 200)
        b = chain(mid * 2.0, 200)  # reads a node of a's graph: no hole below b's graph
        del mid
        n = arena.num_nodes
        del a
        b.backward()
    assert arena.stats()["compactions"] == 0 and arena.num_nodes == n
    assert b.data == 2 * 201.0 + 200 and w.grad == 2.0


def test_a_leaf_the_next_graph_reads_stays_below_the_hole():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        k = bt.Value(3.0)
        a = chain(w, 300)
        b = chain(w * k, 200)
        k_index = k.index
        del k  # unpinned, but b reads it
        del a
        b.backward()
        s = arena.stats()
        assert s["compactions"] == 1 and arena.num_nodes == 2 + 201 and b.data == 203.0
        assert arena.value(k_index).data == 3.0 and w.grad == 3.0


def test_a_hole_reaching_below_the_next_graphs_inputs_is_refused_where_they_are_read():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        a = chain(w, 300)
        xs = [bt.Value(float(i)) for i in range(3)]
        b = chain(w * xs[0] + xs[1] * xs[2], 200)
        del xs, a
        b.backward()
        assert arena.stats()["compactions"] == 1 and b.data == 202.0 and w.grad == 0.0
        assert arena.num_nodes == 1 + 3 + 3 + 200


def test_another_threads_sweep_does_not_compact_a_private_arena():
    out: dict[str, object] = {}

    def work() -> None:
        w = bt.Value(1.0)
        a = chain(w, 300)
        b = chain(w * 2.0, 100)
        del a
        out["b"], out["w"] = b, w

    t = threading.Thread(target=work)
    t.start()
    t.join()
    b = out["b"]
    n = b.arena.num_nodes  # type: ignore[attr-defined]
    b.backward()  # type: ignore[attr-defined]
    assert b.arena.num_nodes == n and b.arena.stats()["compactions"] == 0  # type: ignore[attr-defined]
    assert out["w"].grad == 2.0  # type: ignore[attr-defined]


def test_stats_say_what_holds_the_highest_node():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        y = (w * 2.0).tanh()
        y.label = "kept"
        view = bt.vector([y])
    by = arena.stats()["pinned_by"]
    assert by == {"node": y.index, "op": "tanh", "label": "kept", "holders": {"Value": 1, "Vector": 1}}
    del y, view
    assert arena.stats()["pinned_by"]["holders"] == {"Value": 1} and arena.num_nodes == 1


def test_the_growth_warning_names_the_handle_that_keeps_memory_growing():
    arena = bt.Arena(bt.float32)
    x = np.ones(1 << 16, dtype=np.float32)
    kept = []
    with arena, pytest.warns(RuntimeWarning, match=r"highest live node is node \d+ \(sum_range\) held by 1 Value"):
        for _ in range(17):
            loss = (bt.vector(x) * 2.0).sum()
            loss.backward()
            kept.append(loss)  # the classic: old losses kept for plotting pin every graph


def test_no_growth_warning_where_compaction_keeps_memory_flat():
    import warnings

    arena = bt.Arena(bt.float32)
    x = np.ones(1 << 16, dtype=np.float32)
    with arena, warnings.catch_warnings():
        warnings.simplefilter("error")
        loss = None
        for _ in range(17):
            loss = (bt.vector(x) * 2.0).sum()
            loss.backward()
        assert arena.num_nodes <= 2 * ((1 << 17) + 1)


def test_moved_handles_never_used_again_bound_the_relocation_log():
    arena = bt.Arena(bt.float64)
    with arena:
        w = bt.Value(1.0)
        kept, loss = [], None
        for k in range(45):
            x = chain(w, 100)
            kept.append(x)  # moved with its step's graph, then never used: its move stays logged
            loss = chain(x, 100, float(k))
            loss.backward()
        s = arena.stats()
        assert s["relocations_pending"] == 32 and s["compaction_refused"].startswith("too many moved handles")
        assert [h.data for h in kept] == [101.0] * 45  # using them retargets them
        assert arena.stats()["relocations_pending"] == 0
        before = arena.stats()["compactions"]
        loss = chain(w, 150)  # the previous loss's 100 nodes are a hole below it: worth closing again
        loss.backward()
        assert arena.stats()["compactions"] == before + 1
