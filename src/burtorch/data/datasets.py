"""Datasets for the two character-level models, with deterministic splits and samplers."""
from __future__ import annotations

import random
from array import array
from collections.abc import Iterable
from typing import Protocol, TypeAlias, TypeVar

from ..seeding import next_seed
from .tokenizer import CharTokenizer

# A makemore example: the context's token ids and the next token's id.
WordSample: TypeAlias = "tuple[tuple[int, ...], int]"
# A text window: the ids of block characters and of the block characters one further.
TextSample: TypeAlias = "tuple[list[int], list[int]]"
_Sample = TypeVar("_Sample", covariant=True)
_T = TypeVar("_T")


class WordDataset:
    """makemore's examples: for each word, each next character given the ``block`` previous ones.

    '.' (id 0) pads the start and marks the end of a word, so V = letters + 1 (27 for names.txt).

    Args:
        words: the words (no '.' in them).
        block: the context length.
        tokenizer: default one built from the words, with '.' first.
        seed: the seed of :meth:`batch`'s default random stream; default
            :func:`burtorch.seeding.next_seed`.
    """

    def __init__(self, words: Iterable[str], block: int = 16, tokenizer: CharTokenizer | None = None,
                 seed: int | None = None) -> None:
        words = [w for w in words if w]
        if not words:
            raise ValueError("WordDataset needs at least one non-empty word")
        if any("." in w for w in words):
            raise ValueError("words may not contain '.', the boundary token")
        self.block = block
        self.rng = random.Random(next_seed() if seed is None else seed)
        self.tokenizer = tokenizer or CharTokenizer("".join(words), specials=".")
        self.words = words
        # Contexts and targets packed one byte per token (an order of magnitude less memory than
        # tuples of Python ints, which are objects); examples are unpacked on access.
        code = "B" if self.tokenizer.vocab_size <= 256 else "I"
        self._ctx = array(code)
        self._tgt = array(code)
        for w in words:
            ctx = [0] * block
            for t in self.tokenizer.encode(w) + [0]:
                self._ctx.extend(ctx)
                self._tgt.append(t)
                ctx = ctx[1:] + [t]

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def __len__(self) -> int:
        return len(self._tgt)

    def __getitem__(self, i: int) -> WordSample:
        if not -len(self) <= i < len(self):
            raise IndexError(f"example {i} out of range for {len(self)} examples")
        i %= len(self)
        return (tuple(self._ctx[i * self.block:(i + 1) * self.block]), self._tgt[i])

    def batch(self, b: int, rng: random.Random | None = None) -> list[WordSample]:
        """``b`` examples drawn uniformly with replacement.

        Args:
            b: the number of examples.
            rng: the random stream; default the dataset's own, seeded from
                :func:`burtorch.seeding.next_seed` when the dataset was made.
        """
        return _draw(self, b, rng if rng is not None else self.rng)


class TextDataset:
    """Windows of ``block`` + 1 characters of a text: ``(ids[:-1], ids[1:])`` pairs.

    Args:
        text: at least ``block + 1`` characters.
        block: the context length.
        tokenizer: default one built from the text.
        seed: as in :class:`WordDataset`.
    """

    def __init__(self, text: str, block: int = 8, tokenizer: CharTokenizer | None = None,
                 seed: int | None = None) -> None:
        if len(text) < block + 1:
            raise ValueError(f"the text has {len(text)} characters; a block of {block} needs at least {block + 1}")
        self.block = block
        self.rng = random.Random(next_seed() if seed is None else seed)
        self.tokenizer = tokenizer or CharTokenizer(text)
        # One byte per token when the vocabulary allows, instead of an 8-byte pointer per token in a
        # list of Python ints (the token ids are most of a training process's own memory).
        code = "B" if self.tokenizer.vocab_size <= 256 else "I"
        self.ids = self.tokenizer.encode_array(text, code)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def __len__(self) -> int:
        return len(self.ids) - self.block

    def __getitem__(self, i: int) -> TextSample:
        w = self.ids[i:i + self.block + 1].tolist()
        return (w[:-1], w[1:])

    def batch(self, b: int, rng: random.Random | None = None) -> list[TextSample]:
        """``b`` windows drawn uniformly with replacement (``rng`` as in :meth:`WordDataset.batch`)."""
        return _draw(self, b, rng if rng is not None else self.rng)


class _Indexable(Protocol[_Sample]):
    def __len__(self) -> int: ...

    def __getitem__(self, i: int, /) -> _Sample: ...


def _draw(dataset: _Indexable[_Sample], b: int, rng: random.Random) -> list[_Sample]:
    if isinstance(b, bool) or not isinstance(b, int) or b < 1:
        raise ValueError(f"a batch needs a positive number of samples, got {b!r}")
    n = len(dataset)
    return [dataset[rng.randrange(n)] for _ in range(b)]


def split(items: Iterable[_T], val_fraction: float = 0.1, seed: int | None = None) -> tuple[list[_T], list[_T]]:
    """A shuffled split into (train, val) lists.

    Args:
        items: at least two items.
        val_fraction: the share of validation items (at least one).
        seed: the shuffle's seed; default :func:`burtorch.seeding.next_seed`, so
            ``bt.manual_seed`` makes the split reproducible.

    Raises:
        ValueError: fewer than two items, or ``val_fraction`` outside (0, 1).
    """
    items = list(items)
    if len(items) < 2:
        raise ValueError("need at least two items to split into train and validation")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    random.Random(next_seed() if seed is None else seed).shuffle(items)
    k = max(1, int(len(items) * val_fraction))
    return items[k:], items[:k]


def split_text(text: str, val_fraction: float = 0.1) -> tuple[str, str]:
    """The last `val_fraction` of the text is the validation text (as nanoGPT does)."""
    k = int(len(text) * (1 - val_fraction))
    return text[:k], text[k:]
