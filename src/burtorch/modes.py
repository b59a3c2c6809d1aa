"""Per-thread modes of the core: ``no_grad`` (values only, no records) and ``detect_anomaly``."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from . import _core

_F = TypeVar("_F", bound=Callable[..., Any])


class _ThreadMode:
    """A per-thread mode of the core, entered as a context manager or used as a decorator."""

    _name = ""

    def __enter__(self) -> _ThreadMode:
        _core._push_mode(self._name, 1)
        return self

    def __exit__(self, *exc: object) -> None:
        _core._push_mode(self._name, -1)

    def __call__(self, fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with type(self)():
                return fn(*args, **kwargs)

        return cast(_F, wrapper)  # wraps() keeps fn's name and signature


class no_grad(_ThreadMode):
    """``with bt.no_grad():`` ops compute values but append no records (PyTorch's name).

    Inside the block every op writes its result into a fresh leaf node: nothing can be swept
    backward through it and no argument lists are stored, so validation passes and sampling
    cost values only. Per thread; nests; also usable as a decorator (``@bt.no_grad()``).
    """

    _name = "no_grad"


class detect_anomaly(_ThreadMode):
    """``with bt.detect_anomaly():`` the first non-finite number raises :class:`AnomalyError`.

    Checked: the outputs of every op appended inside the block, and during a backward pass
    inside it, the grads each record contributes to its arguments. The error names the op, its
    record index and the node (with its label when labels are on). Off (the default) it costs
    nothing per record. Per thread; nests; also usable as a decorator.
    """

    _name = "anomaly"
