"""Tokenizer, datasets, the embedded corpus and file checks."""
import random
import subprocess
import sys

import pytest

from burtorch import data


def test_tokenizer_round_trip_and_errors():
    tok = data.CharTokenizer("hello world", specials=".")
    assert tok.itos[0] == "." and tok.vocab_size == 9
    assert tok.decode(tok.encode("hold")) == "hold"
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("z")
    with pytest.raises(IndexError):
        tok.decode([99])
    with pytest.raises(ValueError):
        data.CharTokenizer("")


def test_word_dataset_is_makemore_style():
    ds = data.WordDataset(["ab", "b"], block=3)
    assert ds.vocab_size == 3  # '.', 'a', 'b'
    assert ds[0] == ((0, 0, 0), 1) and ds[1] == ((0, 0, 1), 2) and ds[2] == ((0, 1, 2), 0)
    assert len(ds) == 5
    with pytest.raises(ValueError):
        data.WordDataset([])
    with pytest.raises(ValueError):
        data.WordDataset(["a.b"])


def test_text_dataset_windows():
    ds = data.TextDataset("abcdefg", block=3)
    x, y = ds[1]
    assert ds.tokenizer.decode(x) == "bcd" and ds.tokenizer.decode(y) == "cde"
    assert len(ds.batch(5, random.Random(0))) == 5
    with pytest.raises(ValueError):
        data.TextDataset("ab", block=3)


def test_embedded_corpus_is_always_there():
    text = data.default_text()
    words = data.default_words()
    assert len(text) > 100_000 and len(words) > 1000
    assert all(w.isalpha() and w.islower() for w in words)
    assert data.default_text() == text  # deterministic


def test_embedded_corpus_does_not_stay_imported():
    # A fresh interpreter: the suite may have imported pydoc_data.topics by other routes. Its strings
    # must be freed once the text is built (with the text `burtorch train gpt` used to keep, about
    # 2 MB of its 25 MB peak).
    code = (
        "import sys\n"
        "from burtorch import data\n"
        "text = data.default_text()\n"
        "assert 'pydoc_data.topics' not in sys.modules, 'the topics module stayed imported'\n"
        "from pydoc_data.topics import topics\n"
        "assert text == '\\n'.join(topics[k] for k in sorted(topics))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_read_text_rejects_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        data.read_text(str(tmp_path / "missing.txt"))
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        data.read_text(str(empty))
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02abc")
    with pytest.raises(ValueError, match="binary"):
        data.read_text(str(binary))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ValueError, match="UTF-8"):
        data.read_text(str(latin))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n")
    with pytest.raises(ValueError, match="no words"):
        data.read_words(str(blank))


def test_split_is_deterministic():
    a = data.split(range(100), 0.2, seed=3)
    b = data.split(range(100), 0.2, seed=3)
    assert a == b and len(a[1]) == 20 and sorted(a[0] + a[1]) == list(range(100))
