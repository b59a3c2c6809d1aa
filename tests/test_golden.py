"""The paper's Figure 1 (W1) and Figure 2 (W2, micrograd's README example) graphs."""
import pytest

import burtorch as bt
from burtorch.paper_graphs import w1_graph, w2_graph


def test_w1_values():
    with bt.scope():
        a, b, g = w1_graph(bt.Value)
        g.backward()
        assert (g.data, a.grad, b.grad) == (612.5, -35.0, 1050.0)


def test_w2_values():
    with bt.scope():
        a, b, g = w2_graph(bt.Value)
        g.backward()
        assert g.data == pytest.approx(24.7041, abs=5e-5)
        assert a.grad == pytest.approx(138.8338, abs=5e-5)
        assert b.grad == pytest.approx(645.5773, abs=5e-5)


def test_w2_float32():
    with bt.scope():
        a, b, g = w2_graph(lambda x: bt.Value(x, dtype=bt.float32))
        g.backward()
        assert g.data == pytest.approx(24.7041, rel=1e-5)
        assert a.grad == pytest.approx(138.8338, rel=1e-4)
        assert b.grad == pytest.approx(645.5773, rel=1e-4)


def test_repeated_iterations_with_rewind_reuse_memory():
    arena = bt.current_arena()
    cp = bt.checkpoint()
    start = arena.num_nodes
    nodes = None
    for _ in range(1000):
        a, b, g = w1_graph(bt.Value)
        g.backward()
        assert g.data == 612.5 and a.grad == -35.0
        if nodes is None:
            nodes = arena.num_nodes
        assert arena.num_nodes == nodes
        bt.rewind(cp)
    assert nodes == start + 9 and arena.num_nodes == start  # 9 nodes per iteration, all reused


def test_w2_against_pytorch():
    torch = pytest.importorskip("torch")
    with bt.scope():
        a, b, g = w2_graph(bt.Value)
        g.backward()
        ta, tb, tg = w2_graph(lambda x: torch.tensor(x, dtype=torch.float64, requires_grad=True),
                              relu=torch.relu)
        tg.backward()
        assert g.data == pytest.approx(tg.item(), rel=1e-14)
        assert a.grad == pytest.approx(ta.grad.item(), rel=1e-13)
        assert b.grad == pytest.approx(tb.grad.item(), rel=1e-13)
