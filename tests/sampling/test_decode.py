"""The answers the adaptive exit compares, read from decoded responses."""

import torch

from elfreg.sampling.decode import text_answers
from elfreg.tasks.answers import extractor

from ._standin import tiny_tokenizer


def test_text_answers_cut_at_eos_skip_the_prompt_and_apply_finish():
    tok = tiny_tokenizer()
    ids = torch.tensor([[2, 8, 0, 9], [3, 2, 9, 8]])         # "one five <eos> six", "two one six five"
    mask = torch.tensor([[True, False, False, False], [True, True, False, False]])
    fn = text_answers(tok, mask, extractor("text"))
    assert fn(ids, [0, 1]) == ["five", "six five"]
    assert fn(ids[1:], [1]) == ["six five"]                    # rows index the batch's prompt mask
    cut = text_answers(tok, mask, extractor("text"), finish=lambda r, resp: tok.decode(resp[:1]))
    assert cut(ids, [0, 1]) == ["five", "six"]
