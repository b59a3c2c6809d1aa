"""python -m burtorch_bench.compiled_vs_eager: compiled against the eager per-sample oracle (the
paper's default path), and a verdict that agrees with the figures printed beside it."""
from __future__ import annotations

import re

import pytest

import burtorch.oracle
from burtorch_bench import compiled_vs_eager as cve


@pytest.fixture
def oracle_calls(monkeypatch):
    """Every grad_oracle call the runners make, as (compiled, chunk) (runners look it up per run)."""
    calls = []
    real = burtorch.oracle.grad_oracle

    def spy(model, batch, **kw):
        calls.append((bool(kw.get("compile")), kw.get("chunk", 1), len(batch)))
        return real(model, batch, **kw)

    monkeypatch.setattr(burtorch.oracle, "grad_oracle", spy)
    return calls


@pytest.mark.parametrize("workload, config", [("mlp", {"e": 4, "b": 8}), ("gpt", {"b": 2})])
def test_the_eager_side_is_the_per_sample_oracle(workload, config, oracle_calls):
    e, c, ratios, agree = cve.measure(workload, config, None, reps=2, steps=1, data=None)
    assert e > 0 and c > 0 and len(ratios) == 2 and agree
    eager = [call for call in oracle_calls if not call[0]]
    compiled = [call for call in oracle_calls if call[0]]
    b = config["b"]
    # warm-up + 2 timed steps each; never a chunk of several samples on either side
    assert eager and compiled and len(eager) == len(compiled) == 3
    assert all(chunk == 1 and n == b for _, chunk, n in eager + compiled)


@pytest.mark.parametrize("ratio, target, expect", [
    (0.1249, 1 / 8, ("0.125", "8.00x", ">= 8x faster met")),
    (0.1256, 1 / 8, ("0.126", "7.94x", ">= 8x faster MISSED")),
    (0.6004, 0.6, ("0.600", "1.67x", "<= 0.6 met")),  # shown as 0.600: met, as the line reads
    (0.55, 0.6, ("0.550", "1.82x", "<= 0.6 met")),
    (0.71, 0.7, ("0.710", "1.41x", "<= 0.7 MISSED")),
    (0.3, None, ("0.300", "3.33x", "-")),
])
def test_the_verdict_is_read_off_the_printed_ratio(ratio, target, expect):
    assert cve.verdict(ratio, target) == expect


def test_each_printed_line_agrees_with_its_target(capsys):
    assert cve.main(["--only", "W4", "--reps", "2", "--steps", "1"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("W4")]
    targets = {label: target for label, _, _, _, target in cve.CASES}
    assert len(lines) == 2
    for line in lines:
        label = line[:24].strip()
        ratio, speed = re.search(r"(\d+\.\d{3})\s+(\d+\.\d{2})x", line).groups()
        assert abs(float(speed) - 1 / float(ratio)) < 0.006
        if targets[label] is None:
            assert line.endswith("  -")
        else:
            assert line.endswith(" met" if float(ratio) <= targets[label] else " MISSED")


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--steps", "-1"], ["--only", "W9"]])
def test_bad_arguments_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cve.main(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err
