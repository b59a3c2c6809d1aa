"""atheris (libFuzzer) harness for every loader of untrusted bytes; not part of the test suite.

The first byte of an input picks the loader, the rest is the file:

* 0: ``burtorch.io.loads`` of a node-range file into 5 nodes;
* 1: ``burtorch.io.load_state_dict_bytes`` of a state dict, into a mapping and into nothing;
* 2: a training checkpoint: ``burtorch.cli.checkpoint.decode``, then the checks ``burtorch train
  --resume`` applies to its metadata;
* 3: the same with the input as the checkpoint's metadata behind a valid checksum (a fuzzer cannot
  forge SHA-256, so this is how the metadata checks themselves get explored).

A loader may accept its input or reject it with its own error (FormatError, CheckpointError, the
training command's UsageError); any other exception, a crash or a hang is a bug. A rejected input
must leave the arena byte-for-byte unchanged, and an accepted range file must be a valid one.
Unless a corpus directory is given, the fuzzer starts from valid files of each kind.

    pip install atheris
    python fuzz/fuzz_loads.py -max_total_time=60          (any libFuzzer flags)
    python fuzz/fuzz_loads.py --replay CORPUS_DIR         (each input once, no libFuzzer)
"""
import hashlib
import json
import os
import sys
import tempfile

import atheris

import burtorch as bt
import burtorch.io as bio
from burtorch.cli import checkpoint
from burtorch.cli.train import UsageError, _check_meta
from burtorch.io import FormatError

ARENA = bt.Arena(bt.float64)
with ARENA:
    VALUES = [bt.Value(i / 3.0) for i in range(5)]
TARGET = (ARENA, 0, 5)
STATE = {"w": (ARENA, 0, 3), "b": (ARENA, 3, 5)}
RANGE_SEEDS = [bio.dumps(TARGET, what) for what in ("values", "grads", "both")]
STATE_SEED = bio.state_dict_bytes(STATE)
CHECKPOINT_SEED = checkpoint.encode({
    "format": "burtorch-train-1", "model": "mlp",
    "run": {"preset": "tiny", "hidden": None, "dtype": "float64", "optimizer": "sgd", "lr": 0.1, "batch": 2,
            "chunk": 1, "seed": 1, "eval_every": 1, "eval_samples": 2},
    "config": {"block": 4, "emb": 8, "hidden": 16}, "itos": [".", "a", "b"], "steps": 2, "step": 1,
    "rng": [3, [1, 2, 625], None], "data": {"path": None, "sha256": "0"},
    "history": {"steps": [1], "train_loss": [1.0], "val_steps": [1], "val_loss": [1.0]},
    "optimizer_steps": 1}, STATE_SEED, [0.0, 1.0])


def snapshot():
    return ARENA.read_bytes(0, 5, "values") + ARENA.read_bytes(0, 5, "grads")


def load_range(data: bytes) -> None:
    before = snapshot()
    try:
        bio.loads(data, TARGET, None)
    except FormatError:
        if snapshot() != before:
            raise AssertionError("a rejected range file changed the arena") from None
        return
    if data not in RANGE_SEEDS and bio.dumps(TARGET, bio.decode_header(data, len(data)).what) != data:
        raise AssertionError("an input that is not a valid range file was accepted")


def load_state(data: bytes) -> None:
    before = snapshot()
    try:
        bio.load_state_dict_bytes(data)
        bio.load_state_dict_bytes(data, STATE)
    except FormatError:
        if snapshot() != before:
            raise AssertionError("a rejected state dict changed the arena") from None


def load_checkpoint(data: bytes) -> None:
    try:
        ckpt = checkpoint.decode(data)
        _check_meta(ckpt.meta, "fuzz.ckpt")
    except (checkpoint.CheckpointError, UsageError):
        pass


def load_sealed_metadata(data: bytes) -> None:
    head = checkpoint._HEAD.pack(checkpoint.MAGIC, len(data), len(STATE_SEED), 16)
    body = data + STATE_SEED + bytes(16)
    load_checkpoint(head + hashlib.sha256(head + body).digest() + body)


LOADERS = (load_range, load_state, load_checkpoint, load_sealed_metadata)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    LOADERS[data[0] % len(LOADERS)](data[1:])


def seeds() -> list:
    meta = checkpoint.decode(CHECKPOINT_SEED).meta
    return ([bytes([0]) + s for s in RANGE_SEEDS] + [bytes([1]) + STATE_SEED, bytes([2]) + CHECKPOINT_SEED]
            + [bytes([3]) + json.dumps(meta).encode()])


def replay(corpus: str) -> None:
    """Runs every input of a corpus once, without libFuzzer (e.g. through a sanitized build)."""
    names = sorted(os.listdir(corpus))
    for name in names:
        with open(os.path.join(corpus, name), "rb") as f:
            test_one_input(f.read())
    print(f"replayed {len(names)} inputs from {corpus}: all rejected cleanly or loaded")


def main() -> None:
    for seed in seeds():
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
            for i, seed in enumerate(seeds()):
                with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
                    f.write(seed)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
