"""Reading LibSVM-format files ("label index:value index:value ...", indices from 1), the format
of the data sets of the EF21 and MARINA papers (a9a, w8a, phishing, ...).

A strict reader of our own: the format is one line per sample, and the maintained parser
(scikit-learn's load_svmlight_file) would add a large dependency for it. Every malformed line is
reported with its number.
"""
from __future__ import annotations

import os

import numpy as np


def read_libsvm(path: str, max_features: int = 1_000_000, max_cells: int = 1 << 27) -> tuple[np.ndarray, np.ndarray]:
    """(A, y): a dense float64 matrix of samples x features and the labels mapped to -1/+1.

    Binary labels of any two values are mapped to -1 (the smaller) and +1 (the larger). max_cells
    bounds samples x features (the dense matrix)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str, got {type(path).__name__}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"LibSVM file not found: {path}")
    rows, labels, width = [], [], 0
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            lines = f.read().splitlines()
        except UnicodeDecodeError as e:
            raise ValueError(f"{path} is not a LibSVM text file ({e.reason})") from None
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        try:
            label = float(fields[0])
        except ValueError:
            raise ValueError(f"{path}:{number}: the label {fields[0]!r} is not a number") from None
        if not np.isfinite(label):  # a nan label compares unequal to both classes: every label would map to -1
            raise ValueError(f"{path}:{number}: the label is {label}")
        row = {}
        for field in fields[1:]:
            index, sep, value = field.partition(":")
            if not sep:
                raise ValueError(f"{path}:{number}: {field!r} is not index:value")
            try:
                j, v = int(index), float(value)
            except ValueError:
                raise ValueError(f"{path}:{number}: {field!r} is not index:value with an int index") from None
            if not 1 <= j <= max_features:
                raise ValueError(f"{path}:{number}: feature index {j} outside [1, {max_features}]")
            if not np.isfinite(v):
                raise ValueError(f"{path}:{number}: feature {j} is {v}")
            row[j - 1] = v
            width = max(width, j)
        rows.append(row)
        labels.append(label)
    if not rows:
        raise ValueError(f"{path} has no samples")
    if len(rows) * width > max_cells:  # A is dense: refused before it is allocated
        raise ValueError(f"{path}: {len(rows):,} samples x {width:,} features is more than the "
                         f"{max_cells:,} numbers a dense matrix may hold here")
    classes = sorted(set(labels))
    if len(classes) != 2:
        raise ValueError(f"{path}: binary classification needs exactly two label values, found {len(classes)}")
    A = np.zeros((len(rows), width))
    for i, row in enumerate(rows):
        for j, v in row.items():
            A[i, j] = v
    y = np.where(np.array(labels) == classes[1], 1.0, -1.0)
    return A, y
