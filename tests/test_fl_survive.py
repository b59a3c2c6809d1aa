"""Runs that keep their results: output paths checked before round 1, a diverging run stopped with
its records kept (and written), bad --eval-every values refused."""
import json
import os

import numpy as np
import pytest

from burtorch.cli.main import main
from burtorch.fl import Federation, make_method
from burtorch.fl.federation import Diverged
from burtorch.fl.logistic import synthetic

BASE = ["fl", "--rounds", "4", "--samples", "100", "--clients", "4", "--quiet", "--seed", "1"]


@pytest.mark.parametrize("flag", ["--json", "--plot"])
def test_missing_output_directory_is_refused_before_round_one(flag, tmp_path, capsys, monkeypatch):
    import burtorch.fl.federation as federation

    def no_rounds(*a, **k):
        raise AssertionError("a round ran")

    monkeypatch.setattr(federation.Federation, "round", no_rounds)
    assert main(BASE + [flag, str(tmp_path / "missing" / "out.x")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(BASE + [flag, str(tmp_path)]) == 2
    assert "not a regular file" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_output_directory_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert main(BASE + ["--json", str(locked / "out.json")]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("value", ["-1", "0"])
def test_bad_eval_every_is_an_error(value, capsys):
    with pytest.raises(SystemExit) as e:
        main(BASE + ["--eval-every", value])
    assert e.value.code == 2
    assert "--eval-every: must be a positive integer" in capsys.readouterr().err


def test_diverging_run_stops_and_keeps_its_records(tmp_path, capsys):
    out = tmp_path / "run.json"
    # a step of 1e300 overflows the point in round 1 (the loss and gradient of this problem stay
    # finite for any finite point: its data term is linear at infinity, its regulariser bounded)
    assert main(BASE + ["--rounds", "200", "--method", "gd", "--compare", "gd@1e300,gd@0.1",
                        "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert "gd@1e300 stopped at round 1" in err and "diverged" in err
    runs = json.loads(out.read_text())["runs"]
    bad, good = runs
    assert bad["stopped"] and 0 < len(bad["records"]) < 200
    last = bad["records"][-1]
    assert not np.isfinite(last["loss"]) or not np.isfinite(last["grad_norm"])
    assert all(np.isfinite(r["loss"]) for r in bad["records"][:-1])
    assert good["stopped"] is None and len(good["records"]) == 200  # the comparison went on


def test_federation_refuses_rounds_after_divergence():
    p = synthetic(4, 100, 5, seed=0)
    with Federation(p, make_method("gd", lr=1e300), seed=0) as fed:
        with pytest.raises(Diverged, match="diverged"):
            fed.run(200)
        n = len(fed.records)
        with pytest.raises(Diverged):
            fed.round()
        assert len(fed.records) == n


def test_a_rising_loss_is_warned_about(capsys):
    assert main(BASE + ["--rounds", "30", "--method", "gd", "--lr", "1e6"]) == 0
    assert "warning: gd: the loss rose from" in capsys.readouterr().err
    assert main(BASE + ["--rounds", "30", "--method", "gd"]) == 0
    assert "warning" not in capsys.readouterr().err
