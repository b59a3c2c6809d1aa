"""A fuzzer of the command lines (issue 41, class 8): random `burtorch train`, `burtorch fl`,
`burtorch demo` and `burtorch info` invocations over their flags (odd, huge, negative, nan/inf
values), output paths (missing directories, directories, FIFOs) and input files (empty, one
character, junk bytes, special files, long lines). Every invocation must end in bounded time with
exit code 0, 2 (a usage error printed without a traceback) or 1 (a run that diverged, said so),
and a run that exits 0 with --save or --json must have written its file. The number of invocations follows BURTORCH_FUZZ
(tests/fuzz_profile.py); `long` draws a new seed each run and prints it on failure."""
import os
import random
import time

import pytest

from burtorch.cli.main import main
from fuzz_profile import CLI_FUZZ_RUNS, FUZZ_SEED

# Each invocation is kept to a few steps or rounds: the fuzzer looks for errors, hangs and lost
# output, not for training. Sizes that would run long are expected to be refused at once.
SECONDS_PER_RUN = 60

ODD_INTS = ["0", "-1", "1", "2", "3", "10**3", "1e3", "", "abc", "9" * 13, "-" + "9" * 13, "0x10", " 2"]
ODD_FLOATS = ["nan", "inf", "-inf", "-0.5", "0", "1e-300", "1e300", "0.5", "abc", "", "1e999"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli_fuzz")
    r = random.Random(1)
    words = "\n".join("".join(r.choice("abcdefgh") for _ in range(r.randint(2, 7))) for _ in range(300))
    made = {
        "empty": b"", "one": b"a", "newlines": b"\n" * 50, "junk": bytes(r.randrange(256) for _ in range(4096)),
        "utf8": "éßø漢字\n🙂x\n".encode() * 20, "words": words.encode(), "longline": b"ab" * 200_000,
        "dots": b"a.b\nc.d\n", "libsvm": b"".join(f"{r.choice([-1, 1])} 1:{r.random():.3f} {r.randint(2, 40)}:1\n"
                                                  .encode() for _ in range(60)),
        "libsvm_wide": b"1 1:0.5 4000:1\n-1 2:0.25\n1 3999:2\n",
        "libsvm_bad": b"nan 1:1\n1 2:2\n", "libsvm_one_class": b"1 1:1\n1 2:2\n",
    }
    paths = {}
    for name, content in made.items():
        (d / name).write_bytes(content)
        paths[name] = str(d / name)
    paths["dir"] = str(d)
    paths["missing"] = str(d / "no" / "such" / "file")
    paths["devnull"] = os.devnull
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "fifo")
        paths["fifo"] = str(d / "fifo")
    out = d / "out"
    out.mkdir()
    return paths, out


def _output(r, out, suffix):
    choice = r.randrange(6)
    if choice == 0:
        return str(out / "missing_dir" / f"x{suffix}")
    if choice == 1:
        return str(out)  # a directory
    if choice == 2 and os.path.exists(out.parent / "fifo"):
        return str(out.parent / "fifo")
    return str(out / f"f{r.randrange(10**9)}{suffix}")


def _maybe(r, p=0.3):
    return r.random() < p


def _train_argv(r, paths, out):
    argv = ["train", r.choice(["mlp", "gpt"]), "--preset", "tiny", "--steps", str(r.randint(1, 3)),
            "--eval-samples", r.choice(["3", "5"] + ([r.choice(ODD_INTS)] if _maybe(r, 0.1) else [])),
            "--sample", r.choice(["0", "1", "5"] + ([r.choice(ODD_INTS)] if _maybe(r, 0.1) else []))]
    if _maybe(r):
        argv += ["--data", paths[r.choice(sorted(paths))]]
    for flag in ("--batch", "--chunk", "--hidden", "--eval-every", "--save-every", "--seed", "--threads"):
        if _maybe(r, 0.2):
            argv += [flag, r.choice(ODD_INTS + ["4"])]
    if _maybe(r, 0.2):
        argv += ["--lr", r.choice(ODD_FLOATS)]
    for flag, choices in (("--optimizer", ["sgd", "adam", "adamw", "lbfgs"]), ("--dtype", ["float32", "float64", "x"])):
        if _maybe(r, 0.2):
            argv += [flag, r.choice(choices)]
    if _maybe(r, 0.2):
        argv.append("--compile")
    if _maybe(r):
        argv += ["--save", _output(r, out, ".ckpt")]
    if _maybe(r, 0.1):
        argv += ["--resume", paths[r.choice(sorted(paths))]]
    if _maybe(r, 0.1):
        argv += ["--plot", _output(r, out, ".png")]
    return argv


def _fl_argv(r, paths, out):
    odd = 0.05 if _maybe(r, 0.5) else 0.0  # half the runs take valid values only, to reach the rounds
    argv = ["fl", "--quiet", "--rounds", str(r.randint(1, 3)), "--samples", str(r.randint(1, 80)),
            "--dim", str(r.randint(1, 8)), "--clients", str(r.randint(1, 6))]
    if _maybe(r, 0.25):
        argv += ["--libsvm", paths[r.choice(sorted(paths) + ["libsvm", "libsvm_wide"] * 3)]]
    elif _maybe(r, 0.15):
        argv += ["--data", paths[r.choice(sorted(paths))], "--hidden", "4", "--max-samples", "8"]
    argv += ["--method", r.choice(["gd", "dcgd", "ef21", "ef21-sgd", "ef21-pp", "marina", "vr-marina", "page",
                                   "diana", "fedavg", "sgd"][:11 if odd else 10])]
    if _maybe(r):
        argv += ["--compressor", r.choice(["identity", "randk", "topk", "randseqk", "natural", "dithering",
                                           "scaled-randk", "scaled-natural", "zip"])]
    if _maybe(r, 0.6):
        argv += ["--lr", "0.1", "--batch", "4", "--k", "2"]
    for flag in ("--k", "--s", "--batch", "--local-steps", "--eval-every", "--seed", "--samples", "--dim",
                 "--clients", "--hidden", "--max-samples", "--rounds"):
        if _maybe(r, odd):
            argv += [flag, r.choice(ODD_INTS)]
    for flag in ("--lr", "--lr-scale", "--p", "--lam", "--alpha", "--participation", "--target"):
        if _maybe(r, 2 * odd):
            argv += [flag, r.choice(ODD_FLOATS + ["0.1"])]
    if _maybe(r, 0.15):
        argv += ["--split", r.choice(["iid", "label", "dirichlet", "x"])]
    if _maybe(r, 0.1):
        argv += ["--compare", r.choice(["gd,ef21", "gd@0.1,dcgd:randk@x2", "gd@nan", "gd@xinf", ",", "ef21:topk@x0"])]
    if _maybe(r, 0.25):
        argv += ["--json", _output(r, out, ".json")]
    return argv


def _run(argv, capsys):
    t0 = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse: a usage error (2) or --help (0)
        code = e.code
    except Exception as e:  # a traceback the user would see
        pytest.fail(f"burtorch {' '.join(argv)} raised {e!r}")
    elapsed = time.perf_counter() - t0
    captured = capsys.readouterr()
    return code, captured.err, elapsed


@pytest.mark.parametrize("command", ["train", "fl"])
def test_cli_fuzz(command, files, capsys, monkeypatch):
    paths, out = files
    monkeypatch.chdir(out)  # a run's default checkpoint (--save-every without --save) lands here
    r = random.Random(f"{FUZZ_SEED}-{command}")
    make = _train_argv if command == "train" else _fl_argv
    codes = {0: 0, 1: 0, 2: 0}
    for i in range(CLI_FUZZ_RUNS):
        argv = make(r, paths, out)
        why = f"seed {FUZZ_SEED}, run {i}: burtorch {' '.join(argv)}"
        code, err, elapsed = _run(argv, capsys)
        assert code in (0, 2) or (code == 1 and "the run diverged" in err), f"exit {code}: {why}\n{err[-2000:]}"
        assert "Traceback" not in err, f"{why}\n{err[-2000:]}"
        assert elapsed < SECONDS_PER_RUN, f"{elapsed:.0f} s: {why}"
        codes[code] += 1
        if code == 0:
            for flag in ("--save", "--json"):
                if flag in argv:
                    assert os.path.isfile(argv[argv.index(flag) + 1]), f"{flag} not written: {why}"
        else:
            assert err.strip(), f"exit 2 without a message: {why}"
    assert codes[0] and codes[2], codes  # the grammar reaches both finished runs and refusals
    print(f"CLI fuzz of {command}: {CLI_FUZZ_RUNS} command lines, seed {FUZZ_SEED}, exit codes {codes}")


def test_cli_demo_and_info(capsys):
    assert main(["info"]) == 0
    assert main(["info", "--json"]) == 0
    for bad in (["demo", "--repeats", "0"], ["demo", "--repeats", "nan"], ["info", "--x"]):
        code, err, _ = _run(bad, capsys)
        assert code == 2 and "Traceback" not in err and err.strip()
