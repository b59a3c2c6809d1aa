"""Where clients live: workers are sent their own clients' shards only; the processes executor
runs from a script without a main guard (or says exactly what to add); a --compare on Ray starts
Ray once."""
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from burtorch.cli.main import main
from burtorch.fl import Federation, make_method
from burtorch.fl.logistic import synthetic


def test_a_worker_gets_its_own_shards_only():
    p = synthetic(8, 400, 20, seed=0)
    part = p.only([2, 3])
    assert [s is not None for s in part.shards] == [i in (2, 3) for i in range(8)]
    assert part.shards[2] is p.shards[2] and len(p.shards) == 8 and all(s is not None for s in p.shards)
    assert len(pickle.dumps(part)) < len(pickle.dumps(p)) / 3


def run_script(tmp_path, body):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path)


def test_processes_executor_runs_from_a_script_without_a_main_guard(tmp_path):
    proc = run_script(tmp_path, """
        from burtorch.fl import Federation, make_compressor, make_method
        from burtorch.fl.logistic import synthetic

        p = synthetic(4, 80, 5, seed=0)
        with Federation(p, make_method("ef21", compressor=make_compressor("topk", 5, 1)), executor="processes",
                        workers=2, seed=0) as fed:
            fed.run(3)
        with Federation(p, make_method("ef21", compressor=make_compressor("topk", 5, 1)), seed=0) as ref:
            ref.run(3)
        print("same", (fed.x == ref.x).all())
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "same True"


def test_script_classes_without_a_main_guard_get_told_what_to_add(tmp_path):
    proc = run_script(tmp_path, """
        from burtorch.fl import Federation, make_method
        from burtorch.fl.logistic import LogisticProblem, synthetic


        class Mine(LogisticProblem):  # defined in the script: workers must import the script
            pass


        base = synthetic(4, 80, 5, seed=0)
        p = Mine.__new__(Mine)
        p.__dict__.update(base.__dict__)
        Federation(p, make_method("gd", lr=0.1), executor="processes", workers=2, seed=0)
    """)
    assert proc.returncode != 0
    assert 'if __name__ == "__main__":' in proc.stderr and "EOFError" not in proc.stderr


def test_compare_on_ray_starts_ray_once(monkeypatch, capsys):
    ray = pytest.importorskip("ray")
    inits = []
    real = ray.init
    monkeypatch.setattr(ray, "init", lambda *a, **k: inits.append(1) or real(*a, **k))
    argv = ["fl", "--samples", "80", "--clients", "4", "--dim", "5", "--rounds", "3", "--seed", "2", "--quiet",
            "--k", "1", "--compare", "gd@0.1,ef21,dcgd:topk@0.1"]
    assert main(argv + ["--executor", "ray", "--workers", "2"]) == 0
    on_ray = capsys.readouterr().out
    assert len(inits) == 1 and not ray.is_initialized()
    assert main(argv) == 0
    assert capsys.readouterr().out == on_ray  # and the same numbers as serial


def test_processes_match_serial_with_shards_split():
    p = synthetic(6, 120, 8, seed=3)
    xs = []
    for executor, workers in (("serial", None), ("processes", 3)):
        with Federation(p, make_method("gd", lr=0.5), executor=executor, workers=workers, seed=1) as fed:
            fed.run(4)
            xs.append(fed.x)
    assert np.array_equal(*xs)
