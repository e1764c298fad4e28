"""The token ids a restricted vocabulary head keeps: the templated responses' (or prompts' too) and EOS."""

import pytest

from helpers import make_word_tokenizer
from elfreg.data.vocab import head_token_ids
from elfreg.tasks.formats import apply_template


def test_responses_and_eos_only_unless_prompts_are_asked_for(tmp_path):
    tok = make_word_tokenizer(tmp_path)
    rows = [{"prompt": "what is 2 plus 3 ?", "response": "2 plus 3 is 5", "answer": "5"}]
    ids = head_token_ids(tok, rows, "math")
    _, response = apply_template(rows[0], "math")
    assert ids == sorted(set(tok(response, add_special_tokens=False)["input_ids"]) | {tok.eos_token_id})
    assert tok.convert_tokens_to_ids("what") not in ids   # a prompt-only word
    both = head_token_ids(tok, rows, "math", ("prompt", "response"))
    assert set(ids) < set(both) and tok.convert_tokens_to_ids("what") in both
    with pytest.raises(ValueError, match="parts"):
        head_token_ids(tok, rows, "math", ("answer",))
