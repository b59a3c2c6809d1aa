"""Character-level data: tokenizer, datasets, the embedded default corpus, user files, data sets by name."""
from .arrays import ArrayBatch
from .corpus import default_text, default_words, read_text, read_words
from .datasets import TextDataset, WordDataset, split, split_text
from .locate import find_data_file
from .registry import DATASETS, ChecksumError, DataSet, DataUnavailableError, cache_dir, fetch, resolve
from .tokenizer import CharTokenizer

__all__ = ["ArrayBatch", "CharTokenizer", "WordDataset", "TextDataset", "split", "split_text", "default_text",
           "default_words", "find_data_file", "read_text", "read_words",
           "DATASETS", "DataSet", "ChecksumError", "DataUnavailableError", "cache_dir", "fetch", "resolve"]
