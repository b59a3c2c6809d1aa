"""The reproduction page's pipeline (docs/guides/reproduce-ef21.md) at a small size: a generated
sparse set written as LibSVM reads back as the same matrix, and the page's command (tuned GD and
EF21 compared in bits to a target) runs on it."""
import numpy as np

from burtorch.cli.main import main
from burtorch.fl.libsvm import read_libsvm
from burtorch_bench.fl_sparse import synthetic_csr, write_libsvm


def test_written_libsvm_reads_back_and_the_page_command_runs(tmp_path, capsys):
    A, y = synthetic_csr(300, 4000, 0.003, seed=1)
    path = tmp_path / "small.txt"
    write_libsvm(str(path), A, y)
    B, z = read_libsvm(str(path), sparse=True)
    assert np.array_equal(z, y) and np.array_equal(B.indptr, A.indptr) and np.array_equal(B.indices, A.indices)
    assert np.allclose(B.data, A.data, rtol=1e-5, atol=0)
    assert B.shape[0] == A.shape[0] and B.shape[1] <= A.shape[1]  # the file knows the largest index used
    out = tmp_path / "run.json"
    assert main(["fl", "--libsvm", str(path), "--clients", "4", "--split", "iid", "--seed", "0", "--k", "20",
                 "--compare", "gd,ef21", "--tune", "1,4", "--tune-rounds", "10", "--rounds", "30", "--eval-every",
                 "5", "--target", "1.0", "--json", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("tuned ") == 2 and printed.count("grad norm <= 1") == 2
    assert out.stat().st_size > 0
