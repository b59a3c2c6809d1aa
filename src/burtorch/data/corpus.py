"""Text sources: the embedded default corpus and user files.

The default corpus is the standard library's own documentation text (`pydoc_data.topics`), which
every Python installation carries, so training works offline with no download. Its words (lower-
case letters only, 3-12 long, distinct) are the default word list for the name-generation MLP.
"""
import os
import re

_TEXT_LIMIT = 2_000_000


def default_text() -> str:
    """The embedded corpus: pydoc's topic texts, joined in a fixed (sorted) order."""
    try:
        from pydoc_data.topics import topics
    except ImportError as e:  # some minimal Python builds strip it
        raise RuntimeError("this Python has no pydoc_data; pass --data FILE") from e
    return "\n".join(topics[k] for k in sorted(topics))


def default_words() -> list:
    words = sorted(set(re.findall(r"\b[a-z]{3,12}\b", default_text())))
    return words


def read_text(path: str, limit: int = 50_000_000) -> str:
    """Reads a UTF-8 text file with clear errors for missing, empty, binary or huge files."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such data file: {path}")
    size = os.path.getsize(path)
    if size == 0:
        raise ValueError(f"{path} is empty")
    if size > limit:
        raise ValueError(f"{path} is {size} bytes; the limit is {limit}")
    with open(path, "rb") as f:
        raw = f.read()
    if b"\x00" in raw[:65536]:
        raise ValueError(f"{path} looks binary (it has NUL bytes), not text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_words(path: str) -> list:
    """One word per line (names.txt); blank lines skipped."""
    words = [w.strip() for w in read_text(path).splitlines() if w.strip()]
    if not words:
        raise ValueError(f"{path} has no words")
    return words


def shared_data(name: str):
    """Path of a canonical data set beside a burtorch checkout (../shared/data), or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    for up in (4, 5):
        p = os.path.join(here, *[".."] * up, "shared", "data", name)
        if os.path.isfile(p):
            return os.path.abspath(p)
    return None
