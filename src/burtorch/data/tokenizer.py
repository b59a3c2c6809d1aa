"""Character-level tokenizer."""


class CharTokenizer:
    """Maps each distinct character of a text to an id (sorted order; `specials` come first)."""

    def __init__(self, text: str, specials: str = ""):
        chars = sorted(set(text) - set(specials))
        self.itos = list(specials) + chars
        if not self.itos:
            raise ValueError("cannot build a tokenizer from empty text")
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list:
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the tokenizer's vocabulary") from None

    def encode_array(self, text: str, typecode: str):
        """Like encode, straight into an array.array (no temporary list of Python ints)."""
        from array import array

        try:
            return array(typecode, map(self.stoi.__getitem__, text))
        except KeyError as e:
            raise ValueError(f"character {e.args[0]!r} is not in the tokenizer's vocabulary") from None

    def decode(self, ids) -> str:
        n = len(self.itos)
        out = []
        for i in ids:
            if not 0 <= i < n:
                raise IndexError(f"token id {i} is out of range for a vocabulary of {n}")
            out.append(self.itos[i])
        return "".join(out)
