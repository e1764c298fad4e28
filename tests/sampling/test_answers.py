"""The answers the adaptive exit compares, and which one a task or benchmark implies."""

import pytest
import torch

from elfreg.sampling.answers import answer_for, extractor, text_answers

from ._standin import tiny_tokenizer


@pytest.mark.parametrize("name, text, want", [
    ("gsm8k", "so 3 + 15 = 18\n#### 18.00", "18"),
    ("gsm8k", "The answer is 1,234.50", "1234.5"),
    ("gsm8k", "no number here", None),
    ("math", "thus \\boxed{\\frac{1}{2}} and \\boxed{3}", "3"),
    ("math", "no box", None),
    ("choice", "The answer is (C).", "C"),
    ("final-line", "3+4=7,7-2=5\n#### 5", "5"),
    ("final-line", "3+4=7,7-2=5", None),
    ("text", "  def f():\n    return 1 \n", "def f():\n    return 1"),
    ("text", "   ", None),
])
def test_extractors(name, text, want):
    assert extractor(name)(text) == want


def test_unknown_extractor_names_the_field():
    with pytest.raises(ValueError, match="^extract: unknown answer extractor 'regex'"):
        extractor("regex")


def test_which_answer_a_task_or_benchmark_implies():
    assert [answer_for(t) for t in ("gsm8k", "GSM8K", "math", "math500", "mmlu", "demo-arith", "code", None)] == \
        ["gsm8k", "gsm8k", "math", "math", "choice", "final-line", "text", "text"]
    assert answer_for("humaneval", "code") == "text" and answer_for("my-bench", "gsm8k") == "gsm8k"
    assert answer_for("my-bench", "exact") == "text"


def test_text_answers_cut_at_eos_skip_the_prompt_and_apply_finish():
    tok = tiny_tokenizer()
    ids = torch.tensor([[2, 8, 0, 9], [3, 2, 9, 8]])         # "one five <eos> six", "two one six five"
    mask = torch.tensor([[True, False, False, False], [True, True, False, False]])
    fn = text_answers(tok, mask, extractor("text"))
    assert fn(ids, [0, 1]) == ["five", "six five"]
    assert fn(ids[1:], [1]) == ["six five"]                    # rows index the batch's prompt mask
    cut = text_answers(tok, mask, extractor("text"), finish=lambda r, resp: tok.decode(resp[:1]))
    assert cut(ids, [0, 1]) == ["five", "six"]
