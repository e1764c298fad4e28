"""The built-in demo task: determinism, disjoint splits, scoring, and canvas fit with SmolLM2's tokenizer."""

from __future__ import annotations

import random

import pytest

from elfreg.tasks.synthetic import extract_answer
from elfreg.tasks.chain import (ChainProblem, ChainTaskConfig, chain_correct, format_prompt, make_split,
                              random_problem, reference_response, score, split_of)


def test_hand_built_problem():
    p = ChainProblem((("d", "5"), ("e", "c"), ("a", "3"), ("b", "d"), ("c", "a"), ("f", "b")), "e")
    assert format_prompt(p) == "d=5,e=c,a=3,b=d,c=a,f=b. e?"
    assert reference_response(p) == "e=c=a=3\n#### 3"
    assert p.answer == "3"


def test_same_seed_same_problems_other_seed_differs():
    a = make_split(50, seed=7, split="train")
    assert a == make_split(50, seed=7, split="train")
    assert a != make_split(50, seed=8, split="train")


def test_splits_disjoint_and_labelled():
    train = {format_prompt(p) for p in make_split(2000, 0, "train")}
    test_probs = make_split(300, 0, "test") + make_split(300, 1, "test")
    assert len(train) == 2000  # distinct within a split
    assert not train & {format_prompt(p) for p in test_probs}
    assert all(split_of(p) == "test" for p in test_probs)
    # The hash partition puts about 1 in test_buckets of random problems into test.
    rng = random.Random(0)
    frac = sum(split_of(random_problem(rng)) == "test" for _ in range(4000)) / 4000
    assert 0.07 < frac < 0.13


@pytest.mark.parametrize("cfg", [ChainTaskConfig(), ChainTaskConfig(hops=3, distractor_hops=1),
                                 ChainTaskConfig(hops=1, distractor_hops=0),
                                 ChainTaskConfig(hops=1, distractor_hops=1, distractors=2)])
def test_reference_scores_right_and_wrong_digits_score_zero(cfg):
    for p in make_split(100, 3, "train", cfg) + make_split(20, 3, "test", cfg):
        chain = p.chain()
        assert len(chain) == cfg.hops + 2 and chain[0] == p.query and chain[-1] == p.answer
        ref = reference_response(p)
        assert extract_answer(ref) == p.answer and score(ref, p) and chain_correct(ref, p)
        wrong = str((int(p.answer) + 1) % 10)
        assert not score(ref.replace(f"#### {p.answer}", f"#### {wrong}"), p)
        assert not score(ref.rsplit("\n", 1)[0], p)  # no final line: no answer
        skipped = "=".join(chain[:1] + chain[2:]) + f"\n#### {p.answer}"  # right digit, a hop left out
        assert score(skipped, p) and not chain_correct(skipped, p)
        # The distractor root is a digit in the prompt that is not the answer.
        roots = [rhs for _, rhs in p.assignments if rhs.isdigit()]
        assert len(roots) == 1 + cfg.distractors and len(set(roots)) == len(roots) and p.answer in roots


def test_answer_needs_the_chain_not_position():
    # Across problems the answer digit sits at varying prompt positions and the distractor digit is never it.
    probs = make_split(300, 0, "train")
    first_digit = [next(rhs for _, rhs in p.assignments if rhs.isdigit()) for p in probs]
    share = sum(f == p.answer for f, p in zip(first_digit, probs)) / len(probs)
    assert 0.3 < share < 0.7


def test_bad_inputs():
    with pytest.raises(ValueError, match="split"):
        make_split(3, 0, "valid")
    with pytest.raises(ValueError, match="hops"):
        ChainTaskConfig(hops=0)
    with pytest.raises(ValueError, match="letters"):
        ChainTaskConfig(hops=3, distractor_hops=2, distractors=2)
    with pytest.raises(ValueError, match="never assigned"):
        ChainProblem((("a", "b"),), "a").answer
    with pytest.raises(ValueError, match="cycle"):
        ChainProblem((("a", "b"), ("b", "a")), "a").answer


@pytest.mark.slow
def test_tokenised_lengths_fit_canvas():
    from helpers import smollm2_tokenizer
    from elfreg.data.canvas import CanvasConfig, build_canvas

    tok = smollm2_tokenizer()
    assert tok.eos_token_id == 2
    cfg = ChainTaskConfig()
    canvas_cfg = CanvasConfig(canvas_len=40, prompt_cap=32)
    for p in make_split(200, 0, "train", cfg) + make_split(50, 0, "test", cfg):
        c = build_canvas(format_prompt(p), reference_response(p), tok, canvas_cfg)
        # One token per letter, digit, '=' and ',': the lengths follow from the structure.
        assert c.prompt_len == 4 * (cfg.hops + cfg.distractor_hops + 2) - 1 + 3  # ". e?" is 3 tokens
        assert c.content_len == 2 * (cfg.hops + 1) + 1 + 4
        assert tok.decode(c.input_ids[c.prompt_len:c.prompt_len + c.content_len]) == reference_response(p)
