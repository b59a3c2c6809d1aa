"""atheris (libFuzzer) harness for burtorch.io.loads; scripts/sanitize.sh runs it (not pytest).

Every input must either load (only possible for a valid file) or raise FormatError, and a
rejected input must leave the arena byte-for-byte unchanged. Unless a corpus directory is
given (or it is empty), the fuzzer starts from a valid file of each kind (values, grads, both).

    pip install atheris
    python fuzz/fuzz_loads.py -max_total_time=60          (any libFuzzer flags)
    python fuzz/fuzz_loads.py --replay CORPUS_DIR         (each input once, no libFuzzer)
"""
import os
import sys
import tempfile

import atheris

import burtorch as bt
import burtorch.io as bio
from burtorch.io import FormatError

ARENA = bt.Arena(bt.float64)
with ARENA:
    VALUES = [bt.Value(i / 3.0) for i in range(5)]
TARGET = (ARENA, 0, 5)
SEEDS = [bio.dumps(TARGET, what) for what in ("values", "grads", "both")]


def snapshot():
    return ARENA.read_bytes(0, 5, "values") + ARENA.read_bytes(0, 5, "grads")


def test_one_input(data: bytes) -> None:
    before = snapshot()
    try:
        bio.loads(data, TARGET, None)
    except FormatError:
        if snapshot() != before:
            raise AssertionError("a rejected input changed the arena")
        return
    if data not in SEEDS and bio.dumps(TARGET, bio.decode_header(data, len(data)).what) != data:
        raise AssertionError("an input that is not a valid file was accepted")


def replay(corpus: str) -> None:
    """Runs every input of a corpus once, without libFuzzer (e.g. through a sanitized build)."""
    names = sorted(os.listdir(corpus))
    for name in names:
        with open(os.path.join(corpus, name), "rb") as f:
            test_one_input(f.read())
    print(f"replayed {len(names)} inputs from {corpus}: all rejected cleanly or loaded")


def main() -> None:
    for seed in SEEDS:
        test_one_input(seed)
    if sys.argv[1:2] == ["--replay"]:
        replay(sys.argv[2])
        return
    # Everything loaded so far, burtorch included, reports coverage. (instrument_imports() misses
    # modules that an import hook of its own loads, such as those of an editable install.)
    atheris.instrument_all()
    argv = list(sys.argv)
    corpora = [a for a in argv[1:] if os.path.isdir(a)]
    if not corpora:
        corpora = [tempfile.mkdtemp(prefix="burtorch-fuzz-")]
        argv.append(corpora[0])
    for corpus in corpora:  # start from valid files, not from nothing
        if not os.listdir(corpus):
            for i, seed in enumerate(SEEDS):
                with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
                    f.write(seed)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
