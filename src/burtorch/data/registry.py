"""Data sets by name: where each comes from, under which licence, and its checksum.

``fetch("names")`` returns the path of the cached file, downloading it once into the cache
directory (``$BURTORCH_DATA``, else the platform's user cache) and verifying its checksum. A
download is written to a temporary file beside its destination and renamed into place only once
its size and checksum are right, so an interrupted or corrupt transfer never leaves a file that a
later run could take for the data set. An offline user places the file in the cache directory by
hand; the error raised without network says which file, from where, and where to put it.
"""
from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .locate import ENV_VAR

# A mirror (an HTTP directory holding the files under their registry names) replacing every
# source URL: for an institution's mirror, and for the tests, which serve the files locally.
MIRROR_ENV_VAR = "BURTORCH_DATA_MIRROR"
_TIMEOUT = 30.0
_CHUNK = 1 << 16


@dataclass(frozen=True)
class DataSet:
    """One registered data set.

    Attributes:
        name: the name given to ``fetch``, ``--data`` and ``burtorch data get``.
        filename: the file's name in the cache directory.
        url: where it is downloaded from.
        sha256: its SHA-256, or None when no checksum could be computed for it (unverified sets
            are downloaded only on request, and their digest is then reported, not checked).
        size: its size in bytes, or None when unknown.
        licence: the licence the source publishes it under.
        description: what it is and which of the paper's workloads use it.
        md5: an MD5 published for the file elsewhere, checked when no SHA-256 is recorded (a set
            whose source publishes no checksum, and which could not be fetched where this
            registry was written).
        checksum_source: where ``md5`` was published, so that a user knows whose word it is.
    """

    name: str
    filename: str
    url: str
    sha256: str | None
    size: int | None
    licence: str
    description: str
    md5: str | None = None
    checksum_source: str = ""

    @property
    def verified(self) -> bool:
        return self.sha256 is not None or self.md5 is not None


DATASETS: dict[str, DataSet] = {d.name: d for d in (
    DataSet("names", "names.txt",
            "https://raw.githubusercontent.com/karpathy/makemore/master/names.txt",
            "0a30b5557f192f32ab962680889aac5f6fda0f4cecf40a6d0b5694f58ea8cc4d", 228145,
            "MIT (Copyright (c) 2022 Andrej Karpathy, karpathy/makemore)",
            "32,033 first names, one per line: the paper's W4 (the makemore MLP)"),
    DataSet("tinyshakespeare", "tinyshakespeare.txt",
            "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", 1115394,
            "MIT (karpathy/char-rnn); the text is Shakespeare's, in the public domain",
            "1,115,394 characters of Shakespeare, 65 distinct: the paper's W5 (the mini GPT)"),
    # The LibSVM sets of the federated guide. The LibSVM page publishes no checksums and no copy
    # could be fetched where this registry was written: a set with no MD5 published by a third
    # party downloads only with ``unverified=True``.
    DataSet("a9a", "a9a", "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/a9a",
            None, None, "LibSVM data sets page (UCI Adult, Kohavi 1996); cite as the page asks",
            "UCI Adult, 32,561 samples, 123 binary features: federated logistic regression"),
    DataSet("w8a", "w8a", "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/w8a",
            None, None, "LibSVM data sets page (Platt 1998); cite as the page asks",
            "49,749 web pages, 300 binary features: federated logistic regression"),
    DataSet("rcv1", "rcv1_train.binary.bz2",
            "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/rcv1_train.binary.bz2",
            None, None, "LibSVM data sets page (RCV1-v2, Lewis et al. 2004); cite as the page asks",
            "rcv1.binary's training part, 20,242 documents x 47,236 features (sparse, bzip2): "
            "the EF21 reproduction", md5="1aeda848408e621468c0fe6944d9382f",
            checksum_source="the MD5 in the LibSVM loader of github.com/epfml/pax "
                            "(pax/tasks/datasets/libsvm.py); not verified against the file here"),
)}


class DataUnavailableError(FileNotFoundError):
    """A registered data set is neither cached nor downloadable (offline, or its server failed)."""


class ChecksumError(ValueError):
    """A file's SHA-256 (or MD5, or size) is not the registered one."""


def cache_dir() -> Path:
    """Where data sets are kept: ``$BURTORCH_DATA``, else the platform's user cache directory.

    Linux and other Unix: ``$XDG_CACHE_HOME/burtorch`` (default ``~/.cache/burtorch``); macOS:
    ``~/Library/Caches/burtorch``; Windows: ``%LOCALAPPDATA%\\burtorch\\Cache``.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    home = Path.home()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA")
        return (Path(base) if base else home / "AppData" / "Local") / "burtorch" / "Cache"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "burtorch"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else home / ".cache") / "burtorch"


def dataset(name: str) -> DataSet:
    """The registered data set ``name``; ValueError naming the known ones otherwise."""
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"no data set named {name!r}; known: {', '.join(sorted(DATASETS))}") from None


def source_url(ds: DataSet) -> str:
    """The URL ``ds`` is downloaded from: the mirror's copy when ``$BURTORCH_DATA_MIRROR`` is set."""
    mirror = os.environ.get(MIRROR_ENV_VAR)
    return f"{mirror.rstrip('/')}/{ds.filename}" if mirror else ds.url


class _Digests:
    """SHA-256 and MD5 of a byte stream fed in chunks, and its size."""

    def __init__(self) -> None:
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        self.md5.update(chunk)
        self.size += len(chunk)


def _digest(path: Path) -> _Digests:
    d = _Digests()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            d.update(chunk)
    return d


def _check(ds: DataSet, d: _Digests, what: str) -> None:
    if ds.size is not None and d.size != ds.size:
        raise ChecksumError(f"{what} has {d.size} bytes; {ds.name}'s {ds.filename} has {ds.size}")
    if ds.sha256 is not None and d.sha256.hexdigest() != ds.sha256:
        raise ChecksumError(f"{what} has SHA-256 {d.sha256.hexdigest()}; {ds.name}'s {ds.filename} "
                            f"has {ds.sha256}")
    if ds.sha256 is None and ds.md5 is not None and d.md5.hexdigest() != ds.md5:
        raise ChecksumError(f"{what} has MD5 {d.md5.hexdigest()}; {ds.name}'s {ds.filename} has "
                            f"{ds.md5} ({ds.checksum_source}); fetch it with unverified=True "
                            f"(--unverified) if you trust the file")


def _offline_message(ds: DataSet, url: str, dest: Path, reason: str) -> str:
    return (f"data set {ds.name!r} is not cached and could not be downloaded ({reason}).\n"
            f"  file:   {ds.filename}\n  source: {url}\n  put it: {dest}\n"
            f"(or set ${ENV_VAR} to a directory holding {ds.filename})")


def _download(ds: DataSet, url: str, dest: Path, unverified: bool = False) -> None:
    """Downloads ``url`` into ``dest`` atomically: a temporary file, verified, then renamed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{ds.filename}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        d = _Digests()
        limit = ds.size if ds.size is not None else 1 << 31
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=_TIMEOUT) as response:
                    announced = response.headers.get("Content-Length")
                    while chunk := response.read(_CHUNK):
                        if d.size + len(chunk) > limit:
                            raise ChecksumError(f"the download of {url} exceeds {ds.filename}'s {limit} bytes")
                        d.update(chunk)
                        out.write(chunk)
                # A connection closed early can end the body without an error from urllib.
                if announced is not None and announced.isdigit() and d.size < int(announced):
                    raise DataUnavailableError(_offline_message(
                        ds, url, dest, f"the transfer ended after {d.size} of {announced} bytes"))
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                if isinstance(e, (ChecksumError, DataUnavailableError)):
                    raise
                reason = getattr(e, "reason", None) or e
                raise DataUnavailableError(_offline_message(ds, url, dest, str(reason))) from None
            out.flush()
            os.fsync(out.fileno())
        if not (unverified and ds.sha256 is None):
            _check(ds, d, f"the download of {url}")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fetch(name: str, *, download: bool = True, unverified: bool = False) -> Path:
    """The path of data set ``name`` in :func:`cache_dir`, downloaded and verified if need be.

    Args:
        name: a key of :data:`DATASETS` (``"names"``, ``"tinyshakespeare"``, ...).
        download: when False, never use the network (an uncached set raises DataUnavailableError).
        unverified: allow a set with no recorded checksum, or whose file does not match an MD5
            published by a third party (its digests are printed to stderr).

    Returns:
        The cached file's path.

    Raises:
        ValueError: an unknown name, or an unverified set without ``unverified=True``.
        ChecksumError: the cached or downloaded file is not the registered one (a download that
            fails the check is deleted; a cached file is left for the user to inspect).
        DataUnavailableError: not cached and not downloadable; the message names the file, its
            source and where to put it.
    """
    ds = dataset(name)
    if not ds.verified and not unverified:
        raise ValueError(f"data set {name!r} has no recorded checksum; fetch it with unverified=True "
                         f"(burtorch data get {name} --unverified) if you trust {ds.url}")
    dest = cache_dir() / ds.filename
    url = source_url(ds)
    if not dest.is_file():
        if not download:
            raise DataUnavailableError(_offline_message(ds, url, dest, "downloads disabled"))
        _download(ds, url, dest, unverified)
    d = _digest(dest)
    if unverified and ds.sha256 is None:
        print(f"burtorch: {dest} (unverified) has SHA-256 {d.sha256.hexdigest()}, MD5 "
              f"{d.md5.hexdigest()}", file=sys.stderr)
    else:
        _check(ds, d, str(dest))
    return dest


def resolve(data: str | os.PathLike | None) -> str | os.PathLike | None:
    """``data`` as a ``--data`` option means it: an existing path stays a path; a registered
    data set's name (with no such file here) becomes its cached file, fetched if need be."""
    if data is None or os.path.exists(data) or os.fspath(data) not in DATASETS:
        return data
    return str(fetch(os.fspath(data)))
