"""burtorch.viz: DOT text of graphs (golden Figure 1), range records, size guard, rendering."""
import pathlib
import shutil
import subprocess
import sys

import pytest

import burtorch as bt
from burtorch import viz
from burtorch.viz import rendering as render_module

GOLDEN = pathlib.Path(__file__).parent / "golden" / "figure1_w1.dot"
HAVE_DOT = shutil.which("dot") is not None


def figure1_graph(arena):
    """W1 (the paper's Figure 1) with every named node labelled, after backward."""
    with bt.labels(True), arena:
        a = bt.Value(-41.0, label="a")
        b = bt.Value(2.0, label="b")
        c = a + b
        c.label = "c"
        d = a * b + b**3
        d.label = "d"
        e = c - d
        e.label = "e"
        f = e**2
        f.label = "f"
        g = f * 0.5
        g.label = "g"
    g.backward()
    return a, b, g


def dot_parses(text):
    done = subprocess.run(["dot", "-Tcanon"], input=text.encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def test_figure1_golden_text():
    a, b, g = figure1_graph(bt.Arena(bt.float64))
    assert (g.data, a.grad, b.grad) == (612.5, -35.0, 1050.0)
    assert viz.to_dot(g) == GOLDEN.read_text()


@pytest.mark.skipif(not HAVE_DOT, reason="Graphviz 'dot' is not installed")
def test_figure1_parses_with_dot():
    _, _, g = figure1_graph(bt.Arena(bt.float64))
    canon = dot_parses(viz.to_dot(g))
    assert "mul_const 0.5" in canon and "612.5" in canon


def test_unlabelled_nodes_show_indices_only():
    arena = bt.Arena(bt.float64)
    with arena:
        a = bt.Value(3.0)
        y = (a * a).relu()
    text = viz.to_dot(y, show_grad=False)
    assert "grad" not in text
    assert 'v0 [shape=record, label="{ #0 | data 3 }"]' in text
    assert 'op1 [shape=ellipse, label="relu"]' in text


def test_labels_given_show_with_labels_off():
    arena = bt.Arena(bt.float64)
    with bt.labels(False), arena:
        a = bt.Value(3.0, label="kept")
        y = (a * a).relu()
    text = viz.to_dot(y, show_grad=False)
    assert 'v0 [shape=record, label="{ #0 kept | data 3 }"]' in text


def test_range_records_are_one_box_with_spans():
    arena = bt.Arena(bt.float64)
    with arena:
        xs = [bt.Value(float(i)) for i in range(6)]
        k = bt.Value(10.0)  # a leaf after the spans, drawn on its own
        dot = bt.inner_product(xs[:3], xs[3:])
        mean, meansq = bt.reduce_mean_and_mean_squares(xs + [dot])
        out = mean * meansq + k
    text = viz.to_dot(out)
    assert text.count("shape=box,") == 2  # inner_product and mean_and_mean_squares, one box each
    assert 'l0_6 [shape=box3d, label="leaves #[0, 6)"]' in text
    assert "mean_and_mean_squares\\nout #[8, 10)\\narg #[0, 6)\\narg #7" in text
    assert "l0_6 -> r1 [label=\"#[0, 6)\"]" in text
    assert 'r1 -> op2 [label="#[8, 10)"]' in text  # one edge for both outputs of the box
    assert "v6 [shape=record" in text  # the lone leaf k
    for i in range(6):
        assert f"v{i} " not in text  # the span's leaves are not drawn one by one
    if HAVE_DOT:
        dot_parses(text)


def test_leaf_runs_between_records_are_split_correctly():
    arena = bt.Arena(bt.float64)
    with arena:
        a = bt.Value(1.0)
        b = bt.Value(2.0)
        c = a + b              # slot 2, record 0
        d = bt.Value(4.0)      # slots 3..5 leaves
        e = bt.Value(5.0)
        f = bt.Value(6.0)
        big = bt.reduce_sum([a, b, c, d, e, f])  # args span [0, 6) mixes leaves and a record
    text = viz.to_dot(big)
    assert "l0_2 " in text and "l3_6 " in text
    assert "v2 [shape=record" in text and "op0 [" in text
    assert 'v2 -> r1 [label=""]' not in text and "v2 -> r1;" in text
    assert all(v.alive for v in (d, e, f))


def test_size_guard_and_bigger_limit():
    arena = bt.Arena(bt.float64)
    with arena:
        x = bt.Value(1.0)
        for _ in range(3000):
            x = x * 1.0001 + 0.5
    with pytest.raises(viz.GraphTooLargeError, match="max_nodes"):
        viz.to_dot(x)
    text = viz.to_dot(x, max_nodes=20000)  # 12,001 nodes, iterative walk: no recursion limit
    assert text.count("shape=ellipse") == 6000


def test_roots_forms_and_bad_arguments():
    arena = bt.Arena(bt.float64)
    with arena:
        a = bt.Value(1.0)
        b = a + 1
        c = a * 2

    class View:
        pass

    view = View()
    view.arena, view.spans = arena, [(1, 2)]
    both = viz.to_dot([b, c])
    assert "v1 [" in both and "v2 [" in both and both.count("penwidth=2") == 2
    assert viz.to_dot(view).count("penwidth=2") == 2  # the span's two roots
    with pytest.raises(TypeError):
        viz.to_dot(3.0)
    with pytest.raises(ValueError):
        viz.to_dot(b, rankdir="XY")
    with pytest.raises(ValueError):
        viz.to_dot(b, max_nodes=0)
    other = bt.Value(1.0, arena=bt.Arena(bt.float64))
    with pytest.raises(ValueError, match="different arenas"):
        viz.to_dot([b, other])


def test_special_characters_in_labels_are_escaped():
    arena = bt.Arena(bt.float64)
    nasty = 'w{0}|<x> "q" \\ end'
    with bt.labels(True), arena:
        a = bt.Value(1.0, label=nasty)
        y = a + 1
    text = viz.to_dot(y)
    assert '#0 w\\{0\\}\\|\\<x\\> \\"q\\" \\\\ end' in text
    if HAVE_DOT:
        dot_parses(text)


def test_render_writes_dot_without_graphviz(tmp_path, monkeypatch):
    _, _, g = figure1_graph(bt.Arena(bt.float64))
    monkeypatch.setattr(render_module.shutil, "which", lambda name: None)
    path = viz.render(g, tmp_path / "g.dot")
    assert pathlib.Path(path).read_text() == GOLDEN.read_text()
    with pytest.raises(viz.GraphvizMissingError, match="apt-get install graphviz"):
        viz.render(g, tmp_path / "g.svg")
    with pytest.raises(ValueError, match="extension"):
        viz.render(g, tmp_path / "noext")


@pytest.mark.skipif(not HAVE_DOT, reason="Graphviz 'dot' is not installed")
def test_render_svg_and_png_with_the_dot_binary(tmp_path, monkeypatch):
    _, _, g = figure1_graph(bt.Arena(bt.float64))
    monkeypatch.setitem(sys.modules, "graphviz", None)  # force the subprocess path
    svg = pathlib.Path(viz.render(g, tmp_path / "g.svg")).read_text()
    assert "<svg" in svg and "612.5" in svg
    png = pathlib.Path(viz.render(g, tmp_path / "g.png")).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_render_with_the_graphviz_package(tmp_path):
    pytest.importorskip("graphviz")
    if not HAVE_DOT:
        pytest.skip("Graphviz 'dot' is not installed")
    _, _, g = figure1_graph(bt.Arena(bt.float64))
    svg = pathlib.Path(viz.render(g, tmp_path / "g.svg")).read_text()
    assert "<svg" in svg and "mul_const 0.5" in svg


def test_linear_softmax_graph_of_vectors():
    arena = bt.Arena(bt.float64)
    with arena:
        W = bt.leaves([0.1 * i for i in range(12)], shape=(3, 4))
        x = bt.leaves([1.0, 2.0, 3.0, 4.0])
        b = bt.leaves([0.0, 0.5, 1.0])
        logits = bt.linear(x, W, b)
        loss = bt.cross_entropy(logits, 1)
    loss.backward()
    text = viz.to_dot(loss)
    assert text.count('label="linear\\nout #[19, 22)') == 1
    assert 'l0_12 [shape=box3d, label="leaves #[0, 12)"]' in text
    assert 'r0 -> op1 [label="#[19, 22)"]' in text  # cross_entropy reads the three logits at once
    assert "shape=box3d" in text and text.count("shape=record") == 1  # only the loss is a value node
    if HAVE_DOT:
        dot_parses(text)


def test_stale_roots_are_refused():
    arena = bt.Arena(bt.float64)
    with arena:
        a = bt.Value(1.0)
        cp = arena.checkpoint()
        gone = a * 2
        vec = bt.leaves([1.0, 2.0])
        arena.rewind(cp)
        bt.Value(5.0)
    with pytest.raises(bt.StaleValueError):
        viz.to_dot(gone)
    with pytest.raises(bt.StaleValueError):
        viz.to_dot([a, gone])
    with pytest.raises(bt.StaleValueError):
        viz.to_dot(vec)
    assert "v0 [" in viz.to_dot(a)
