"""A training checkpoint: ONE file, checksummed, holding everything a resumed run needs.

Layout (integers little-endian)::

    offset size  field
    0      8     magic          b"BTCKPT\\x00\\x01"
    8      8     meta_bytes     uint64: length of the JSON metadata (run config, step, rng
                                state, vocabulary, history, optimizer step count)
    16     8     model_bytes    uint64: length of the model's state dict (burtorch.io format,
                                itself checked by its own CRCs)
    24     8     optim_bytes    uint64: length of the optimizer buffers (float64, little-endian)
    32     32    sha256         of bytes [0, 32) followed by everything from offset 64
    64     ...   metadata, model state dict, optimizer buffers

A file is read only when it is a regular file whose size is exactly what its header declares,
and used only when the checksum matches: a truncated, edited or corrupted file is refused as a
whole. It is written through :func:`burtorch.io.atomic.write_atomic` (fsync, then rename), so a
crash mid-save leaves the previous checkpoint.
"""
from __future__ import annotations

import json
import os
import struct
import sys
from array import array

from ..io.atomic import write_atomic
from ..io.regular_file import open_regular, read_up_to
from .digest import sha256

MAGIC = b"BTCKPT\x00\x01"
_HEAD = struct.Struct("<8sQQQ")
HEADER_SIZE = _HEAD.size + 32  # 64
MAX_META_BYTES = 256 << 20  # a run's history of floats, generously; larger means a corrupt size


class CheckpointError(ValueError):
    """A checkpoint file that is not one, is damaged, or does not fit the run resuming from it."""


class Checkpoint:
    """The verified content of a checkpoint file.

    Attributes:
        meta: the JSON metadata (a dict).
        model_state: the model's state dict in burtorch.io's format (bytes).
        optimizer_buffers: the optimizer's buffers (an ``array('d')``).
    """

    __slots__ = ("meta", "model_state", "optimizer_buffers")

    def __init__(self, meta: dict, model_state: bytes, optimizer_buffers):
        self.meta = meta
        self.model_state = model_state
        self.optimizer_buffers = optimizer_buffers


def encode(meta: dict, model_state: bytes, optimizer_buffers) -> bytes:
    """The bytes of a checkpoint file (see the module docstring for the layout)."""
    meta_raw = json.dumps(meta, separators=(",", ":"), allow_nan=True).encode("utf-8")
    buffers = array("d", optimizer_buffers)
    if sys.byteorder != "little":
        buffers.byteswap()
    optim_raw = buffers.tobytes()
    head = _HEAD.pack(MAGIC, len(meta_raw), len(model_state), len(optim_raw))
    digest = sha256(head)
    for part in (meta_raw, model_state, optim_raw):
        digest.update(part)
    return b"".join((head, digest.digest(), meta_raw, model_state, optim_raw))


def save(path, meta: dict, model_state: bytes, optimizer_buffers) -> None:
    """Writes a checkpoint file atomically and durably (the old file survives any crash)."""
    write_atomic(os.fspath(path), (encode(meta, model_state, optimizer_buffers),), durable=True)


def decode(data) -> Checkpoint:
    """Verifies and splits the bytes of a checkpoint file.

    Raises:
        CheckpointError: not a checkpoint, truncated, trailing bytes, checksum mismatch, or
            metadata that is not a JSON object.
    """
    data = memoryview(data).cast("B")
    if len(data) < HEADER_SIZE:
        raise CheckpointError(f"not a burtorch checkpoint: {len(data)} bytes is shorter than its header")
    magic, meta_n, model_n, optim_n = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise CheckpointError(f"not a burtorch checkpoint (starts with {bytes(magic[:8])!r})")
    _check_sizes(meta_n, model_n, optim_n, len(data))
    digest = sha256(data[:_HEAD.size])
    digest.update(data[HEADER_SIZE:])
    if digest.digest() != bytes(data[_HEAD.size:HEADER_SIZE]):
        raise CheckpointError("corrupt checkpoint: checksum mismatch (the file was damaged or edited)")
    pos = HEADER_SIZE
    meta_raw = bytes(data[pos:pos + meta_n])
    pos += meta_n
    model_state = bytes(data[pos:pos + model_n])
    pos += model_n
    buffers = array("d")
    buffers.frombytes(data[pos:pos + optim_n])
    if sys.byteorder != "little":
        buffers.byteswap()
    try:
        meta = json.loads(meta_raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"corrupt checkpoint metadata: {e}") from None
    if not isinstance(meta, dict):
        raise CheckpointError("corrupt checkpoint metadata: not a JSON object")
    return Checkpoint(meta, model_state, buffers)


def load(path) -> Checkpoint:
    """Reads and verifies a checkpoint file, never reading past what its header declares.

    Raises:
        FileNotFoundError: no such file.
        NotRegularFileError: a directory, FIFO, device or socket.
        CheckpointError: as :func:`decode`, or a size that disagrees with the header.
    """
    fd, size = open_regular(path)
    try:
        head = read_up_to(fd, _HEAD.size)
        if len(head) < _HEAD.size:
            raise CheckpointError(f"not a burtorch checkpoint: {os.fspath(path)} is {size} bytes")
        magic, meta_n, model_n, optim_n = _HEAD.unpack(head)
        if magic != MAGIC:
            raise CheckpointError(f"{os.fspath(path)} is not a burtorch checkpoint "
                                  f"(starts with {magic!r})")
        _check_sizes(meta_n, model_n, optim_n, size)
        data = head + read_up_to(fd, size - len(head) + 1)  # one more byte: did it grow?
    finally:
        os.close(fd)
    if len(data) != size:
        raise CheckpointError(f"{os.fspath(path)} changed while being read")
    return decode(data)


def _check_sizes(meta_n: int, model_n: int, optim_n: int, size: int) -> None:
    if meta_n > MAX_META_BYTES or optim_n % 8:
        raise CheckpointError(f"corrupt checkpoint header: sizes {meta_n}, {model_n}, {optim_n}")
    declared = HEADER_SIZE + meta_n + model_n + optim_n
    if declared != size:
        what = "truncated" if size < declared else "corrupt (bytes after the end)"
        raise CheckpointError(f"{what} checkpoint: {size:,} bytes, the header declares {declared:,}")
