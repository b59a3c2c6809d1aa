"""Per-thread modes of the core: ``no_grad`` (values only, no records) and ``detect_anomaly``."""
from __future__ import annotations

import functools
import inspect
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
        if not callable(fn):
            raise TypeError(f"{type(self).__name__}() decorates functions, got {type(fn).__name__}")
        # The mode is per thread and lasts while fn's body runs. A coroutine's or an async
        # generator's body runs later, interleaved with other tasks on the thread, so the mode
        # cannot be confined to it: refused rather than silently not applied.
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(f"{type(self).__name__}() cannot decorate the async function {fn.__qualname__}: "
                            "its body runs later, interleaved with other tasks; use the `with` form inside it "
                            "around code without await")
        if inspect.isgeneratorfunction(fn):  # its body runs on each next()/send(): the mode wraps each

            @functools.wraps(fn)
            def generator(*args: Any, **kwargs: Any) -> Any:
                return (yield from _ModeGenerator(type(self), fn(*args, **kwargs)))

            return cast(_F, generator)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with type(self)():
                return fn(*args, **kwargs)

        return cast(_F, wrapper)  # wraps() keeps fn's name and signature


class _ModeGenerator:
    """A generator whose every resumption (next, send, throw, close) runs inside a mode, and
    only those: between them the caller runs in its own modes."""

    def __init__(self, mode: type[_ThreadMode], gen: Any) -> None:
        self._mode, self._gen = mode, gen

    def __iter__(self) -> _ModeGenerator:
        return self

    def __next__(self) -> Any:
        with self._mode():
            return next(self._gen)

    def send(self, value: Any) -> Any:
        with self._mode():
            return self._gen.send(value)

    def throw(self, *exc: Any) -> Any:
        with self._mode():
            return self._gen.throw(*exc)

    def close(self) -> None:
        with self._mode():
            self._gen.close()


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
