"""Automatic reclamation of the arena's top, against a pure-Python reference (issue 43).

The reference knows the arena as a stack of nodes and, for every live handle (a Value, a Vector,
a numpy view, a checkpoint), the highest node it pins. Its rule: when the last pin of the top node
goes, the arena shrinks to one past the highest pinned node; a rewind drops everything from the
checkpoint up (handles there go stale); a handle released on another thread than the one owning a
thread's default arena unpins without reclaiming. Every step compares the arena's size, each live
handle's value (Values, Vectors and numpy views read what they were created with: a reclaimed slot
is never read through an old handle) and each stale handle's refusal.
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
        return [h for h in self.live if h.kind == "value"]

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
            if h.kind == "value":
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
TestReclaim.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


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
