import math

import pytest
import torch

from elfreg.diagnose.report import SampleRow, summarise, summarise_acceleration


def _row(p, answers, correct, agree=(False, True), err=(4.0, 0.0), t=(0.1, 1.0)):
    return SampleRow(prompt_index=p, seed=0, times=list(t), text_error=list(err), joint_error=None,
                     stable=[0.5, 1.0], response_agree=list(agree), answers=list(answers), correct=correct,
                     lengths=[3, 4])


def test_summary_means_agreement_accuracy_and_flips():
    rows = [
        _row(0, ["7", "7"], [False, True], err=(2.0, 0.0)),   # answer agrees, flip up
        _row(1, ["3", "5"], [True, False], err=(4.0, 0.0)),   # answer changes, flip down
        _row(2, ["5", "5"], [True, True], agree=(True, True)),
        _row(3, [None, None], [False, False]),                # no answer: never counts as agreement
    ]
    s = summarise(rows, [4, 16], sigma=2.0)
    early, end = s
    assert early["nfe"] == 4 and early["n"] == 4 and early["n_scored"] == 4
    assert early["text_error_mean"] == pytest.approx((2 + 4 + 4 + 4) / 4)
    assert early["answer_agreement"] == pytest.approx(2 / 4) and end["answer_agreement"] == pytest.approx(3 / 4)
    assert early["response_agreement"] == pytest.approx(1 / 4) and end["response_agreement"] == 1.0
    assert early["accuracy"] == pytest.approx(2 / 4) and end["accuracy"] == pytest.approx(2 / 4)
    assert early["flips_vs_end"] == {"up": 1, "down": 1, "n": 4, "net": 0.0}
    assert early["snr_mean"] == pytest.approx(0.1 ** 2 / (4 * 0.9 ** 2))
    assert end["snr_mean"] is None and early["answer_rate"] == pytest.approx(3 / 4)


def test_summary_without_reference_answers():
    s = summarise([_row(0, ["1", "1"], None)], [2, 8], sigma=2.0)
    assert s[0]["accuracy"] is None and s[0]["flips_vs_end"] is None and s[0]["n_scored"] == 0
    with pytest.raises(ValueError, match="no samples"):
        summarise([], [2], 2.0)


def test_acceleration_summary():
    times = torch.tensor([0.0, 0.5], dtype=torch.float64)
    text = torch.tensor([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]], dtype=torch.float64)
    s = summarise_acceleration(times, text, text / 2, text * 2, sigma=2.0)
    assert s[0]["text_mean"] == pytest.approx(3.0) and s[0]["text_median"] == 2.0
    assert s[0]["joint_median"] == 4.0 and s[1]["token_mean"] == pytest.approx(0.5)
    assert s[0]["snr"] == 0.0 and math.isclose(s[1]["snr"], 0.25 / (4 * 0.25))
