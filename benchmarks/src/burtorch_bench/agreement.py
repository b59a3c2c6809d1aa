"""Cross-checks the numbers every framework computed, so that a faster wrong answer shows as wrong.

``check(rows)`` sets ``row["agrees"]`` (True / False) and ``row["agreement"]`` (why) on every row
that ran, for all rows of one workload and configuration.
"""
from __future__ import annotations

import math

from .specs import FLOOR, W1_GOLDEN, W2_GOLDEN, W3_NAMES, close, w1_reference, w2_values

GRAD_KEYS = ("g", "dg/da", "dg/db")


def _reference_row(rows):
    """burtorch's row when it ran, else the first peer that ran (stated in the verdict)."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("entry") != FLOOR]
    for r in ok:
        if r["entry"] == "burtorch" and r.get("name", "burtorch") == "burtorch":
            return r
    return ok[0] if ok else None


def _graph(row, ref, golden, golden_tol):
    nums = row["numbers"]
    bad = []
    for k in GRAD_KEYS:
        if not close(nums[k], golden[k], 0.0, golden_tol):
            bad.append(f"{k}={nums[k]:.10g} vs expected {golden[k]}")
        if ref is not None and ref is not row and not close(nums[k], ref["numbers"][k], 1e-9):
            bad.append(f"{k}={nums[k]:.17g} vs {ref['name']} {ref['numbers'][k]:.17g}")
    return bad


def _saveload(row, ref):
    nums, expected = row["numbers"], w2_values()
    bad = [f"{k}={nums[k]!r} vs {expected[k]!r}" for k in W3_NAMES
           if not close(nums[k], expected[k], 1e-12)]
    if ref is not None and ref is not row:
        bad += [f"{k} differs from {ref['name']}" for k in W3_NAMES
                if not close(nums[k], ref["numbers"][k], 1e-12)]
    return bad


def _training(row, ref):
    nums = row["numbers"]
    before, after, ln_v = nums["loss before"], nums["loss after"], nums["ln V"]
    bad = []
    if not (math.isfinite(before) and math.isfinite(after)):
        return [f"non-finite loss {before} / {after}"]
    if abs(before - ln_v) > 0.7:
        bad.append(f"initial loss {before:.4f} far from ln V = {ln_v:.4f}")
    if not after < before:
        bad.append(f"loss did not decrease: {before:.6f} -> {after:.6f}")
    if ref is not None and ref is not row and not close(before, ref["numbers"]["loss before"], 1e-3):
        bad.append(f"loss {before:.6f} vs {ref['name']} {ref['numbers']['loss before']:.6f}")
    return bad


def check(workload: str, rows: list) -> None:
    ref = _reference_row(rows)
    w1 = w1_reference()
    assert all(w1[k] == W1_GOLDEN[k] for k in GRAD_KEYS)  # the hand derivation matches the paper
    for row in rows:
        if row.get("status") != "ok":
            continue
        if row.get("entry") == FLOOR:  # times matrix products; trains nothing
            row["agrees"], row["agreement"] = True, "not a trainer: the GEMM floor of the step's shapes"
            continue
        if workload == "tiny":
            bad = _graph(row, ref, W1_GOLDEN, 1e-9)
        elif workload == "small":
            bad = _graph(row, ref, W2_GOLDEN, 5e-5)  # golden figures are printed to 4 decimals
        elif workload == "saveload":
            bad = _saveload(row, ref)
        else:
            bad = _training(row, ref)
        row["agrees"] = not bad
        row["agreement"] = "; ".join(bad) if bad else (
            "reference" if row is ref else f"agrees with {ref['name']}")
