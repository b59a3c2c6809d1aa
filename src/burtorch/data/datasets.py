"""Datasets for the two character-level models, with deterministic splits and samplers."""
import random

from .tokenizer import CharTokenizer


class WordDataset:
    """makemore's examples: for each word, each next character given the `block` previous ones.

    '.' (id 0) pads the start and marks the end of a word, so V = letters + 1 (27 for names.txt).
    """

    def __init__(self, words, block: int = 16, tokenizer: CharTokenizer | None = None):
        words = [w for w in words if w]
        if not words:
            raise ValueError("WordDataset needs at least one non-empty word")
        if any("." in w for w in words):
            raise ValueError("words may not contain '.', the boundary token")
        self.block = block
        self.tokenizer = tokenizer or CharTokenizer("".join(words), specials=".")
        self.words = words
        self.examples = []
        for w in words:
            ctx = [0] * block
            for t in self.tokenizer.encode(w) + [0]:
                self.examples.append((tuple(ctx), t))
                ctx = ctx[1:] + [t]

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return self.examples[i]

    def batch(self, b: int, rng: random.Random) -> list:
        """b examples drawn uniformly with replacement."""
        n = len(self.examples)
        return [self.examples[rng.randrange(n)] for _ in range(b)]


class TextDataset:
    """Windows of `block` + 1 characters of a text: (ids[:-1], ids[1:]) pairs."""

    def __init__(self, text: str, block: int = 8, tokenizer: CharTokenizer | None = None):
        if len(text) < block + 1:
            raise ValueError(f"the text has {len(text)} characters; a block of {block} needs at least {block + 1}")
        self.block = block
        self.tokenizer = tokenizer or CharTokenizer(text)
        self.ids = self.tokenizer.encode(text)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def __len__(self):
        return len(self.ids) - self.block

    def __getitem__(self, i):
        w = self.ids[i:i + self.block + 1]
        return (w[:-1], w[1:])

    def batch(self, b: int, rng: random.Random) -> list:
        n = len(self)
        return [self[rng.randrange(n)] for _ in range(b)]


def split(items, val_fraction: float = 0.1, seed: int = 0):
    """Deterministic shuffled split into (train, val) lists."""
    items = list(items)
    random.Random(seed).shuffle(items)
    k = max(1, int(len(items) * val_fraction))
    if len(items) < 2:
        raise ValueError("need at least two items to split into train and validation")
    return items[k:], items[:k]


def split_text(text: str, val_fraction: float = 0.1):
    """The last `val_fraction` of the text is the validation text (as nanoGPT does)."""
    k = int(len(text) * (1 - val_fraction))
    return text[:k], text[k:]
