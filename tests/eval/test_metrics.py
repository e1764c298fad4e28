import math
from fractions import Fraction

import pytest

from elfreg.eval.metrics import pass_at_k, summarize


@pytest.mark.parametrize("n, c, k, expected", [
    (16, 4, 1, Fraction(4, 16)),                      # pass@1 = c / n
    (4, 1, 2, 1 - Fraction(3, 6)),                    # 1 - C(3,2)/C(4,2)
    (16, 4, 4, 1 - Fraction(495, 1820)),              # 1 - C(12,4)/C(16,4)
    (16, 1, 10, Fraction(10, 16)),                    # c = 1: 1 - C(15,10)/C(16,10) = k/n
    (16, 3, 10, 1 - Fraction(math.comb(13, 10), math.comb(16, 10))),  # 1 - 286/8008
    (5, 2, 3, 1 - Fraction(1, 10)),                   # 1 - C(3,3)/C(5,3)
    (16, 0, 1, Fraction(0)), (16, 0, 10, Fraction(0)), (16, 0, 16, Fraction(0)),  # c = 0
    (16, 7, 10, Fraction(1)),                         # n - c = 9 < k: every 10-subset holds a correct one
    (16, 16, 16, Fraction(1)), (10, 1, 10, Fraction(1)),
])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-15)


def test_pass_at_k_is_stable_for_tiny_and_huge_values():
    # naive float 1 - C(n-c,k)/C(n,k) gives 1.0000000000287557e-06 here; the exact-integer form rounds once
    assert pass_at_k(10**6, 1, 1) == 1e-6
    # C(3000, 1500) overflows a float; C(n-2,k)/C(n,k) = (n-k)(n-k-1) / (n(n-1))
    assert pass_at_k(3000, 2, 1500) == pytest.approx(1 - 1500 * 1499 / (3000 * 2999), rel=1e-15)


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="exceeds"):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="k >= 1"):
        pass_at_k(3, 1, 0)
    with pytest.raises(ValueError, match="integer"):
        pass_at_k(3, 1, 1.5)


def test_summarize_mean_and_std_across_seeds():
    # seed 0: 2/2 correct, seed 1: 0/2 -> per-seed 1.0 and 0.0; mean 0.5, population std 0.5
    table = {"a": {0: True, 1: False}, "b": {0: True, 1: False}}
    s = summarize(table, ks=(1, 2))
    assert s["pass@1"] == pytest.approx(0.5)
    assert s["pass@1_std_across_seeds"] == pytest.approx(0.5)
    assert s["pass@1_per_seed"] == [1.0, 0.0]
    assert s["pass@2"] == pytest.approx(1.0)
    assert s["ks"] == [1, 2]


def test_summarize_any_list_of_k_is_the_mean_over_problems():
    # 16 samples: problem a has 4 correct, b has 0, c has 16
    table = {"a": {s: s < 4 for s in range(16)}, "b": {s: False for s in range(16)},
             "c": {s: True for s in range(16)}}
    s = summarize(table, ks=(10, 1, 4))
    assert s["ks"] == [1, 4, 10]
    assert s["pass@1"] == pytest.approx((4 / 16 + 0 + 1) / 3)
    assert s["pass@4"] == pytest.approx((1 - 495 / 1820 + 0 + 1) / 3)
    assert s["pass@10"] == pytest.approx((1 - math.comb(12, 10) / math.comb(16, 10) + 0 + 1) / 3)
    with pytest.raises(ValueError, match="pass@17 needs at least 17 samples"):
        summarize(table, ks=(1, 17))
