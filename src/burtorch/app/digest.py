"""SHA-256 without loading OpenSSL.

``import hashlib`` loads the OpenSSL library behind ``_hashlib``, about 4 MB of resident memory,
which is most of what a small training run adds over the interpreter. CPython's own built-in
SHA-256 gives the same digests; hashlib is the fallback on interpreters without it.
"""
from __future__ import annotations

try:
    from _sha2 import sha256  # CPython >= 3.12
except ImportError:
    try:
        from _sha256 import sha256  # CPython <= 3.11
    except ImportError:
        from hashlib import sha256

__all__ = ["sha256"]
