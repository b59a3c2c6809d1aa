"""burtorch.viz.plots: matplotlib plots (when installed) and standalone script generators."""
import math
import os
import subprocess
import sys

import pytest

import burtorch as bt
from burtorch.viz import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_script(text, tmp_path, name):
    """Runs a generated script in a fresh interpreter with the Agg backend; returns the PNG bytes."""
    pytest.importorskip("matplotlib")
    script = tmp_path / f"{name}.py"
    script.write_text(text)
    out = tmp_path / f"{name}.png"
    env = dict(os.environ, MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    return out.read_bytes()


def test_function_script_from_expression_compiles_and_runs(tmp_path):
    text = plots.function_plot_script("sin(x) * exp(-x / 4)", x_range=(0, 10), points=50, title="damped")
    compile(text, "function_plot.py", "exec")
    assert "import burtorch" not in text
    assert run_script(text, tmp_path, "expr").startswith(PNG_MAGIC)


def test_function_script_from_callable_embeds_samples(tmp_path):
    text = plots.function_plot_script(lambda x: x * x, x_range=(-1, 1), points=3)
    compile(text, "function_plot.py", "exec")
    namespace = {}
    data_lines = [line for line in text.splitlines() if line.startswith(("xs =", "ys =", "grads ="))]
    exec("\n".join(data_lines), namespace)
    assert namespace["xs"] == [-1.0, 0.0, 1.0] and namespace["ys"] == [1.0, 0.0, 1.0]
    assert namespace["grads"] is None


def test_function_script_with_burtorch_gradients(tmp_path):
    arena = bt.current_arena(bt.float64)
    nodes_before = arena.num_nodes
    text = plots.function_plot_script(lambda x: (x * x).tanh() * 3, x_range=(-2, 2), points=5,
                                      with_grad=True)
    assert arena.num_nodes == nodes_before  # sampling used a private arena
    namespace = {}
    exec("\n".join(line for line in text.splitlines() if line.startswith(("xs =", "ys =", "grads ="))), namespace)
    for x, y, g in zip(namespace["xs"], namespace["ys"], namespace["grads"]):
        assert y == pytest.approx(3 * math.tanh(x * x), rel=1e-12)
        assert g == pytest.approx(3 * (1 - math.tanh(x * x) ** 2) * 2 * x, rel=1e-12, abs=1e-15)
    assert run_script(text, tmp_path, "grad").startswith(PNG_MAGIC)


def test_function_script_bad_arguments():
    with pytest.raises(SyntaxError):
        plots.function_plot_script("sin(x", x_range=(0, 1))
    with pytest.raises(ValueError):
        plots.function_plot_script("x", x_range=(1, 0))
    with pytest.raises(ValueError):
        plots.function_plot_script("x", points=1)
    with pytest.raises(ValueError, match="callable"):
        plots.function_plot_script("x", with_grad=True)
    with pytest.raises(TypeError):
        plots.function_plot_script(42)
    with pytest.raises(TypeError, match="Value"):
        plots.function_plot_script(lambda x: 1.0, with_grad=True)


def test_heatmap_script_compiles_runs_and_keeps_special_numbers(tmp_path):
    matrix = [[0.1, -2.5, float("nan")], [3.0, float("inf"), 0.0]]
    text = plots.heatmap_script(matrix, annotate=True, fmt=".1f", title="weights",
                                xlabels=["a", "b", "c"], ylabels=["r0", "r1"])
    compile(text, "heatmap.py", "exec")
    assert "float('nan')" in text and "float('inf')" in text and "ax.text(" in text
    assert "ax.text(" not in plots.heatmap_script(matrix, annotate=False)
    assert run_script(text, tmp_path, "heat").startswith(PNG_MAGIC)


def test_heatmap_script_accepts_values_and_numpy():
    np = pytest.importorskip("numpy")
    a = bt.Value(1.5)
    text_values = plots.heatmap_script([[a, 2.0], [3.0, 4.0]])
    text_numpy = plots.heatmap_script(np.array([[1.5, 2.0], [3.0, 4.0]]))
    assert text_values == text_numpy
    with pytest.raises(ValueError, match="lengths"):
        plots.heatmap_script([[1.0], [1.0, 2.0]])
    with pytest.raises(ValueError):
        plots.heatmap_script([])
    with pytest.raises(TypeError):
        plots.heatmap_script([1.0, 2.0])
    with pytest.raises(ValueError):
        plots.heatmap_script([[1.0]], fmt="%q")


def test_loss_curve_writes_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib")
    losses = [bt.Value(3.0 / (1 + i)) for i in range(50)]
    fig = plots.loss_curve(losses, tmp_path / "loss.png", smooth=5, log_y=True)
    assert (tmp_path / "loss.png").read_bytes().startswith(PNG_MAGIC)
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and ax.get_yscale() == "log"
    assert list(ax.lines[0].get_ydata()) == [3.0 / (1 + i) for i in range(50)]
    assert ax.lines[1].get_ydata()[0] == pytest.approx(sum(3.0 / (1 + i) for i in range(5)) / 5)
    plots.loss_curve([1.0, 0.5], tmp_path / "loss.svg")
    assert b"<svg" in (tmp_path / "loss.svg").read_bytes()
    with pytest.raises(ValueError):
        plots.loss_curve([], tmp_path / "empty.png")


def test_heatmap_annotates_cells(tmp_path):
    pytest.importorskip("matplotlib")
    fig = plots.heatmap([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], tmp_path / "h.png", annotate=True, fmt=".1f")
    assert (tmp_path / "h.png").read_bytes().startswith(PNG_MAGIC)
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == ["1.0", "2.0", "3.0", "4.0", "5.0", "6.0"]
    fig = plots.heatmap([[1.0, 2.0]], tmp_path / "h2.png")
    assert len(fig.axes[0].texts) == 0


def test_missing_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        plots.loss_curve([1.0, 2.0], tmp_path / "x.png")
    # the script generators need no matplotlib in this process
    compile(plots.heatmap_script([[1.0]]), "h.py", "exec")
