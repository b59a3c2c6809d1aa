"""Text sources: the embedded default corpus and user files.

The default corpus is the standard library's own documentation text (`pydoc_data.topics`), which
every Python installation carries, so training works offline with no download. Its words (lower-
case letters only, 3-12 long, distinct) are the default word list for the name-generation MLP.
"""
from __future__ import annotations

import importlib.util
import re

from ..io.regular_file import read_regular

_TEXT_LIMIT = 2_000_000


def default_text() -> str:
    """The embedded corpus: pydoc's topic texts, joined in a fixed (sorted) order."""
    # Executed into a module object of its own rather than imported: an import would keep its half
    # megabyte of strings in sys.modules for the life of the process, after the text is built.
    spec = importlib.util.find_spec("pydoc_data.topics") if importlib.util.find_spec("pydoc_data") else None
    if spec is None or spec.loader is None:  # some minimal Python builds strip it
        raise RuntimeError("this Python has no pydoc_data; pass --data FILE")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    topics = module.topics
    return "\n".join(topics[k] for k in sorted(topics))


def default_words() -> list[str]:
    words = sorted(set(re.findall(r"\b[a-z]{3,12}\b", default_text())))
    return words


def read_text(path: str, limit: int = 50_000_000) -> str:
    """Reads a UTF-8 text file.

    Args:
        path: a regular file.
        limit: the largest size accepted, in bytes.

    Returns:
        The text.

    Raises:
        FileNotFoundError: no such file.
        NotRegularFileError: a directory, FIFO, device or socket (never read, so never a hang).
        ValueError: empty, larger than ``limit``, binary (NUL bytes) or not UTF-8.
    """
    try:
        raw = read_regular(path, limit)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such data file: {path}") from None
    if not raw:
        raise ValueError(f"{path} is empty")
    if b"\x00" in raw[:65536]:
        raise ValueError(f"{path} looks binary (it has NUL bytes), not text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_words(path: str) -> list[str]:
    """One word per line (names.txt), blank lines skipped; checks as :func:`read_text`.

    Raises:
        As :func:`read_text`, and ValueError when the file has no words.
    """
    words = [w.strip() for w in read_text(path).splitlines() if w.strip()]
    if not words:
        raise ValueError(f"{path} has no words")
    return words
