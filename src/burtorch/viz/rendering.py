"""Rendering DOT text to an image with Graphviz (the ``graphviz`` package or the ``dot`` binary)."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from ..io.atomic import write_atomic
from ..node_selection import Nodes
from .dot import to_dot

if TYPE_CHECKING:
    from _typeshed import StrPath

INSTALL_HINT = (
    "rendering needs the Graphviz 'dot' program: install it with 'apt-get install graphviz' "
    "(Debian/Ubuntu), 'brew install graphviz' (macOS) or 'conda install graphviz'; optionally "
    "'pip install graphviz' for the Python bindings. to_dot() works without it and returns the text."
)


class GraphvizMissingError(RuntimeError):
    """Graphviz's ``dot`` program is not installed."""


def render(root: Nodes, path: StrPath, engine: str = "dot", timeout: float = 60.0, **to_dot_args: Any) -> str:
    """Draws the graph of ``root`` to ``path``; the format comes from the extension.

    ``.dot``/``.gv`` write the DOT text itself (no Graphviz needed); ``.svg``, ``.png``, ``.pdf``
    and other Graphviz formats are rendered by the ``graphviz`` Python package when installed, else
    by running the ``dot`` binary. The file is written atomically.

    Args:
        root: as :func:`to_dot`.
        path: the image file.
        engine: the Graphviz layout program.
        timeout: seconds the ``dot`` binary may take.
        **to_dot_args: passed to :func:`to_dot`.

    Returns:
        ``path``.

    Raises:
        GraphvizMissingError: an image format was asked for and Graphviz is not installed.
        ValueError: no extension, or Graphviz failed.
    """
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    if not fmt:
        raise ValueError(f"cannot tell the image format of {path!r}: give it an extension such as .svg or .png")
    text = to_dot(root, **to_dot_args)
    if fmt in ("dot", "gv"):
        data = text.encode("utf-8")
    else:
        data = render_text(text, fmt, engine, timeout)
    write_atomic(path, (data,), durable=False)  # a picture can be redrawn: no fsync
    return path


def render_text(text: str, fmt: str, engine: str = "dot", timeout: float = 60.0) -> bytes:
    """Runs Graphviz on DOT ``text`` and returns the image bytes in format ``fmt``."""
    program = shutil.which(engine)
    if program is None:
        raise GraphvizMissingError(f"'{engine}' was not found on PATH: " + INSTALL_HINT)
    try:
        import graphviz
    except ImportError:
        graphviz = None
    if graphviz is not None:
        try:
            return graphviz.Source(text, engine=engine).pipe(format=fmt)
        except graphviz.CalledProcessError as e:
            raise ValueError(f"Graphviz failed to render {fmt}: {e.stderr.decode(errors='replace').strip()}") from None
    done = subprocess.run([program, f"-T{fmt}"], input=text.encode("utf-8"), capture_output=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise ValueError(f"Graphviz failed to render {fmt}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout
