"""numpy.save / numpy.load of an array of 7 FP64: the plain baseline for W3."""
from __future__ import annotations

import os
import tempfile

import numpy as np

from ..workloads import W3_NAMES, w2_values
from . import Unavailable


def versions() -> dict:
    return {"numpy": np.__version__}


class SaveLoadRunner:
    timed_region = "np.save(path, array of 7 FP64) / np.load(path)"

    def __init__(self):
        vals = w2_values()  # numpy has no autodiff: the forward values in plain floats
        self._array = np.array([vals[k] for k in W3_NAMES], dtype=np.float64)
        fd, self.path = tempfile.mkstemp(prefix="numpy-w3-", suffix=".npy")
        os.close(fd)
        np.save(self.path, self._array)
        self._loaded = None

    def run(self, phase: str, n: int) -> None:
        path = self.path
        if phase == "save":
            arr = self._array
            for _ in range(n):
                np.save(path, arr)
        else:
            for _ in range(n):
                self._loaded = np.load(path)

    def numbers(self) -> dict:
        out = dict(zip(W3_NAMES, self._loaded.tolist()))
        out["file bytes"] = os.path.getsize(self.path)
        return out

    def close(self) -> None:
        os.unlink(self.path)


def make_runner(workload: str, variant: str, config: dict):
    if workload == "saveload":
        return SaveLoadRunner()
    raise Unavailable(f"numpy is a baseline for W3 only, not {workload!r}")
