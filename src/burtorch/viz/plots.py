"""Plots with matplotlib (optional), and generators of standalone Matplotlib scripts.

``loss_curve`` and ``heatmap`` draw straight to a file with matplotlib's object API (no pyplot, so
no GUI backend and no global figure state) and return the Figure. ``function_plot_script`` and
``heatmap_script`` return the text of a self-contained Python script, with the data written into
it, for running in another interpreter (the paper's F.6 workflow): the script needs only
matplotlib, saves its picture to the path given on its command line (or the default it names),
and does not import burtorch.
"""
from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..io.atomic import write_atomic

if TYPE_CHECKING:
    from _typeshed import StrPath
    from matplotlib.figure import Figure

# Numbers or Values (anything float() takes).
Numbers = Iterable[Any]

INSTALL_HINT = "matplotlib is not installed: pip install matplotlib (or pip install 'burtorch[plot]')"


def _matplotlib_figure() -> type[Figure]:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return Figure


def save_figure(fig: Figure, path: StrPath, **savefig_args: Any) -> None:
    """Saves a matplotlib Figure to ``path`` through the atomic writer (the format from the
    extension, PNG without one), so a crash never leaves half a picture."""
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, **savefig_args)
    write_atomic(path, (buf.getbuffer(),), durable=False)


def _floats(values: Numbers, what: str) -> list[float]:
    try:
        out = [float(v) for v in values]
    except TypeError:
        raise TypeError(f"{what} must be a sequence of numbers or Values") from None
    if not out:
        raise ValueError(f"{what} is empty")
    return out


def _matrix(matrix: Any) -> list[list[float]]:
    """Rows of floats from nested sequences, a numpy array or anything with ``tolist()``."""
    if hasattr(matrix, "tolist") and not isinstance(matrix, (list, tuple)):
        matrix = matrix.tolist()
    try:
        rows = [_floats(row, "a matrix row") for row in matrix]
    except TypeError:
        raise TypeError("matrix must be a 2-D sequence of numbers or Values (rows of columns)") from None
    if not rows:
        raise ValueError("matrix is empty")
    if any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("matrix rows have different lengths")
    return rows


def loss_curve(values: Numbers, path: StrPath, title: str = "loss", xlabel: str = "step", ylabel: str = "loss",
               log_y: bool = False, smooth: int = 0) -> Figure:
    """Plots ``values`` (numbers or Values, one per step) to ``path``; returns the Figure.

    ``smooth`` > 1 adds a moving average over that many steps beside the raw curve.
    """
    ys = _floats(values, "values")
    Figure = _matplotlib_figure()
    fig = Figure(figsize=(6, 4), layout="tight")
    ax = fig.add_subplot()
    ax.plot(range(len(ys)), ys, linewidth=1, alpha=0.5 if smooth > 1 else 1.0, label="loss")
    if smooth > 1 and len(ys) >= smooth:
        window_sum = sum(ys[:smooth])
        avg = [window_sum / smooth]
        for i in range(smooth, len(ys)):
            window_sum += ys[i] - ys[i - smooth]
            avg.append(window_sum / smooth)
        ax.plot(range(smooth - 1, len(ys)), avg, linewidth=2, label=f"mean of {smooth}")
        ax.legend()
    if log_y:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    save_figure(fig, path)
    return fig


def heatmap(matrix: Any, path: StrPath, annotate: bool = False, fmt: str = ".2f", title: str = "",
            cmap: str = "viridis", xlabels: Sequence[str] | None = None,
            ylabels: Sequence[str] | None = None) -> Figure:
    """Draws a matrix (for example a weight matrix or attention weights) to ``path``.

    ``annotate`` writes each cell's number (formatted with ``fmt``) into the cell. Returns the Figure.
    """
    rows = _matrix(matrix)
    format(0.0, fmt)  # a bad format spec fails here, before drawing
    Figure = _matplotlib_figure()
    n_rows, n_cols = len(rows), len(rows[0])
    fig = Figure(figsize=(max(3, 0.5 * n_cols + 2), max(3, 0.5 * n_rows + 1.5)), layout="tight")
    ax = fig.add_subplot()
    image = ax.imshow(rows, cmap=cmap, aspect="auto")
    fig.colorbar(image, ax=ax)
    if annotate:
        finite = [x for row in rows for x in row if math.isfinite(x)]
        middle = (min(finite) + max(finite)) / 2 if finite else 0.0
        for i, row in enumerate(rows):
            for j, x in enumerate(row):
                ax.text(j, i, format(x, fmt), ha="center", va="center", fontsize=8,
                        color="black" if x > middle else "white")
    if xlabels is not None:
        ax.set_xticks(range(n_cols), [str(s) for s in xlabels])
    if ylabels is not None:
        ax.set_yticks(range(n_rows), [str(s) for s in ylabels])
    ax.set_title(title)
    save_figure(fig, path)
    return fig


# ---- standalone scripts -----------------------------------------------------------------------

def _literal(x: float) -> str:
    return repr(x) if math.isfinite(x) else f"float({str(x)!r})"


def _list_literal(xs: Iterable[float]) -> str:
    return "[" + ", ".join(_literal(x) for x in xs) + "]"


def _sample(fn: Callable[[Any], Any], lo: float, hi: float, points: int,
            with_grad: bool) -> tuple[list[float], list[float], list[float] | None]:
    """Samples ``fn`` (float -> number or Value) on a grid; with_grad also returns d fn / d x."""
    xs = [lo + (hi - lo) * i / (points - 1) for i in range(points)]
    if not with_grad:
        return xs, [float(fn(x)) for x in xs], None
    from .. import _core as bt  # the engine itself: this module may not import the package facade

    arena = bt.Arena(bt.float64)  # private, so the caller's arenas are not touched
    ys, grads = [], []
    with arena:
        for x in xs:
            cp = arena.checkpoint()
            leaf = bt.Value(x)
            y = fn(leaf)
            if not isinstance(y, bt.Value):
                raise TypeError("with_grad=True needs a function that builds a burtorch Value from its argument")
            y.backward()
            ys.append(y.data)
            grads.append(leaf.grad)
            arena.rewind(cp)
    return xs, ys, grads


def function_plot_script(fn: str | Callable[[Any], Any], x_range: tuple[float, float] = (-5.0, 5.0),
                         points: int = 200, title: str = "",
                         output: str = "function.png", with_grad: bool = False) -> str:
    """A standalone Matplotlib script plotting a function of one variable over ``x_range``.

    ``fn`` is either a Python expression in ``x`` as a string (evaluated by the script, with
    ``math``'s names available, e.g. ``"sin(x) * exp(-x / 4)"``) or a callable, which is sampled
    here at ``points`` points and written into the script as data. With ``with_grad=True`` the
    callable is run on burtorch Values and the script also plots its derivative from backward().
    """
    lo, hi = (float(v) for v in x_range)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"x_range must be two finite numbers lo < hi, got {x_range!r}")
    if not isinstance(points, int) or points < 2:
        raise ValueError(f"points must be an int >= 2, got {points!r}")
    lines = ["# Generated by burtorch.viz.plots.function_plot_script; needs only matplotlib.",
             "import sys", "", "import matplotlib", "", 'matplotlib.use("Agg")',
             "import matplotlib.pyplot as plt", ""]
    if isinstance(fn, str):
        if with_grad:
            raise ValueError("with_grad=True needs a callable; an expression string is evaluated by the script")
        compile(fn, "<expression>", "eval")  # a syntax error surfaces here, not in the script
        name = fn
        lines += ["from math import *  # the expression may use math's functions", "",
                  f"LO, HI, POINTS = {lo!r}, {hi!r}, {points}",
                  "xs = [LO + (HI - LO) * i / (POINTS - 1) for i in range(POINTS)]",
                  f"ys = [({fn}) for x in xs]", "grads = None"]
    elif callable(fn):
        xs, ys, grads = _sample(fn, lo, hi, points, with_grad)
        name = getattr(fn, "__name__", "f")
        lines += [f"xs = {_list_literal(xs)}", f"ys = {_list_literal(ys)}",
                  f"grads = {_list_literal(grads) if grads is not None else None}"]
    else:
        raise TypeError(f"fn must be an expression string or a callable, got {type(fn).__name__}")
    lines += ["", "fig, ax = plt.subplots(figsize=(6, 4))",
              f"ax.plot(xs, ys, label={('f(x) = ' + name)!r})",
              "if grads is not None:",
              "    ax.plot(xs, grads, linestyle='--', label=\"f'(x) (burtorch backward)\")",
              "ax.axhline(0, color='gray', linewidth=0.5)",
              f"ax.set(title={title!r}, xlabel='x')", "ax.grid(True, alpha=0.3)", "ax.legend()",
              "fig.tight_layout()",
              f"out = sys.argv[1] if len(sys.argv) > 1 else {output!r}",
              "fig.savefig(out)", "print(out)", ""]
    return "\n".join(lines)


def heatmap_script(matrix: Any, annotate: bool = True, fmt: str = ".2f", title: str = "", cmap: str = "viridis",
                   output: str = "heatmap.png", xlabels: Sequence[str] | None = None,
                   ylabels: Sequence[str] | None = None) -> str:
    """A standalone Matplotlib script drawing ``matrix`` as a heatmap, cells annotated if asked."""
    rows = _matrix(matrix)
    format(0.0, fmt)
    n_rows, n_cols = len(rows), len(rows[0])
    lines = ["# Generated by burtorch.viz.plots.heatmap_script; needs only matplotlib.",
             "import math", "import sys", "", "import matplotlib", "", 'matplotlib.use("Agg")',
             "import matplotlib.pyplot as plt", "",
             "matrix = ["] + [f"    {_list_literal(r)}," for r in rows] + ["]",
             f"fig, ax = plt.subplots(figsize=({max(3, 0.5 * n_cols + 2)!r}, {max(3, 0.5 * n_rows + 1.5)!r}))",
             f"image = ax.imshow(matrix, cmap={cmap!r}, aspect='auto')",
             "fig.colorbar(image, ax=ax)"]
    if annotate:
        lines += ["finite = [x for row in matrix for x in row if math.isfinite(x)]",
                  "middle = (min(finite) + max(finite)) / 2 if finite else 0.0",
                  "for i, row in enumerate(matrix):",
                  "    for j, x in enumerate(row):",
                  f"        ax.text(j, i, format(x, {fmt!r}), ha='center', va='center', fontsize=8,",
                  "                color='black' if x > middle else 'white')"]
    if xlabels is not None:
        lines.append(f"ax.set_xticks(range({n_cols}), {[str(s) for s in xlabels]!r})")
    if ylabels is not None:
        lines.append(f"ax.set_yticks(range({n_rows}), {[str(s) for s in ylabels]!r})")
    lines += [f"ax.set_title({title!r})", "fig.tight_layout()",
              f"out = sys.argv[1] if len(sys.argv) > 1 else {output!r}",
              "fig.savefig(out)", "print(out)", ""]
    return "\n".join(lines)
