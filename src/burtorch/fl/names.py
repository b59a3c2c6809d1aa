"""The makemore names task per client: each client holds some of the words (split by first
letter, i.i.d. or Dirichlet over first letters) and trains the character MLP on them."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _core
from ..data.corpus import read_words
from ..data.datasets import WordDataset
from ..nn.models.makemore_mlp import MakemoreMLP
from ..optim import streams
from . import splits
from .problem import SampleProblem


class NamesProblem(SampleProblem):
    name = "names"

    def __init__(self, words: list[str], n_clients: int, hidden: int = 64, block: int = 16, emb: int = 64,
                 max_samples: int | None = 256, split: str = "label", alpha: float = 0.5, seed: int = 0,
                 chunk: int = 64, source: str = "words") -> None:
        first_letters = [w[0] for w in words]
        parts = splits.split(first_letters, n_clients, split, alpha, seed)
        vocab_source = WordDataset(words, block)  # one tokenizer for every client
        shards = []
        for i, part in enumerate(parts):
            ds = WordDataset([words[j] for j in part], block, vocab_source.tokenizer)
            picks: Sequence[int] | np.ndarray = range(len(ds))
            if max_samples is not None and len(ds) > max_samples:
                picks = np.sort(np.random.default_rng(streams.derive(seed, streams.DATA, 3, i))
                                .choice(len(ds), max_samples, replace=False))
            shards.append([ds[int(j)] for j in picks])
        # FP32, as the paper's W4 trains
        factory = functools.partial(MakemoreMLP, vocab=vocab_source.vocab_size, block=block, emb=emb, hidden=hidden,
                                    dtype=_core.float32)
        super().__init__(factory, shards, chunk=chunk, dtype=_core.float32)
        self.hidden, self.source = hidden, source

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "model": f"MakemoreMLP(e={self.hidden})", "data": self.source}


def from_file(path: str, n_clients: int, **kw: Any) -> NamesProblem:
    return NamesProblem(read_words(path), n_clients, source=str(path), **kw)
