"""Character-level data: tokenizer, datasets, the embedded default corpus, user files."""
from .corpus import default_text, default_words, read_text, read_words, shared_data
from .datasets import TextDataset, WordDataset, split, split_text
from .tokenizer import CharTokenizer

__all__ = ["CharTokenizer", "WordDataset", "TextDataset", "split", "split_text", "default_text",
           "default_words", "read_text", "read_words", "shared_data"]
