"""`burtorch fl` end to end, the data splits, LibSVM reading and the names task, and bad input
reported before any round."""
import importlib.util
import json

import numpy as np
import pytest

from burtorch.cli.main import main
from burtorch.fl import splits
from burtorch.fl.libsvm import read_libsvm

HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def test_compare_run_writes_json_and_plot(tmp_path, capsys):
    out, png = tmp_path / "out.json", tmp_path / "curves.png"
    plot = ["--plot", str(png)] if HAVE_MATPLOTLIB else []  # the plot's own check is below
    assert main(["fl", "--clients", "5", "--rounds", "30", "--samples", "100", "--dim", "8", "--k", "2",
                 "--compare", "gd,ef21@x4,dcgd:topk@0.3,marina:randk", "--seed", "3", "--quiet",
                 "--json", str(out)] + plot) == 0
    doc = json.loads(out.read_text())
    assert [r["label"] for r in doc["runs"]] == ["gd", "ef21@x4", "dcgd:topk@0.3", "marina:randk"]
    for run in doc["runs"]:
        recs = run["records"]
        assert len(recs) == 30 and all({"loss", "grad_norm", "bits", "bits_per_client"} <= set(r) for r in recs)
        assert recs[-1]["bits_per_client"] == sum(r["bits"] for r in recs) / 5
        assert run["settings"]["seed"] == 3 and run["settings"]["clients"] == 5
    gd, ef = doc["runs"][0], doc["runs"][1]
    assert gd["records"][1]["bits"] == 5 * 8 * 32 and ef["records"][1]["bits"] == 5 * 2 * (32 + 3)
    assert png.stat().st_size > 10_000 if HAVE_MATPLOTLIB else not png.exists()
    assert "grad norm" in capsys.readouterr().out


@pytest.mark.skipif(HAVE_MATPLOTLIB, reason="checks the error given where matplotlib is missing")
def test_plot_without_matplotlib_is_refused_before_any_round(tmp_path, capsys):
    assert main(["fl", "--clients", "5", "--rounds", "3", "--samples", "100", "--dim", "8", "--quiet",
                 "--plot", str(tmp_path / "c.png")]) == 2
    assert "needs matplotlib" in capsys.readouterr().err


def test_same_seed_same_json(tmp_path):
    args = ["fl", "--clients", "4", "--rounds", "10", "--samples", "40", "--dim", "5", "--method", "marina",
            "--compressor", "natural", "--seed", "8", "--quiet"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    main(args + ["--json", str(a)])
    main(args + ["--json", str(b)])
    def strip(doc):
        return [[{k: v for k, v in r.items() if k != "seconds"} for r in run["records"]] for run in doc["runs"]]
    assert strip(json.loads(a.read_text())) == strip(json.loads(b.read_text()))


@pytest.mark.parametrize("argv,message", [
    (["--method", "sgd"], "unknown method"),
    (["--compressor", "zip"], "unknown compressor"),
    (["--k", "99"], "k must be"),
    (["--participation", "0"], "participation"),
    (["--participation", "1.5"], "participation"),
    (["--method", "marina", "--compressor", "topk"], "unbiased"),
    (["--clients", "200", "--samples", "100"], "more clients"),
    (["--libsvm", "/nonexistent/a9a"], "not found"),
    (["--executor", "ray", "--address", "127.0.0.1:1"], "cannot reach|needs Ray"),
    (["--compare", "gd,dcgd"], "needs lr"),
    (["--compare", "ef21@fast"], "after @"),
])
def test_bad_input_is_reported_before_any_round(argv, message, capsys, tmp_path):
    out = tmp_path / "never.json"
    try:  # a number out of range is refused by argparse (SystemExit), the rest by the command
        code = main(["fl", "--rounds", "5", "--samples", "100", "--quiet", "--json", str(out)] + argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    import re
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()


def test_libsvm_files(tmp_path, capsys):
    good = tmp_path / "tiny.svm"
    rng = np.random.default_rng(0)
    lines = []
    for j in range(40):
        feats = " ".join(f"{k + 1}:{rng.standard_normal():.4f}" for k in range(5) if rng.random() < 0.8)
        lines.append(f"{'+1' if j % 2 else '-1'} {feats}")
    good.write_text("\n".join(lines) + "\n")
    A, y = read_libsvm(str(good))
    assert A.shape[0] == 40 and set(y.tolist()) == {-1.0, 1.0}
    assert main(["fl", "--libsvm", str(good), "--clients", "4", "--rounds", "5", "--quiet"]) == 0
    for text, message in [("+1 1:0.5 x\n-1 2:1\n", "not index:value"), ("abc 1:1\n", "label"),
                          ("+1 0:1\n-1 1:1\n", "outside"), ("1 1:1\n2 1:1\n3 1:2\n", "two label values"),
                          ("", "no samples"), ("+1 1:nan\n-1 1:1\n", "nan")]:
        bad = tmp_path / "bad.svm"
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_libsvm(str(bad))
        assert main(["fl", "--libsvm", str(bad), "--clients", "2", "--rounds", "2", "--quiet"]) == 2


def test_splits():
    labels = np.array([0] * 30 + [1] * 30 + [2] * 30)
    parts = splits.by_label(labels, 3)
    assert [set(labels[p].tolist()) for p in parts] == [{0}, {1}, {2}]
    for parts in (splits.iid(90, 7, 1), splits.dirichlet(labels, 7, 0.3, 1), splits.by_label(labels, 7)):
        joined = np.sort(np.concatenate(parts))
        assert np.array_equal(joined, np.arange(90)) and all(len(p) > 0 for p in parts)
    first, again = splits.dirichlet(labels, 5, 0.3, 2), splits.dirichlet(labels, 5, 0.3, 2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    with pytest.raises(ValueError, match="more clients"):
        splits.iid(3, 4, 0)
    with pytest.raises(ValueError, match="concentration"):
        splits.dirichlet(labels, 3, 0.0, 0)


def test_names_per_client(tmp_path):
    from conftest import SHARED_DATA

    path = SHARED_DATA / "names.txt"
    if not path.is_file():
        words = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "amelia", "harper", "evelyn", "abigail"] * 5
        path = tmp_path / "names.txt"
        path.write_text("\n".join(words))
    out = tmp_path / "names.json"
    assert main(["fl", "--data", str(path), "--clients", "3", "--rounds", "3", "--hidden", "8", "--max-samples", "32",
                 "--method", "ef21", "--compressor", "topk", "--k", "50", "--lr", "0.5", "--quiet",
                 "--seed", "0", "--json", str(out)]) == 0  # without --seed the run draws one from bt's stream
    recs = json.loads(out.read_text())["runs"][0]["records"]
    assert recs[-1]["loss"] < recs[0]["loss"] < 4.0


def test_cli_names_match_the_modules():
    from burtorch.cli import fl as cli
    from burtorch.fl import executors

    assert cli.EXECUTORS == executors.EXECUTORS and cli.SPLITS == splits.SPLITS


@pytest.mark.parametrize("flags, listed", [
    (["--method", "nosuch"], "choose from gd, dcgd, ef21"),
    (["--compare", "ef21,nosuch"], "choose from gd, dcgd, ef21"),
    (["--compressor", "nosuch"], "choose from identity, randk, topk"),
    (["--compare", "ef21:scaled-nosuch"], "choose from identity, randk, topk"),
])
def test_unknown_method_or_compressor_is_refused_before_any_work_with_every_name(flags, listed, capsys, tmp_path):
    from burtorch.optim.methods import METHODS

    # a --data file that does not exist: the names are checked before the data is read
    assert main(["fl", "--data", str(tmp_path / "absent.txt"), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert listed in err and "nosuch" in err
    if "method" in err.split("nosuch")[0]:
        assert all(name in err for name in METHODS)


def test_target_reports_bits_to_reach_a_gradient_norm(capsys):
    assert main(["fl", "--clients", "4", "--rounds", "40", "--samples", "80", "--dim", "5", "--method", "gd",
                 "--seed", "1", "--quiet", "--target", "1e-3"]) == 0
    assert "grad norm <= 0.001 at round" in capsys.readouterr().out
