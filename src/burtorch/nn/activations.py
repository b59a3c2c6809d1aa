"""Activation functions by name, for scalar Values and Vectors alike (both have the methods)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any


def activation(name: str | None) -> Callable[[Any], Any]:
    """'relu', 'tanh', 'sigmoid', 'identity'/None -> a function of a Value or a Vector."""
    if name in (None, "identity", "linear"):
        return lambda x: x
    if name in ("relu", "tanh", "sigmoid", "exp", "softplus"):
        return lambda x: getattr(x, name)()
    raise ValueError(f"unknown activation {name!r}; use relu, tanh, sigmoid, softplus or identity")
