"""The GEMM-floor benchmark runs end to end and prints one row per shape (its figures are not
checked: speed is measured by running the script, never in tests)."""
import re

import pytest

pytest.importorskip("numpy")

from burtorch_bench import gemm_floor


def test_shapes_cover_both_workloads():
    all_shapes = gemm_floor.shapes(None)
    assert {s[0].split()[0] for s in all_shapes} == {"W4", "W5"}
    assert ("W4 e=1024 hidden", 64, 1024, 1024, True) in all_shapes
    assert ("W5 qkv", 8, 24, 72, False) in all_shapes
    assert all(s[0].startswith("W5") for s in gemm_floor.shapes("w5"))


def test_smoke_run_prints_a_row_per_shape(capsys):
    assert gemm_floor.main(["--reps", "1", "--only", "w5", "--max-shapes", "2", "--dtype", "float64"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("W5 ")]
    assert len(rows) == 2
    for line in rows:
        ms_bt, ms_np, pct = re.findall(r"[\d.]+", line)[-3:]
        assert float(ms_bt) > 0 and float(ms_np) > 0 and float(pct) > 0


def test_rejects_bad_reps():
    with pytest.raises(SystemExit):
        gemm_floor.main(["--reps", "0"])
