"""Character-level tokenizer."""
from __future__ import annotations

from array import array
from collections.abc import Iterable


class CharTokenizer:
    """Maps each distinct character of a text to an id: ``specials`` first, then sorted.

    Args:
        text: the characters to know (any iterable of characters).
        specials: characters that come first (e.g. ``"."`` for word boundaries).

    Raises:
        ValueError: an empty vocabulary.
    """

    def __init__(self, text: Iterable[str], specials: str = "") -> None:
        chars = sorted(set(text) - set(specials))
        self.itos = list(specials) + chars
        if not self.itos:
            raise ValueError("cannot build a tokenizer from empty text")
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """The ids of the characters of ``text``; ValueError names an unknown character."""
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the tokenizer's vocabulary") from None

    def encode_array(self, text: str, typecode: str) -> array[int]:
        """Like encode, straight into an array.array (no temporary list of Python ints)."""
        try:
            return array(typecode, map(self.stoi.__getitem__, text))
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the tokenizer's vocabulary") from None

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; IndexError for an id outside the vocabulary."""
        n = len(self.itos)
        out: list[str] = []
        for i in ids:
            if not 0 <= i < n:
                raise IndexError(f"token id {i} is out of range for a vocabulary of {n}")
            out.append(self.itos[i])
        return "".join(out)
