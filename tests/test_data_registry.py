"""Data sets by name: downloaded once from a local HTTP server (never the network), verified, and
never left half-written: a truncated body, a wrong checksum, an interrupted transfer and a dead
server all leave the cache as it was; offline, the error names the file, its source and its place."""
import hashlib
import http.server
import threading
import urllib.request

import pytest

from burtorch.cli.main import main
from burtorch.data import registry

PAYLOAD = ("".join(f"word{i}\n" for i in range(5000))).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    # The server's behaviour for every request, set by the test: "ok", "short" (a shorter body,
    # honestly announced), "truncated" (the full length announced, half sent, connection closed),
    # "corrupt" (the right size, one byte changed), "missing" (404).
    mode = "ok"
    files: dict = {}
    requests = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).requests += 1
        body = self.files.get(self.path.rsplit("/", 1)[-1])
        if body is None or self.mode == "missing":
            self.send_error(404)
            return
        if self.mode == "corrupt":
            body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
        sent = body[: len(body) // 2] if self.mode in ("short", "truncated") else body
        self.send_response(200)
        self.send_header("Content-Length", str(len(body) if self.mode == "truncated" else len(sent)))
        self.end_headers()
        self.wfile.write(sent)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Handler.mode, _Handler.files, _Handler.requests = "ok", {"toy.txt": PAYLOAD}, 0
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield _Handler, f"http://127.0.0.1:{httpd.server_address[1]}/mirror"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def toy(monkeypatch, tmp_path, server):
    """A registered set ``toy`` served by the local server, cached under tmp_path/cache."""
    handler, base = server
    ds = registry.DataSet("toy", "toy.txt", "https://example.invalid/toy.txt",
                          hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD), "test", "a test set")
    monkeypatch.setitem(registry.DATASETS, "toy", ds)
    monkeypatch.setenv("BURTORCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("BURTORCH_DATA_MIRROR", base)
    return handler, tmp_path / "cache"


def _cache_files(cache):
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_fetch_downloads_once_and_verifies(toy):
    handler, cache = toy
    path = registry.fetch("toy")
    assert path == cache / "toy.txt" and path.read_bytes() == PAYLOAD
    assert registry.fetch("toy") == path and handler.requests == 1  # cached: no second request
    assert registry.resolve("toy") == str(path)


@pytest.mark.parametrize("mode", ["short", "truncated", "corrupt", "missing"])
def test_a_bad_transfer_leaves_no_file(toy, mode):
    handler, cache = toy
    handler.mode = mode
    error = registry.DataUnavailableError if mode in ("truncated", "missing") else registry.ChecksumError
    with pytest.raises(error):
        registry.fetch("toy")
    assert _cache_files(cache) == []
    handler.mode = "ok"  # the next attempt succeeds from scratch
    assert registry.fetch("toy").read_bytes() == PAYLOAD


def test_an_interrupted_transfer_leaves_no_file(toy, monkeypatch):
    _, cache = toy
    real_urlopen = urllib.request.urlopen

    class Interrupted:
        def __init__(self, response):
            self.response, self.reads, self.headers = response, 0, response.headers

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.response.close()

        def read(self, n):
            self.reads += 1
            if self.reads == 2:  # after a first chunk is on disk
                raise KeyboardInterrupt
            return self.response.read(n)

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: Interrupted(real_urlopen(*a, **k)))
    with pytest.raises(KeyboardInterrupt):
        registry.fetch("toy")
    assert _cache_files(cache) == []


def test_offline_error_names_the_file_its_source_and_where_to_put_it(toy, monkeypatch):
    _, cache = toy
    monkeypatch.setenv("BURTORCH_DATA_MIRROR", "http://127.0.0.1:9/nothing-listens")  # discard port
    with pytest.raises(registry.DataUnavailableError) as e:
        registry.fetch("toy")
    message = str(e.value)
    assert "toy.txt" in message and "http://127.0.0.1:9/nothing-listens/toy.txt" in message
    assert str(cache / "toy.txt") in message
    with pytest.raises(registry.DataUnavailableError, match="downloads disabled"):
        registry.fetch("toy", download=False)
    # Placed by hand, the file is used with no network.
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "toy.txt").write_bytes(PAYLOAD)
    assert registry.fetch("toy", download=False) == cache / "toy.txt"


def test_a_cached_file_that_does_not_match_is_refused_and_kept(toy):
    handler, cache = toy
    cache.mkdir(parents=True)
    (cache / "toy.txt").write_bytes(PAYLOAD[:-1] + b"X")
    with pytest.raises(registry.ChecksumError, match="SHA-256"):
        registry.fetch("toy")
    assert (cache / "toy.txt").read_bytes() == PAYLOAD[:-1] + b"X" and handler.requests == 0


def test_unknown_and_unverified_names(toy, monkeypatch):
    with pytest.raises(ValueError, match="known: .*names"):
        registry.fetch("no-such-set")
    handler, _ = toy
    monkeypatch.setitem(registry.DATASETS, "toy", registry.DataSet(
        "toy", "toy.txt", "https://example.invalid/toy.txt", None, None, "test", "unverified"))
    with pytest.raises(ValueError, match="no recorded checksum"):
        registry.fetch("toy")
    assert handler.requests == 0
    assert registry.fetch("toy", unverified=True).read_bytes() == PAYLOAD
    assert registry.resolve("a path that is no set") == "a path that is no set"


def test_a_set_with_a_third_party_md5(toy, monkeypatch, capsys):
    handler, cache = toy
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    toy_md5 = registry.DataSet("toy", "toy.txt", "https://example.invalid/toy.txt", None, None, "test",
                               "md5 only", md5=md5, checksum_source="a test's own digest")
    monkeypatch.setitem(registry.DATASETS, "toy", toy_md5)
    assert registry.fetch("toy").read_bytes() == PAYLOAD  # verified by its MD5: no flag needed
    (cache / "toy.txt").unlink()
    handler.mode = "corrupt"
    with pytest.raises(registry.ChecksumError, match="MD5 .*a test's own digest.*--unverified"):
        registry.fetch("toy")
    assert not (cache / "toy.txt").exists() and list(cache.iterdir()) == []  # the bad download is gone
    assert registry.fetch("toy", unverified=True).read_bytes() != PAYLOAD  # the user's call, reported
    assert "(unverified) has SHA-256" in capsys.readouterr().err
    assert main(["data", "list"]) == 0
    assert f"md5 {md5} from a test's own digest" in capsys.readouterr().out


def test_the_registered_libsvm_sets_name_their_checksum_or_lack_of_one():
    rcv1 = registry.dataset("rcv1")
    assert rcv1.verified and rcv1.sha256 is None and len(rcv1.md5) == 32 and "epfml/pax" in rcv1.checksum_source
    assert rcv1.filename.endswith(".bz2") and rcv1.url.endswith(rcv1.filename)
    assert not registry.dataset("a9a").verified


def test_burtorch_fl_takes_a_registered_libsvm_name(toy, monkeypatch, capsys):
    import bz2

    handler, cache = toy
    rng = __import__("random").Random(0)
    lines = [f"{rng.choice('+-')}1 " + " ".join(f"{j}:{rng.random():.3f}" for j in sorted(rng.sample(range(1, 40), 4)))
             for _ in range(60)]
    packed = bz2.compress(("\n".join(lines) + "\n").encode())
    rcv1 = registry.dataset("rcv1")
    handler.files = {rcv1.filename: packed}
    monkeypatch.setitem(registry.DATASETS, "rcv1", registry.DataSet(
        "rcv1", rcv1.filename, rcv1.url, None, None, rcv1.licence, rcv1.description,
        md5=hashlib.md5(packed).hexdigest(), checksum_source="this test"))
    assert main(["fl", "--libsvm", "rcv1", "--clients", "3", "--rounds", "3", "--quiet", "--seed", "0"]) == 0
    assert "ef21: round 2  loss" in capsys.readouterr().out
    assert handler.requests == 1 and (cache / rcv1.filename).read_bytes() == packed


def test_default_cache_dir_is_the_platform_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("BURTORCH_DATA", raising=False)
    monkeypatch.setattr(registry.sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert registry.cache_dir() == tmp_path / "burtorch"
    monkeypatch.setenv("BURTORCH_DATA", str(tmp_path / "mine"))
    assert registry.cache_dir() == tmp_path / "mine"


def test_cli_data_get_and_list(toy, capsys):
    _, cache = toy
    assert main(["data", "get", "toy", "--offline"]) == 1
    assert "put it: " + str(cache / "toy.txt") in capsys.readouterr().err
    assert main(["data", "get", "toy"]) == 0
    assert capsys.readouterr().out.strip() == str(cache / "toy.txt")
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "toy (cached)" in out and "tinyshakespeare" in out and "names" in out


def test_registered_checksums_match_the_canonical_files(shared_data):
    for name in ("names", "tinyshakespeare"):
        ds = registry.DATASETS[name]
        raw = (shared_data / ds.filename).read_bytes()
        assert len(raw) == ds.size and hashlib.sha256(raw).hexdigest() == ds.sha256


def test_train_fetches_the_paper_data_by_name(shared_data, server, monkeypatch, tmp_path, capsys):
    handler, base = server
    handler.files = {name: (shared_data / name).read_bytes() for name in ("names.txt", "tinyshakespeare.txt")}
    monkeypatch.setenv("BURTORCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("BURTORCH_DATA_MIRROR", base)
    assert main(["train", "mlp", "--data", "names", "--preset", "tiny", "--steps", "2", "--batch", "4",
                 "--eval-samples", "20", "--sample", "0"]) == 0
    assert str(tmp_path / "cache" / "names.txt") in capsys.readouterr().out
    assert main(["train", "gpt", "--data", "tinyshakespeare", "--preset", "tiny", "--steps", "2",
                 "--batch", "2", "--eval-samples", "20", "--sample", "0"]) == 0
    assert "vocab 65" in capsys.readouterr().out.replace("vocabulary", "vocab").replace("=", " ")
    assert handler.requests == 2


@pytest.mark.parametrize("argv", [["train", "mlp", "--data", "names", "--steps", "1"],
                                  ["train", "gpt", "--data", "tinyshakespeare", "--steps", "1"],
                                  ["fl", "--data", "names", "--rounds", "1", "--quiet"]])
def test_commands_offline_say_which_file_from_where_and_where(argv, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("BURTORCH_DATA", str(tmp_path / "cache"))
    monkeypatch.setenv("BURTORCH_DATA_MIRROR", "http://127.0.0.1:9/offline")  # nothing listens
    assert main(argv) == 2
    err = capsys.readouterr().err
    ds = registry.DATASETS[argv[argv.index("--data") + 1]]
    assert f"file:   {ds.filename}" in err and f"http://127.0.0.1:9/offline/{ds.filename}" in err
    assert f"put it: {tmp_path / 'cache' / ds.filename}" in err
    assert not (tmp_path / "cache").exists() or _cache_files(tmp_path / "cache") == []


def test_an_existing_file_named_like_a_data_set_is_read_as_a_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "names").write_text("anna\nbob\n")
    assert registry.resolve("names") == "names"  # a path first; no fetch
