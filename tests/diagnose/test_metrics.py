"""Stable tokens, response agreement and paired flips on hand-made token sequences (spec §9)."""

import pytest
import torch

from elfreg.diagnose.metrics import answer_agrees, paired_flips, response_agrees, response_of, stable_fractions

EOS = 0


def test_response_of_cuts_at_the_first_eos_and_skips_the_prompt():
    mask = [True, True, False, False, False, False]
    r = response_of([9, 8, 5, 6, EOS, 7], mask, EOS)
    assert r.tokens == (5, 6) and r.has_eos and r.span == 3 and r.length == 2
    r = response_of([9, 8, 5, 6, 7, 3], mask, EOS)
    assert r.tokens == (5, 6, 7, 3) and not r.has_eos and r.span == 4
    r = response_of([9, EOS, EOS, 6, 7, 3], mask, EOS)   # an EOS inside the prompt does not end the response
    assert r.tokens == () and r.has_eos and r.span == 1


def test_response_agreement_needs_tokens_eos_and_length():
    mask = [True, False, False, False, False]
    end = response_of([1, 5, 6, EOS, 2], mask, EOS)
    assert response_agrees(response_of([1, 5, 6, EOS, 9], mask, EOS), end)       # after EOS does not matter
    assert not response_agrees(response_of([1, 5, 6, 4, EOS], mask, EOS), end)    # longer
    assert not response_agrees(response_of([1, 5, 7, EOS, 2], mask, EOS), end)    # a different token
    no_eos = response_of([1, 5, 6, 4, 3], [True, False, False, True, True], EOS)   # same tokens, no EOS
    assert no_eos.tokens == end.tokens and not response_agrees(no_eos, end)


def test_stable_fraction_needs_agreement_now_and_at_every_later_readout():
    end = torch.tensor([1, 2, 3, 4])
    readouts = torch.tensor([
        [1, 2, 3, 4],   # k=0: all equal now, but position 1 changes at k=1 and position 3 at k=2
        [1, 9, 3, 4],   # k=1: position 1 differs; position 3 will differ at k=2
        [1, 2, 3, 7],   # k=2: position 3 differs
        [1, 2, 3, 4],   # k=3 (the end itself)
    ])
    # stable positions: k=0 {0, 2}; k=1 {0, 2}; k=2 {0, 1, 2}; k=3 all
    assert stable_fractions(readouts, end).tolist() == [0.5, 0.5, 0.75, 1.0]
    assert stable_fractions(torch.zeros(3, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long)).tolist() == [1.0] * 3
    with pytest.raises(ValueError, match=r"readouts must be \(R, P\)"):
        stable_fractions(readouts, end[:3])


def test_answer_agreement_needs_two_answers():
    assert answer_agrees("18", "18") and not answer_agrees("18", "17")
    assert not answer_agrees(None, None) and not answer_agrees("1", None)


def test_paired_flips_counts_and_net():
    early = [True, False, False, True, False, True, False]
    end = [True, True, True, False, False, True, True]
    f = paired_flips(early, end)
    assert (f.up, f.down, f.n) == (3, 1, 7)
    assert f.net == pytest.approx(2 / 7)
    assert f.to_dict() == {"up": 3, "down": 1, "n": 7, "net": pytest.approx(2 / 7)}
    # the net change from the counts equals the difference of the two accuracies
    assert f.net == pytest.approx(sum(end) / 7 - sum(early) / 7)
    assert paired_flips([], []).net is None
    with pytest.raises(ValueError, match="differ in length"):
        paired_flips([True], [])
