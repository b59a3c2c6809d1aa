"""argparse types for the numbers commands take: a bad number is a usage error, never a default."""
from __future__ import annotations

import argparse
import math
import os
import stat


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An int >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An int >= 0."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _finite_float(text: str, ok, requirement: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or not ok(value):
        raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite float > 0."""
    return _finite_float(text, lambda v: v > 0, "a finite number above 0")


def non_negative_float(text: str) -> float:
    """A finite float >= 0."""
    return _finite_float(text, lambda v: v >= 0, "a finite number, 0 or more")


def int_list(text: str) -> list:
    """A comma list of positive ints, e.g. ``4,64,1024``."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected comma-separated positive integers")
    return [positive_int(x) for x in items]


def output_problem(path: str) -> str | None:
    """Why ``path`` cannot be written by a command (its directory is missing or not writable, or
    the path is a directory, FIFO or device, which the atomic writer does not replace), or None.
    Commands check their output paths with this before any work, so that a run never finishes
    only to fail writing its result."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"the directory {directory} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"the directory {directory} is not writable"
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return e.strerror
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        return "it exists and is not a regular file"
    return None


def memory_setting(text: str):
    """``--memory``: "sample", "fast", or a byte count with an optional K, M or G (binary) suffix."""
    if text in ("sample", "fast"):
        return text
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    number = text[:-1] if scale > 1 else text
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sample, fast or a byte count such as 64M, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a memory budget must be positive, got {text!r}")
    return value


def plan_setting(text: str) -> str:
    """``--plan``: "auto" or a plan's spelling (burtorch.planner.parse), checked here."""
    from ..planner import parse

    if text != "auto":
        try:
            parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return text
