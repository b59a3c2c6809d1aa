"""Reading LibSVM-format files ("label index:value index:value ...", indices from 1), the format
of the data sets of the EF21 and MARINA papers (a9a, w8a, phishing, ...).

A strict reader of our own: the format is one line per sample, and the maintained parser
(scikit-learn's load_svmlight_file) would add a large dependency for it. Every malformed line is
reported with its number.
"""
from __future__ import annotations

import bz2
import math
import os
from typing import Any

import numpy as np

from .sparse import CSR


def read_libsvm(path: str, max_features: int = 10_000_000, sparse: bool = False,
                max_cells: int = 1 << 27) -> tuple[Any, np.ndarray]:
    """(A, y): the samples x features matrix (a :class:`~burtorch.fl.sparse.CSR` with
    ``sparse=True``, else a dense float64 array) and the labels mapped to -1/+1.

    Binary labels of any two values are mapped to -1 (the smaller) and +1 (the larger). A
    feature index given twice on one line, a non-finite label or value are errors. max_cells
    bounds samples x features of the dense matrix (never allocated above it). A path ending in
    ``.bz2`` (the LibSVM page's compressed files) is decompressed while it is read."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str, got {type(path).__name__}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"LibSVM file not found: {path}")
    lengths, cols, vals, labels, width = [0], [], [], [], 0
    opener = bz2.open if os.fspath(path).endswith(".bz2") else open
    with opener(path, "rt", encoding="utf-8", errors="strict") as f:
        try:
            for number, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                fields = line.split()
                try:
                    label = float(fields[0])
                except ValueError:
                    raise ValueError(f"{path}:{number}: the label {fields[0]!r} is not a number") from None
                if not math.isfinite(label):
                    raise ValueError(f"{path}:{number}: the label is {fields[0]}")
                row_cols, row_vals = _fields(path, number, fields[1:], max_features)
                if row_cols:
                    width = max(width, row_cols[-1] + 1)
                lengths.append(len(row_cols))
                cols.extend(row_cols)
                vals.extend(row_vals)
                labels.append(label)
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} is not a LibSVM text file ({e.reason})") from None
        except (OSError, EOFError) as e:
            if opener is open:
                raise
            # a .bz2 that is not one, or is cut short
            raise ValueError(f"{path} is not a readable bzip2 file ({e})") from None
    if not labels:
        raise ValueError(f"{path} has no samples")
    classes = sorted(set(labels))
    if len(classes) != 2:
        raise ValueError(f"{path}: binary classification needs exactly two label values, found {len(classes)}")
    y = np.where(np.array(labels) == classes[1], 1.0, -1.0)
    A = CSR(np.cumsum(lengths), np.array(cols, dtype=np.int64), np.array(vals, dtype=np.float64),
            (len(labels), width))
    if sparse:
        return A, y
    if A.shape[0] * A.shape[1] > max_cells:  # refused before the dense matrix is allocated
        raise ValueError(f"{path}: {A.shape[0]:,} samples x {A.shape[1]:,} features is more than the "
                         f"{max_cells:,} numbers a dense matrix may hold here; read it with sparse=True "
                         "(burtorch fl --libsvm keeps it sparse)")
    return A.toarray(), y


def _fields(path: str, number: int, fields: list[str], max_features: int) -> tuple[list[int], list[float]]:
    """One line's (0-based columns, values), sorted by column."""
    row_cols, row_vals = [], []
    for field in fields:
        index, sep, value = field.partition(":")
        if not sep:
            raise ValueError(f"{path}:{number}: {field!r} is not index:value")
        try:
            j, v = int(index), float(value)
        except ValueError:
            raise ValueError(f"{path}:{number}: {field!r} is not index:value with an int index") from None
        if not 1 <= j <= max_features:
            raise ValueError(f"{path}:{number}: feature index {j} outside [1, {max_features}]")
        if not math.isfinite(v):
            raise ValueError(f"{path}:{number}: feature {j} is {v}")
        row_cols.append(j - 1)
        row_vals.append(v)
    if any(a >= b for a, b in zip(row_cols, row_cols[1:])):
        if len(set(row_cols)) != len(row_cols):
            dup = next(j for j in row_cols if row_cols.count(j) > 1)
            raise ValueError(f"{path}:{number}: feature index {dup + 1} appears twice")
        order = sorted(range(len(row_cols)), key=row_cols.__getitem__)
        row_cols = [row_cols[i] for i in order]
        row_vals = [row_vals[i] for i in order]
    return row_cols, row_vals
