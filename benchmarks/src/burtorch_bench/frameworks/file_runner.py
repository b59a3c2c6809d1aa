"""W3 for frameworks that save and load whole objects (torch.save, np.save): one runner, their
functions plugged in."""
from __future__ import annotations

import os
import tempfile
from typing import Any

from ..specs import W3_NAMES


class FileSaveLoadRunner:
    """n saves of one 7-value payload to one file, then n loads of it."""

    def __init__(self, payload, save, load, suffix: str, timed_region: str, directory: str | None = None):
        self.timed_region = timed_region
        self._payload, self._save, self._load = payload, save, load
        fd, self.path = tempfile.mkstemp(prefix="w3-", suffix=suffix, dir=directory)
        os.close(fd)
        save(self.path, payload)
        self._loaded: Any = None  # set by run(), read after it

    def run(self, phase: str, n: int) -> None:
        path = self.path
        if phase == "save":
            save, payload = self._save, self._payload
            for _ in range(n):
                save(path, payload)
        else:
            load = self._load
            for _ in range(n):
                self._loaded = load(path)

    def numbers(self) -> dict:
        out = dict(zip(W3_NAMES, self._loaded.tolist()))
        out["file bytes"] = os.path.getsize(self.path)
        return out

    def close(self) -> None:
        os.unlink(self.path)
