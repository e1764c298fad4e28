import math

import pytest

from elfreg.eval.metrics import pass_at_k, summarize


def test_pass_at_k_hand_values():
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(16, 0, 8) == 0.0
    assert pass_at_k(16, 9, 8) == 1.0  # n - c < k
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - math.comb(3, 3) / math.comb(5, 3))


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="exceeds"):
        pass_at_k(3, 1, 4)


def test_summarize_mean_and_std_across_seeds():
    # seed 0: 2/2 correct, seed 1: 0/2 -> per-seed 1.0 and 0.0; mean 0.5, population std 0.5
    table = {"a": {0: True, 1: False}, "b": {0: True, 1: False}}
    s = summarize(table, ks=(1, 2))
    assert s["pass@1"] == pytest.approx(0.5)
    assert s["pass@1_std_across_seeds"] == pytest.approx(0.5)
    assert s["pass@1_per_seed"] == [1.0, 0.0]
    assert s["pass@2"] == pytest.approx(1.0)
