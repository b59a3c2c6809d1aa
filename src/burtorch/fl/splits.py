"""Splitting a data set among clients: i.i.d., by label (each client sees few classes), or with
per-class Dirichlet proportions (the usual knob for heterogeneity)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..optim import streams

SPLITS = ("iid", "label", "dirichlet")


def _check(n_items: int, n_clients: int) -> None:
    if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
        raise ValueError(f"the number of clients must be a positive int, got {n_clients!r}")
    if n_clients > n_items:
        raise ValueError(f"more clients ({n_clients}) than samples ({n_items}): every client needs data")


def _blocks(order: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """Cuts ``order`` into n_clients contiguous blocks whose sizes differ by at most one."""
    return [np.sort(part) for part in np.array_split(order, n_clients)]


def iid(n_items: int, n_clients: int, seed: int) -> list[np.ndarray]:
    _check(n_items, n_clients)
    order = np.random.default_rng(streams.derive(seed, streams.DATA, 1)).permutation(n_items)
    return _blocks(order, n_clients)


def by_label(labels: Sequence[Any] | np.ndarray, n_clients: int) -> list[np.ndarray]:
    """Items sorted by label (stable), cut into equal blocks: client i gets one or two classes."""
    labels = np.asarray(labels)
    _check(len(labels), n_clients)
    return _blocks(np.argsort(labels, kind="stable"), n_clients)


def dirichlet(labels: Sequence[Any] | np.ndarray, n_clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """Each class is shared among the clients in proportions drawn from Dirichlet(alpha, ..., alpha);
    small alpha: each class lives on few clients. A client left empty gets one item from the
    largest client, so every client has data."""
    labels = np.asarray(labels)
    _check(len(labels), n_clients)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise ValueError(f"the Dirichlet concentration must be > 0, got {alpha!r}")
    rng = np.random.default_rng(streams.derive(seed, streams.DATA, 2))
    parts: list[list[int]] = [[] for _ in range(n_clients)]
    for cls in np.unique(labels):
        items = rng.permutation(np.flatnonzero(labels == cls))
        cuts = (np.cumsum(rng.dirichlet([alpha] * n_clients)) * len(items)).astype(int)[:-1]
        for i, chunk in enumerate(np.split(items, cuts)):
            parts[i].extend(chunk.tolist())
    for i in range(n_clients):
        if not parts[i]:
            donor = max(range(n_clients), key=lambda j: len(parts[j]))
            parts[i].append(parts[donor].pop())
    return [np.sort(np.array(p, dtype=np.int64)) for p in parts]


def split(labels: Sequence[Any] | np.ndarray, n_clients: int, how: str = "label", alpha: float = 0.5,
          seed: int = 0) -> list[np.ndarray]:
    """Index arrays, one per client."""
    if how == "iid":
        return iid(len(labels), n_clients, seed)
    if how == "label":
        return by_label(labels, n_clients)
    if how == "dirichlet":
        return dirichlet(labels, n_clients, alpha, seed)
    raise ValueError(f"unknown split {how!r}; choose from {', '.join(SPLITS)}")
