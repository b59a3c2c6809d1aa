"""The native generator under consecutive user seeds: streams that are not shifted copies of each
other, and draws that stay uniform across seeds 0, 1, 2, ... (a chi-square test)."""
import math

import numpy as np

from burtorch.fl import Natural, RandK


def chi_square_tail(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square(dof), by the Wilson-Hilferty cube-root normal approximation
    (accurate to well under the thresholds used here for dof >= 10)."""
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_chi_square_tail_approximation():
    # the chi-square(49) quantiles 0.5 -> 48.335, 0.99 -> 74.919 (tables)
    assert abs(chi_square_tail(48.335, 49) - 0.5) < 0.01
    assert abs(chi_square_tail(74.919, 49) - 0.01) < 0.002


def test_consecutive_seeds_are_not_shifted_streams():
    # x = 1.5 everywhere: Natural rounds each coordinate to 1 or 2 with probability 1/2 from one
    # uniform draw each, so a message spells out its seed's first 32 draws as bits.
    d = 32
    x = np.full(d, 1.5)
    c = Natural(d)
    bits = [c.compress(x, seed=s).dense() > 1.5 for s in range(200)]
    shifted = sum(np.array_equal(bits[s][1:], bits[s + 1][:-1]) for s in range(199))
    same = sum(np.array_equal(bits[s], bits[s + 1]) for s in range(199))
    assert shifted == 0 and same == 0
    # and each message is a fair coin per coordinate
    ones = np.mean(bits)
    assert abs(ones - 0.5) < 5 * math.sqrt(0.25 / (200 * d))


def test_randk_keeps_coordinates_uniformly_over_consecutive_seeds():
    d, n = 50, 40_000
    c = RandK(d, 1)
    x = np.ones(d)
    counts = np.zeros(d)
    for s in range(n):
        counts[c.compress(x, seed=s).indices[0]] += 1
    expected = n / d
    stat = float(np.sum((counts - expected) ** 2 / expected))
    assert chi_square_tail(stat, d - 1) > 1e-4, stat


def test_first_draws_of_consecutive_seeds_are_uncorrelated():
    # Rand-1 over d = 2 coordinates picks coordinate 0 iff its seed's first draw is below 1/2:
    # for consecutive seeds, the pairs (pick(t), pick(t+1)) are independent fair coins.
    n = 20_000
    c = RandK(2, 1)
    x = np.ones(2)
    picks = np.array([int(c.compress(x, seed=s).indices[0]) for s in range(n + 1)])
    pairs = np.bincount(picks[:-1] * 2 + picks[1:], minlength=4).astype(float)
    expected = n / 4
    stat = float(np.sum((pairs - expected) ** 2 / expected))
    assert stat < 21.1, pairs  # chi-square(3) at 1e-4
