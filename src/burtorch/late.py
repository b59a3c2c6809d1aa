"""Modules a hot path imports on first use and then keeps.

A module that loads before another (or that the other imports) cannot import it at the top; an
import statement inside a function instead runs the import machinery on every call, a cost paid
on every training step of a hot path (``SGD.fused_step``, ``grad_oracle(compile=True)``).
"""
from __future__ import annotations

import importlib
from types import ModuleType

_loaded: dict[str, ModuleType] = {}


def module(name: str) -> ModuleType:
    """``burtorch.<name>``, imported the first time and then returned from a dict."""
    mod = _loaded.get(name)
    if mod is None:
        mod = _loaded[name] = importlib.import_module(f"burtorch.{name}")
    return mod
