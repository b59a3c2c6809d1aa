"""Checkpoint and resume: a run continued from a checkpoint (taken every N rounds, or on SIGINT)
is bitwise the run uninterrupted, for methods with coins, client states, partial participation
and local steps, across executors; a checkpoint of another run is refused before any work."""
import json
import os
import pickle
import signal

import numpy as np
import pytest

from burtorch.cli.main import main
from burtorch.fl import Federation, make_compressor, make_method
from burtorch.fl.logistic import synthetic


def problem():
    return synthetic(6, 120, 8, seed=3)


METHODS = {
    "ef21-topk": lambda: make_method("ef21", compressor=make_compressor("topk", 8, 2)),
    "marina-randk": lambda: make_method("marina", compressor=make_compressor("randk", 8, 2)),
    "diana-natural": lambda: make_method("diana", lr=0.1, compressor=make_compressor("natural", 8)),
    "ef21-pp": lambda: make_method("ef21-pp", compressor=make_compressor("topk", 8, 2)),
    "fedavg": lambda: make_method("fedavg", lr=0.05, batch=5, local_steps=3),
    "vr-marina": lambda: make_method("vr-marina", compressor=make_compressor("randk", 8, 2), batch=4),
}


def strip(records):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


# (method, participation): partial participation for the methods defined with it
CASES = [(name, 1.0) for name in sorted(METHODS)] + [("ef21-pp", 0.5), ("fedavg", 0.5)]


@pytest.mark.parametrize("name,participation", CASES)
def test_resume_is_bitwise(name, participation):
    p = problem()
    # eval_every=1: run() evaluates its last round, so the halves evaluate where the whole does
    with Federation(p, METHODS[name](), participation, seed=11) as whole:
        whole.run(25)
    with Federation(p, METHODS[name](), participation, seed=11) as first:
        first.run(9)
        blob = pickle.dumps(first.state_dict())
    with Federation(p, METHODS[name](), participation, seed=11) as second:
        second.load_state_dict(pickle.loads(blob))
        second.run(16)
        assert np.array_equal(second.x, whole.x)
        assert strip(second.records) == strip(whole.records)


def test_resume_on_another_executor_is_bitwise():
    p = problem()
    make = METHODS["marina-randk"]
    with Federation(p, make(), seed=4) as whole:
        whole.run(12)
    with Federation(p, make(), seed=4) as first:
        first.run(5)
        state = first.state_dict()
    with Federation(p, make(), executor="processes", workers=2, seed=4) as second:
        second.load_state_dict(state)
        assert second.executor.client_states().keys() == set(range(6))
        second.run(7)
        assert np.array_equal(second.x, whole.x)
        assert strip(second.records) == strip(whole.records)


def test_a_checkpoint_of_another_run_is_refused_and_changes_nothing():
    p = problem()
    with Federation(p, METHODS["ef21-topk"](), seed=1) as a:
        a.run(3)
        state = a.state_dict()
    with Federation(p, METHODS["ef21-topk"](), seed=2) as b:
        before = b.x.copy()
        with pytest.raises(ValueError, match="another run.*seed"):
            b.load_state_dict(state)
        assert b.t == 0 and np.array_equal(b.x, before) and b.records == []
        with pytest.raises(ValueError, match="not a burtorch fl checkpoint"):
            b.load_state_dict({"version": 0})


ARGS = ["fl", "--samples", "120", "--clients", "6", "--dim", "8", "--rounds", "30", "--seed", "5", "--quiet",
        "--k", "2", "--compare", "ef21,marina:randk"]


def interrupt_after(monkeypatch, calls):
    """SIGINT to this process after ``calls`` rounds: the command's own handler takes it."""
    import burtorch.fl.federation as federation

    real = federation.Federation.round
    count = {"n": 0}

    def round_then_signal(self, *a, **k):
        rec = real(self, *a, **k)
        count["n"] += 1
        if count["n"] == calls:
            os.kill(os.getpid(), signal.SIGINT)
        return rec

    monkeypatch.setattr(federation.Federation, "round", round_then_signal)


@pytest.mark.parametrize("calls", [7, 30 + 11])  # inside the first run; inside the second one
def test_cli_interrupt_and_resume_is_bitwise(calls, tmp_path, monkeypatch, capsys):
    whole, part, ck = tmp_path / "whole.json", tmp_path / "part.json", tmp_path / "run.ck"
    assert main(ARGS + ["--json", str(whole)]) == 0
    with monkeypatch.context() as m:
        interrupt_after(m, calls)
        assert main(ARGS + ["--json", str(part), "--checkpoint", str(ck), "--checkpoint-every", "4"]) == 130
    assert "continue with --resume" in capsys.readouterr().err
    assert main(ARGS + ["--json", str(part), "--resume", str(ck)]) == 0
    a, b = json.loads(whole.read_text())["runs"], json.loads(part.read_text())["runs"]
    assert [r["label"] for r in a] == [r["label"] for r in b]
    for x, y in zip(a, b):
        assert strip(x["records"]) == strip(y["records"])


def test_cli_resume_errors(tmp_path, capsys):
    ck = tmp_path / "run.ck"
    assert main(ARGS + ["--checkpoint", str(ck), "--checkpoint-every", "10"]) == 0
    for extra, message in [(["--rounds", "40"], "of 30 rounds"), (["--compare", "gd,ef21"], "runs"),
                           (["--seed", "6"], "another run"), (["--lam", "0.2"], "another run")]:
        assert main(ARGS + ["--resume", str(ck)] + extra) == 2
        assert message in capsys.readouterr().err
    bad = tmp_path / "bad.ck"
    bad.write_bytes(b"not a pickle")
    assert main(ARGS + ["--resume", str(bad)]) == 2
    assert "not a readable" in capsys.readouterr().err
    assert main(ARGS + ["--resume", str(tmp_path / "none.ck")]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
