"""Sparse features end to end: CSR products against dense numpy, the LibSVM reader's sparse path
and its errors, the sparse logistic problem's loss, gradients (finite differences, the dense
problem) and smoothness constants, and federated runs on it."""
import numpy as np
import pytest

from burtorch.cli.main import main
from burtorch.fl import Federation, make_compressor, make_method
from burtorch.fl.libsvm import read_libsvm
from burtorch.fl.logistic import LogisticProblem, SparseLogisticProblem
from burtorch.fl.sparse import CSR, gram_top_eigenvalue


def sparse_matrix(m, d, density, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, d)) * (rng.random((m, d)) < density)
    A[m // 2] = 0.0  # an empty row
    return A


def test_csr_products_match_dense():
    A = sparse_matrix(37, 23, 0.2)
    S = CSR.from_dense(A)
    rng = np.random.default_rng(1)
    w, s = rng.standard_normal(23), rng.standard_normal(37)
    assert S.nnz == np.count_nonzero(A)
    assert np.array_equal(S.toarray(), A)
    np.testing.assert_allclose(S.matvec(w), A @ w, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(S.rmatvec(s), A.T @ s, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(S.row_norms_sq(), np.sum(A * A, axis=1), rtol=1e-13)
    rows = np.array([5, 18, 0, 18, 36])
    assert np.array_equal(S.take(rows).toarray(), A[rows])
    assert np.array_equal(S.scale_rows(s).toarray(), A * s[:, None])
    with pytest.raises(IndexError):
        S.take([37])


def test_csr_rejects_inconsistent_arrays():
    with pytest.raises(ValueError, match="indptr"):
        CSR(np.array([0, 2, 1]), np.array([0]), np.array([1.0]), (2, 3))
    with pytest.raises(ValueError, match="column"):
        CSR(np.array([0, 1]), np.array([3]), np.array([1.0]), (1, 3))
    with pytest.raises(ValueError, match="non-finite"):
        CSR(np.array([0, 1]), np.array([0]), np.array([np.inf]), (1, 3))


def test_power_iteration_matches_the_dense_eigenvalue():
    mats = [sparse_matrix(30, 12, 0.3, seed) for seed in range(3)]
    dense = np.linalg.eigvalsh(sum(A.T @ A / len(A) for A in mats) / 3)[-1]
    sparse = [CSR.from_dense(A) for A in mats]
    assert abs(gram_top_eigenvalue(sparse, iters=5000, tol=1e-15) - dense) <= 1e-9 * dense
    quick = gram_top_eigenvalue(sparse)  # the default stopping rule: from below, close
    assert dense * (1 - 1e-3) <= quick <= dense * (1 + 1e-12)


def write_svm(path, A, y):
    lines = []
    for a, label in zip(A, y):
        lines.append(" ".join([f"{label:+g}"] + [f"{j + 1}:{float(a[j])!r}" for j in np.flatnonzero(a)]))
    path.write_text("\n".join(lines) + "\n")


def test_reader_sparse_and_dense_agree_and_errors(tmp_path):
    A = sparse_matrix(40, 9, 0.4)
    y = np.where(np.arange(40) % 3 == 0, 1.0, -1.0)
    path = tmp_path / "a.svm"
    write_svm(path, A, y)
    S, ys = read_libsvm(str(path), sparse=True)
    D, yd = read_libsvm(str(path))
    width = np.flatnonzero(A.any(axis=0)).max() + 1
    assert np.array_equal(D, A[:, :width]) and np.array_equal(S.toarray(), D)
    assert np.array_equal(ys, y) and np.array_equal(yd, y)
    for text, message in [("+1 3:1 3:2\n-1 1:1\n", "index 3 appears twice"), ("nan 1:1\n-1 1:1\n", "label is nan"),
                          ("+1 1:1\ninf 1:1\n", "label is inf")]:
        bad = tmp_path / "bad.svm"
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_libsvm(str(bad), sparse=True)
        with pytest.raises(ValueError, match=message):
            read_libsvm(str(bad))
    unsorted = tmp_path / "unsorted.svm"
    unsorted.write_text("+1 3:2 1:5\n-1 2:1\n")
    S, _ = read_libsvm(str(unsorted), sparse=True)
    assert np.array_equal(S.toarray(), [[5.0, 0, 2.0], [0, 1.0, 0]])


def test_a_bz2_file_reads_as_the_plain_one_and_a_cut_one_is_refused(tmp_path):
    import bz2

    A = sparse_matrix(30, 7, 0.5)
    y = np.where(np.arange(30) % 2 == 0, 1.0, -1.0)
    plain = tmp_path / "a.svm"
    write_svm(plain, A, y)
    packed = tmp_path / "a.svm.bz2"
    packed.write_bytes(bz2.compress(plain.read_bytes()))
    S, ys = read_libsvm(str(packed), sparse=True)
    P, yp = read_libsvm(str(plain), sparse=True)
    assert np.array_equal(S.toarray(), P.toarray()) and np.array_equal(ys, yp)
    cut = tmp_path / "cut.svm.bz2"
    cut.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    with pytest.raises(ValueError, match="not a readable bzip2 file"):
        read_libsvm(str(cut), sparse=True)
    foreign = tmp_path / "foreign.svm.bz2"
    foreign.write_bytes(plain.read_bytes())  # named .bz2, not compressed
    with pytest.raises(ValueError, match="not a readable bzip2 file"):
        read_libsvm(str(foreign), sparse=True)


def test_a_huge_feature_index_stays_sparse(tmp_path):
    path = tmp_path / "wide.svm"
    path.write_text("+1 1:1 1000000:2\n-1 5:1\n+1 7:0.5\n-1 999999:3\n")
    with pytest.raises(ValueError, match="sparse=True"):
        read_libsvm(str(path), max_cells=10**6)  # the dense copy would be 4e6 numbers
    S, y = read_libsvm(str(path), sparse=True)
    assert S.shape == (4, 1_000_000) and S.nnz == 5
    assert main(["fl", "--libsvm", str(path), "--clients", "2", "--rounds", "3", "--method", "ef21",
                 "--compressor", "topk", "--k", "2", "--quiet"]) == 0


def problems(lam=0.1, n=4, split="iid"):
    A = sparse_matrix(60, 15, 0.3, 3)
    y = np.where(np.random.default_rng(4).random(60) < 0.5, 1.0, -1.0)
    return SparseLogisticProblem(CSR.from_dense(A), y, n, split, lam=lam, seed=5), \
        LogisticProblem(A, y, n, split, lam=lam, seed=5)


def test_sparse_problem_matches_the_dense_problem_and_finite_differences():
    sp, de = problems()
    x = np.random.default_rng(6).standard_normal(15)
    from burtorch.fl.client import ClientGroup
    gs, gd = ClientGroup(sp, make_method("gd", lr=0.1), range(4)), ClientGroup(de, make_method("gd", lr=0.1), range(4))
    for i in range(4):
        for idx in (None, np.array([0, 2, 3])):
            ls, vs = gs.evaluate(i, x, idx)
            ld, vd = gd.evaluate(i, x, idx)
            assert abs(ls - ld) <= 1e-12 * abs(ld)
            np.testing.assert_allclose(vs, vd, rtol=1e-11, atol=1e-13)
        h = 1e-6
        fd = [(gs.evaluate(i, x + h * e)[0] - gs.evaluate(i, x - h * e)[0]) / (2 * h) for e in np.eye(15)]
        np.testing.assert_allclose(gs.evaluate(i, x)[1], fd, rtol=1e-6, atol=1e-8)
    a, b = sp.smoothness(), de.smoothness()
    for u, v in zip((a.L, a.L_tilde), (b.L, b.L_tilde)):  # power iteration's stopping rule
        assert v * (1 - 1e-3) <= u <= v * (1 + 1e-12)
    assert abs(a.L_max - b.L_max) <= 1e-12 * b.L_max


def test_federated_runs_on_sparse_and_dense_data_agree():
    sp, de = problems(split="label")
    runs = []
    for prob in (sp, de):
        method = make_method("ef21", lr=0.5, compressor=make_compressor("topk", 15, 3))
        with Federation(prob, method, seed=7) as fed:
            fed.run(30)
            runs.append(fed.records)
    for r, q in zip(*runs):
        assert r["bits"] == q["bits"]
        assert abs(r["loss"] - q["loss"]) <= 1e-9 * abs(q["loss"])
        assert abs(r["grad_norm"] - q["grad_norm"]) <= 1e-7 * q["grad_norm"] + 1e-13
    assert runs[0][-1]["grad_norm"] < runs[0][0]["grad_norm"]
