"""The default demo task: arithmetic chains — hand-built problems, the enumerated space, splits, scoring."""

from __future__ import annotations

import pytest

from elfreg.tasks.synthetic import extract_answer
from elfreg.tasks.arith import (ArithProblem, ArithTaskConfig, all_problems, chain_correct,
                               format_prompt, make_split, reference_response, score, split_of, worked_steps)


def test_hand_built_problem():
    p = ArithProblem(3, (("+", 4), ("-", 2)))
    assert format_prompt(p) == "3+4-2=?"
    assert reference_response(p) == "3+4=7,7-2=5\n#### 5"
    assert p.values() == [3, 7, 5] and p.answer == "5"


def test_space_is_every_single_digit_chain_and_splits_partition_it():
    # From any digit v there are 10 - v additions and v + 1 subtractions that stay in 0..9: 11 per step.
    for ops in (1, 2, 3):
        cfg = ArithTaskConfig(ops=ops)
        space = all_problems(cfg)
        assert len(space["train"]) + len(space["test"]) == 10 * 11 ** ops
        prompts = [format_prompt(p) for s in ("train", "test") for p in space[s]]
        assert len(set(prompts)) == len(prompts)
        assert all(split_of(p, cfg) == s for s in ("train", "test") for p in space[s])
        if ops > 1:  # 110 one-step problems are too few for the fraction to settle
            assert 0.05 < len(space["test"]) / len(prompts) < 0.15  # 1 in test_buckets


def test_same_seed_same_problems_other_seed_differs():
    a = make_split(50, seed=7, split="train")
    assert a == make_split(50, seed=7, split="train")
    assert a != make_split(50, seed=8, split="train")
    assert len({format_prompt(p) for p in make_split(1000, 0, "train")}) == 1000


@pytest.mark.parametrize("ops", [2, 3])
def test_reference_scores_right_and_wrong_answers_score_zero(ops):
    cfg = ArithTaskConfig(ops=ops)
    for p in make_split(100, 3, "train", cfg) + make_split(20, 3, "test", cfg):
        ref = reference_response(p)
        assert extract_answer(ref) == p.answer and score(ref, p) and chain_correct(ref, p)
        assert len(worked_steps(p).split(",")) == ops
        wrong = str((int(p.answer) + 1) % 10)
        assert not score(ref.replace(f"#### {p.answer}", f"#### {wrong}"), p)
        assert not score(worked_steps(p), p)  # no final line: no answer
        first = worked_steps(p).split(",")[0]
        bad_step = ref.replace(first, first[:-1] + str((int(first[-1]) + 1) % 10), 1)  # a wrong first result
        assert score(bad_step, p) and not chain_correct(bad_step, p)


def test_the_answer_depends_on_every_step():
    # Not a shortcut: the start digit or the last operand alone predicts the answer far below certainty.
    probs = make_split(1000, 0, "train")
    by_start = sum(p.answer == str(p.start) for p in probs) / len(probs)
    assert by_start < 0.3


def test_bad_inputs():
    with pytest.raises(ValueError, match="split"):
        make_split(3, 0, "valid")
    with pytest.raises(ValueError, match=r"n must be in 0\.\.\d+ \(the test split"):
        make_split(10_000, 0, "test")
    with pytest.raises(ValueError, match="ops"):
        ArithTaskConfig(ops=0)
    with pytest.raises(ValueError, match="single digit"):
        ArithProblem(8, (("+", 4),)).answer
    with pytest.raises(ValueError, match="sign"):
        ArithProblem(8, (("*", 1),)).answer


@pytest.mark.slow
def test_tokenised_lengths_fit_canvas():
    from helpers import smollm2_tokenizer
    from elfreg.data.canvas import CanvasConfig, build_canvas
    from elfreg.tasks.formats import apply_template

    tok = smollm2_tokenizer()
    cfg = ArithTaskConfig()
    canvas_cfg = CanvasConfig(canvas_len=30, prompt_cap=14)
    for p in make_split(200, 0, "train", cfg) + make_split(50, 0, "test", cfg):
        prompt, response = apply_template({"prompt": format_prompt(p), "response": reference_response(p),
                                           "answer": p.answer}, "math")
        c = build_canvas(prompt, response, tok, canvas_cfg)
        # One token per digit, sign, '=', ',' and '?': the lengths follow from the structure.
        assert len(tok(format_prompt(p), add_special_tokens=False)["input_ids"]) == 2 * cfg.ops + 3
        assert c.content_len == 6 * cfg.ops - 1 + 4  # 'a+b=c' per step, commas, then '\n', '####', ' ', digit
        assert tok.decode(c.input_ids[c.prompt_len:c.prompt_len + c.content_len]) == response
        assert c.prompt_len + c.content_len < canvas_cfg.canvas_len  # room for at least one EOS
