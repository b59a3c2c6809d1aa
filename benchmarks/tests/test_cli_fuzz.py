"""A fuzzer of the burtorch-bench command line (issue 41): random invocations of the quick
workloads (burtorch's own rows), of `report` and of `compare`, over odd flag values, output
directories and input files (empty, junk, non-UTF-8, a directory, a FIFO, missing, a valid run).
Each must end in bounded time with exit 0, 1 (a run failed or disagreed), a usage error (2), or a
message without a traceback (SystemExit with a string), and a suite that ends with 0 or 1 must
have written its results.json.

BURTORCH_FUZZ sets the number of invocations (unset: a few, ci: more, long: many, from a fresh
seed printed on failure); each workload run starts a child process, so the counts stay small."""
import os
import random
import time

import pytest

from burtorch_bench.cli import main

PROFILE = os.environ.get("BURTORCH_FUZZ", "").strip().lower()
RUNS = {"": 12, "ci": 40, "long": 400}.get(PROFILE, 12)
SEED = int.from_bytes(os.urandom(4), "little") if PROFILE == "long" else 41
SECONDS_PER_RUN = 120

ODD = ["0", "-1", "1", "2", "nan", "inf", "1e3", "", "abc", "9" * 13, "1,2", "0.5"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench_fuzz")
    r = random.Random(1)
    files = {"empty": b"", "junk": bytes(r.randrange(256) for _ in range(2048)), "text": b"hello\n",
             "json_list": b"[1, 2, 3]", "json_other": b'{"schema": "other", "runs": []}',
             "json_deep": b"[" * 100000}
    paths = {}
    for name, content in files.items():
        (d / name).write_bytes(content)
        paths[name] = str(d / name)
    paths["dir"], paths["missing"] = str(d), str(d / "no" / "such.json")
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "fifo")
        paths["fifo"] = str(d / "fifo")
    good = d / "good"
    assert main(["tiny", "--frameworks", "burtorch", "--iters", "5", "--reps", "1", "--warmup", "0",
                 "--out", str(good)]) == 0
    paths["good"] = str(good / "results.json")
    return d, paths


def _argv(r, d, paths):
    what = r.choice(["tiny", "small", "saveload", "w1", "report", "compare", "mlp"])
    if what in ("report", "compare"):
        names = sorted(paths) + ["good"] * 4
        argv = [what] + [paths[r.choice(names)] for _ in range(1 if what == "report" else 2)]
        if r.random() < 0.2:
            argv.append(paths[r.choice(names)])  # one file too many
        if what == "report" and r.random() < 0.3:
            argv += ["--markdown", str(d / f"page{r.randrange(10**6)}.md")]
        return argv
    argv = [what, "--frameworks", r.choice(["burtorch"] * 6 + ["nosuch", "burtorch,burtorch", ""]),
            "--iters", r.choice(["2", "5"] + ([r.choice(ODD)] if r.random() < 0.3 else [])),
            "--reps", r.choice(["1"] + ([r.choice(ODD)] if r.random() < 0.3 else [])), "--warmup", "0"]
    if what == "mlp":  # W4 at its smallest: one hidden size, one batch size
        argv += ["--embed", r.choice(["4", "4"] + ODD), "--batch", r.choice(["1", "2"] + ODD)]
    for flag in ("--budget", "--timeout", "--processes", "--threads", "--cpu"):
        if r.random() < 0.12:
            argv += [flag, r.choice(ODD)]
    if r.random() < 0.7:
        choice = r.randrange(4)
        out = (d / f"out{r.randrange(10**6)}" if choice < 2 else d / "nested" / f"o{r.randrange(10**6)}"
               if choice == 2 else paths[r.choice(["empty", "fifo" if "fifo" in paths else "empty"])])
        argv += ["--out", str(out)]
    return argv


def test_bench_cli_fuzz(inputs, capsys, monkeypatch):
    d, paths = inputs
    monkeypatch.chdir(d)  # the default --out lands here, not in the checkout
    r = random.Random(SEED)
    codes = {"ok": 0, "refused": 0}
    for i in range(RUNS):
        argv = _argv(r, d, paths)
        why = f"seed {SEED}, run {i}: burtorch-bench {' '.join(argv)}"
        t0 = time.perf_counter()
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        except Exception as e:  # a traceback the user would see
            pytest.fail(f"{why} raised {e!r}")
        elapsed = time.perf_counter() - t0
        err = capsys.readouterr().err
        # 1: a run failed or disagreed, which the written results say
        assert code in (0, 1, 2) or isinstance(code, str), f"exit {code!r}: {why}\n{err[-2000:]}"
        assert "Traceback" not in err, f"{why}\n{err[-2000:]}"
        assert elapsed < SECONDS_PER_RUN, f"{elapsed:.0f} s: {why}"
        if code in (0, 1) and argv[0] not in ("report", "compare"):
            out = argv[argv.index("--out") + 1] if "--out" in argv else str(d / "bench-results")
            assert os.path.isfile(os.path.join(out, "results.json")), f"no results.json: {why}"
        codes["ok" if code == 0 else "refused"] += 1
    assert codes["ok"] and codes["refused"], codes


def _exit(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("flag", ["--iters", "--embed", "--batch", "--reps"])
def test_huge_sizes_are_refused_before_the_runs(flag, tmp_path, capsys):
    code = _exit(["mlp" if flag in ("--embed", "--batch") else "tiny", "--frameworks", "burtorch", flag,
                  "9" * 13, "--out", str(tmp_path / "o")])
    assert isinstance(code, str) and "above the most" in code
    assert "[1/" not in capsys.readouterr().err


def test_out_that_is_a_file_is_refused_before_the_runs(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code = _exit(["tiny", "--frameworks", "burtorch", "--iters", "2", "--reps", "1", "--out", str(f)])
    assert isinstance(code, str) and "--out" in code
    assert "[1/" not in capsys.readouterr().err  # refused before the first run


@pytest.mark.parametrize("content", [b"", b"\xff\xfe", b"[" * 100000, b"[1, 2]"])
def test_compare_and_report_of_junk_files_are_messages(tmp_path, content):
    p = tmp_path / "r.json"
    p.write_bytes(content)
    for argv in (["compare", str(p), str(p)], ["report", str(p)]):
        code = _exit(argv)
        assert isinstance(code, str) and code.startswith(f"burtorch-bench {argv[0]}: ")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_report_of_a_fifo_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for argv in (["report", str(tmp_path / "fifo")], ["compare", str(tmp_path / "fifo"), str(tmp_path / "fifo")]):
        code = _exit(argv)
        assert isinstance(code, str) and "FIFO" in code
