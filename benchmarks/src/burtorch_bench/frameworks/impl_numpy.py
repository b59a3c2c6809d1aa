"""numpy.save / numpy.load of an array of 7 FP64: the plain baseline for W3."""
from __future__ import annotations

import numpy as np

from ..specs import W3_NAMES, w2_values
from . import Unavailable
from .file_runner import FileSaveLoadRunner


def versions() -> dict:
    return {"numpy": np.__version__}


def _save_load_runner(directory: str | None) -> FileSaveLoadRunner:
    vals = w2_values()  # numpy has no autodiff: the forward values in plain floats
    array = np.array([vals[k] for k in W3_NAMES], dtype=np.float64)
    return FileSaveLoadRunner(array, np.save, np.load, ".npy", "np.save(path, array of 7 FP64) / np.load(path)",
                              directory)


def make_runner(workload: str, variant: str, config: dict):
    if workload == "saveload":
        return _save_load_runner(config.get("dir"))
    raise Unavailable(f"numpy is a baseline for W3 only, not {workload!r}")
