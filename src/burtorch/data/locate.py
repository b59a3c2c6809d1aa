"""Finding a data file the user pointed at: an explicit path, or the $BURTORCH_DATA directory.

The library never guesses where a checkout or a workspace keeps its data; callers that know
(a test suite, a benchmark script) pass the path.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "BURTORCH_DATA"


def find_data_file(filename: str, data: str | os.PathLike | None = None) -> Path | None:
    """The path of ``filename`` from an explicit location or ``$BURTORCH_DATA``.

    Args:
        filename: the file looked for in a directory, e.g. ``"names.txt"``.
        data: a file (returned as it is) or a directory holding ``filename``. When None, the
            directory named by the ``BURTORCH_DATA`` environment variable, if set.

    Returns:
        The path, or None when ``data`` is None and ``$BURTORCH_DATA`` is unset or lacks the file.

    Raises:
        FileNotFoundError: ``data`` is neither a file nor a directory, or is a directory without
            ``filename``.
    """
    if data is not None:
        p = Path(data)
        if p.is_file():
            return p
        if not p.is_dir():
            raise FileNotFoundError(f"{os.fspath(data)!r} is neither a file nor a directory")
        if not (p / filename).is_file():
            raise FileNotFoundError(f"{os.fspath(data)!r} has no {filename}")
        return p / filename
    env = os.environ.get(ENV_VAR)
    if env:
        candidate = Path(env) / filename
        if candidate.is_file():
            return candidate
    return None
