"""The burtorch node-range file format: a small fixed header, an optional name table, a raw payload.

Layout, byte by byte (all header integers little-endian)::

    offset size  field
    0      4     magic            b"BURT"
    4      2     version          uint16, currently 1
    6      1     dtype            uint8: 1 = float32, 2 = float64, 3 = bfloat16, 4 = float16 (2 bytes each)
    7      1     what             uint8: 1 = values, 2 = grads, 3 = both (values block, then grads block)
    8      1     flags            uint8: bit 0 = a name table follows the fixed header; other bits 0
    9      1     byteorder        uint8: 0 = little-endian payload, 1 = big-endian payload
    10     2     reserved         uint16, must be 0
    12     4     header_size      uint32: offset of the payload from the start of the file
                                  (40 without a name table, 40 + table size with one)
    16     8     count            uint64: number of nodes saved
    24     8     payload_bytes    uint64: count * itemsize * (2 if what is both else 1)
    32     4     payload_crc32    uint32: zlib.crc32 of the payload
    36     4     header_crc32     uint32: zlib.crc32 of bytes [0, 36) followed by the name table
    40     ...   name table       only if flags bit 0 (state dicts):
                                    uint32 number of entries, then per entry
                                    uint16 name length, the name in UTF-8, uint64 node count
    header_size  payload          payload_bytes raw numbers in the stated byte order: IEEE-754
                                  binary32/64/16, bfloat16 as the upper 16 bits of a binary32

The payload of a node range is exactly the arena's contiguous memory for those nodes, so saving
is one copy out and loading is one copy in. Every field is checked on load, and both CRCs, before
a single byte reaches an arena; any failure raises :class:`FormatError` saying which check failed.
"""
from __future__ import annotations

import array
import operator
import struct
import sys
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

MAGIC = b"BURT"
VERSION = 1
FIXED_HEADER = struct.Struct("<4sHBBBBHIQQII")
FIXED_SIZE = FIXED_HEADER.size  # 40
_CRC_SPAN = 36  # the header CRC covers the fixed header up to (not including) itself

DTYPE_CODES = {"float32": 1, "float64": 2, "bfloat16": 3, "float16": 4}
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
ITEMSIZE = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
WHAT_CODES = {"values": 1, "grads": 2, "both": 3}
WHAT_NAMES = {code: name for name, code in WHAT_CODES.items()}
FLAG_NAME_TABLE = 1
NATIVE_BYTEORDER = 0 if sys.byteorder == "little" else 1

_ENTRY_HEAD = struct.Struct("<H")
_ENTRY_COUNT = struct.Struct("<Q")
_TABLE_LEN = struct.Struct("<I")


class FormatError(ValueError):
    """A burtorch file or byte string is not what the caller asked to load (or not one at all)."""


class Header:
    """The decoded fixed header (and name table, if any) of a burtorch file."""

    __slots__ = ("dtype", "what", "count", "payload_bytes", "payload_crc", "header_size",
                 "byteorder", "names")

    def __init__(self, dtype: str, what: str, count: int, payload_bytes: int, payload_crc: int, header_size: int,
                 byteorder: int, names: list[tuple[str, int]] | None) -> None:
        self.dtype = dtype
        self.what = what
        self.count = count
        self.payload_bytes = payload_bytes
        self.payload_crc = payload_crc
        self.header_size = header_size
        self.byteorder = byteorder
        self.names = names  # list of (name, count) or None

    def __repr__(self) -> str:
        return (f"Header(dtype={self.dtype}, what={self.what}, count={self.count}, "
                f"payload_bytes={self.payload_bytes}, names={self.names is not None})")


def check_what(what: str) -> str:
    if what not in WHAT_CODES:
        raise ValueError(f"what must be 'values', 'grads' or 'both', got {what!r}")
    return what


def payload_size(dtype: str, what: str, count: int) -> int:
    return count * ITEMSIZE[dtype] * (2 if what == "both" else 1)


def encode_name_table(entries: Sequence[tuple[str, int]]) -> bytes:
    """``entries``: (name, count) pairs, in payload order."""
    parts = [_TABLE_LEN.pack(len(entries))]
    for name, count in entries:
        raw = name.encode("utf-8")
        if len(raw) > 0xFFFF:
            raise ValueError(f"name {name[:40]!r}... is longer than 65535 UTF-8 bytes")
        parts += (_ENTRY_HEAD.pack(len(raw)), raw, _ENTRY_COUNT.pack(count))
    return b"".join(parts)


def encode_header(dtype: str, what: str, count: int, payload: ReadableBuffer, table: bytes = b"") -> bytes:
    """The header bytes that go before ``payload`` (any bytes-like object)."""
    size = len(payload) if isinstance(payload, (bytes, bytearray)) else memoryview(payload).nbytes
    fixed = FIXED_HEADER.pack(MAGIC, VERSION, DTYPE_CODES[dtype], WHAT_CODES[what],
                              FLAG_NAME_TABLE if table else 0, NATIVE_BYTEORDER, 0,
                              FIXED_SIZE + len(table), count, size, zlib.crc32(payload), 0)
    header_crc = zlib.crc32(table, zlib.crc32(fixed[:_CRC_SPAN]))
    return fixed[:_CRC_SPAN] + header_crc.to_bytes(4, "little") + table


def decode_header(buf: ReadableBuffer, total_size: int) -> Header:
    """Parses and checks the header at the start of ``buf`` (bytes-like; may be longer).

    ``total_size`` is the size of the whole file or byte string, so a truncated payload or trailing
    garbage is caught here. The payload CRC is checked separately (:func:`check_payload`).
    """
    try:
        total_size = operator.index(total_size)  # a float or a Decimal is no size in bytes
    except TypeError:
        raise TypeError(f"total_size must be an int (bytes), not {type(total_size).__name__}") from None
    if total_size < 0:
        raise ValueError(f"total_size must be at least 0 bytes, not {total_size}")
    mv = memoryview(buf)
    if total_size < FIXED_SIZE or len(mv) < FIXED_SIZE:
        head = bytes(mv[:4])
        if head and MAGIC.startswith(head):
            raise FormatError(f"truncated burtorch file: {total_size} bytes is shorter than the "
                              f"{FIXED_SIZE}-byte header")
        raise FormatError(f"not a burtorch file: {total_size} bytes without the {MAGIC!r} magic")
    (magic, version, dtype_code, what_code, flags, byteorder, reserved, header_size, count,
     payload_bytes, payload_crc, header_crc) = FIXED_HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        raise FormatError(f"not a burtorch file: starts with {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise FormatError(f"unsupported burtorch format version {version} (this reader knows {VERSION})")
    if dtype_code not in DTYPE_NAMES:
        raise FormatError(f"corrupt header: unknown dtype code {dtype_code}")
    if what_code not in WHAT_NAMES:
        raise FormatError(f"corrupt header: unknown 'what' code {what_code}")
    if flags & ~FLAG_NAME_TABLE or reserved != 0 or byteorder > 1:
        raise FormatError(f"corrupt header: unknown flags {flags:#x}, byte order {byteorder} "
                          f"or reserved {reserved:#x}")
    has_table = bool(flags & FLAG_NAME_TABLE)
    if header_size < FIXED_SIZE or (not has_table and header_size != FIXED_SIZE):
        raise FormatError(f"corrupt header: header size {header_size}")
    if header_size > total_size or header_size > len(mv):
        raise FormatError(f"truncated burtorch file: header of {header_size} bytes, "
                          f"file of {total_size} bytes")
    table = mv[FIXED_SIZE:header_size]
    if zlib.crc32(table, zlib.crc32(mv[:_CRC_SPAN])) != header_crc:
        raise FormatError("corrupt header: header checksum mismatch")
    dtype = DTYPE_NAMES[dtype_code]
    what = WHAT_NAMES[what_code]
    expected = payload_size(dtype, what, count)
    if payload_bytes != expected:
        raise FormatError(f"corrupt header: {payload_bytes} payload bytes for {count} {dtype} "
                          f"{what} (expected {expected})")
    actual = total_size - header_size
    if actual < payload_bytes:
        raise FormatError(f"truncated burtorch file: payload has {actual} of {payload_bytes} bytes")
    if actual > payload_bytes:
        raise FormatError(f"corrupt burtorch file: {actual - payload_bytes} bytes after the payload")
    names = _decode_name_table(table, count) if has_table else None
    return Header(dtype, what, count, payload_bytes, payload_crc, header_size, byteorder, names)


def declared_size(head: ReadableBuffer) -> int:
    """The file size the fixed header ``head`` declares (header, name table and payload).

    Checks the magic and version first, so that a file that is not burtorch's says so.
    """
    (magic, version, _, _, _, _, _, header_size, _, payload_bytes, _, _) = FIXED_HEADER.unpack_from(head, 0)
    if magic != MAGIC:
        raise FormatError(f"not a burtorch file: starts with {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise FormatError(f"unsupported burtorch format version {version} (this reader knows {VERSION})")
    if header_size < FIXED_SIZE:
        raise FormatError(f"corrupt header: header size {header_size}")
    return header_size + payload_bytes


def read_declared(read: Callable[[int], bytes], size: int | None = None, limit: int | None = None) -> bytes:
    """Reads one burtorch file through ``read(n)``, never past what its header declares.

    Args:
        read: returns up to n bytes, fewer only at the end (``os.read`` on a descriptor, a binary
            file's ``read``).
        size: the file's size when known (a regular file): checked against the header before the
            payload is read.
        limit: the most bytes the caller can use (e.g. what fits its targets).

    Raises:
        FormatError: not a burtorch file, or its size disagrees with its header or the limit.
    """
    # The fixed header first, whatever the size: a file that is not burtorch's (or declares
    # another size) is refused after reading those bytes, not the whole file.
    head = _read_n(read, FIXED_SIZE)
    if len(head) < FIXED_SIZE:
        decode_header(head, len(head))  # raises: truncated, or not a burtorch file
    total = declared_size(head)
    if size is not None and size != total:
        _raise_size_mismatch(size, total)
    if limit is not None and total > limit:
        raise FormatError(f"the file declares {total:,} bytes; at most {limit:,} can match the targets")
    data = head + _read_n(read, total - FIXED_SIZE + 1)  # one byte more shows trailing data
    if len(data) != total:
        _raise_size_mismatch(len(data), total)
    return data


def _raise_size_mismatch(actual: int, declared: int) -> NoReturn:
    if actual < declared:
        raise FormatError(f"truncated burtorch file: {actual:,} bytes, the header declares {declared:,}")
    raise FormatError(f"corrupt burtorch file: bytes after the payload (the header declares {declared:,})")


def _read_n(read: Callable[[int], bytes], n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining > 0:
        chunk = read(min(remaining, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _decode_name_table(table: memoryview, count: int) -> list[tuple[str, int]]:
    try:
        (n,) = _TABLE_LEN.unpack_from(table, 0)
        pos = _TABLE_LEN.size
        entries = []
        total = 0
        for _ in range(n):
            (length,) = _ENTRY_HEAD.unpack_from(table, pos)
            pos += _ENTRY_HEAD.size
            if pos + length > len(table):
                raise FormatError("corrupt name table: a name runs past the table")
            name = bytes(table[pos:pos + length]).decode("utf-8")
            pos += length
            (c,) = _ENTRY_COUNT.unpack_from(table, pos)
            pos += _ENTRY_COUNT.size
            entries.append((name, c))
            total += c
    except (struct.error, UnicodeDecodeError) as e:
        raise FormatError(f"corrupt name table: {e}") from None
    if pos != len(table):
        raise FormatError(f"corrupt name table: {len(table) - pos} stray bytes")
    if total != count:
        raise FormatError(f"corrupt name table: entries hold {total} nodes, header says {count}")
    if len({name for name, _ in entries}) != len(entries):
        raise FormatError("corrupt name table: duplicate names")
    return entries


def check_payload(header: Header, payload: ReadableBuffer) -> None:
    if zlib.crc32(payload) != header.payload_crc:
        raise FormatError("corrupt burtorch file: payload checksum mismatch")


def numbers_from_bytes(dtype: str, block: ReadableBuffer, byteorder: int) -> array.array[float]:
    """The numbers of a payload block of ``dtype`` stored in ``byteorder``, as an array: float32
    and float64 as stored, bfloat16 and float16 widened (exactly) to float32."""
    if dtype in ("float32", "float64"):
        arr = array.array("f" if dtype == "float32" else "d")
        arr.frombytes(block)
        if byteorder != NATIVE_BYTEORDER:
            arr.byteswap()
        return arr
    bits = array.array("H")
    bits.frombytes(block)
    if byteorder != NATIVE_BYTEORDER:
        bits.byteswap()
    if dtype == "float16":
        return array.array("f", struct.unpack(f"={len(bits)}e", bits.tobytes()))
    # bfloat16 is the upper half of a float32
    return array.array("f", array.array(_U32, [b << 16 for b in bits]).tobytes())


def numbers_to_bytes(dtype: str, numbers: Sequence[float]) -> bytes:
    """Numbers of ``dtype`` (each exactly representable in it) as a native-order payload block."""
    if dtype in ("float32", "float64"):
        return array.array("f" if dtype == "float32" else "d", numbers).tobytes()
    if dtype == "float16":
        return struct.pack(f"={len(numbers)}e", *numbers)
    wide = array.array(_U32, array.array("f", numbers).tobytes())
    return array.array("H", [u >> 16 for u in wide]).tobytes()


_U32 = "I" if array.array("I").itemsize == 4 else "L"
