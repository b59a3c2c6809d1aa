"""SHA-256 without loading OpenSSL.

``import hashlib`` loads the OpenSSL library behind ``_hashlib``, whose resident memory is most of
what a small training run adds over the interpreter. CPython's own built-in
SHA-256 gives the same digests; hashlib is the fallback on interpreters without it.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def _builtin_sha256() -> Callable[..., Any]:
    for name in ("_sha2", "_sha256"):  # CPython >= 3.12, <= 3.11
        try:
            return importlib.import_module(name).sha256
        except (ImportError, AttributeError):
            pass
    from hashlib import sha256 as from_hashlib
    return from_hashlib


sha256 = _builtin_sha256()

__all__ = ["sha256"]
