"""half_storage's byte accounting (its training runs are the benchmark's, not CI's)."""
import pytest

from burtorch_bench import half_storage


def test_half_storage_counts_two_bytes_a_number_and_the_master_copy():
    f32 = half_storage.step_graph_bytes("float32", 2, "sgd")
    for name in ("bfloat16", "float16"):
        half = half_storage.step_graph_bytes(name, 2, "sgd")
        assert 2 * half["values+grads"] == f32["values+grads"]
        assert half["records+args"] == f32["records+args"]
        assert half["per-node bookkeeping"] == f32["per-node bookkeeping"]
        assert f32["optimizer state"] == 0 and half["optimizer state"] == 4 * 46_289  # SGD: the master only


def test_half_storage_refuses_a_baseline_other_than_float32(capsys):
    with pytest.raises(SystemExit) as e:
        half_storage.main(["--dtypes", "bfloat16,float32"])
    assert e.value.code == 2
    assert "float32 first" in capsys.readouterr().err
