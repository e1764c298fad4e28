"""A request body checked before it is queued: bounded JSON, typed fields, nulls as defaults, encodable text,
prompt lengths bounded in characters, the work budget."""

import json

import pytest

from elfreg.serve.validate import (Limits, RequestError, chat_request, check_work, completion_request, parse_body,
                                   prompt_char_bound, sampler_options)


@pytest.mark.parametrize("raw, says", [(b"[" * 50_000, "nested too deeply"), (b"1" * 5000, "not valid JSON"),
                                       (b'{"w": -Infinity}', "-Infinity"), (b"\xff", "not valid JSON"),
                                       (b"{", "not valid JSON")])
def test_bodies_that_json_cannot_take_are_request_errors(raw, says):
    with pytest.raises(RequestError, match=says) as info:
        parse_body(raw)
    assert info.value.status == 400


def test_sampler_fields_are_typed_and_null_is_the_default():
    assert sampler_options({"nfe": 8, "w": 2, "drop_reg": True, "sampler": "renoise", "rho": None}) == \
        {"nfe": 8, "w": 2, "drop_reg": True, "sampler": "renoise"}
    for body in ({"nfe": 8.0}, {"nfe": True}, {"w": "2"}, {"drop_reg": 1}, {"task": 3}, {"seed": 2 ** 70}):
        with pytest.raises(RequestError) as info:
            sampler_options(body)
        assert info.value.param == next(iter(body)), body


def test_prompts_past_the_character_bound_are_refused_before_tokenizing(tiny_lm_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    bound = prompt_char_bound(tok, 16)
    longest = max(tok.get_vocab(), key=len)
    # the bound is safe: the densest text of 16 tokens (the vocabulary's longest entry, repeated) is within it
    densest = tok.convert_tokens_to_string([longest] * 16)
    assert len(tok(densest, add_special_tokens=False)["input_ids"]) <= 16 and len(densest) <= bound
    limits = Limits(max_prompt_chars=bound)
    with pytest.raises(RequestError) as info:
        completion_request({"prompt": "a" * (bound + 1)}, "m", limits)
    assert info.value.code == "context_length_exceeded" and info.value.param == "prompt"
    with pytest.raises(RequestError, match="cannot be encoded as UTF-8") as info:
        chat_request({"messages": [{"role": "user", "content": "x\ud800"}]}, "m", limits)
    assert info.value.param == "messages"


def test_the_work_budget_counts_rows_times_nfe():
    gen, _ = completion_request(json.loads('{"prompt": ["a", "b"], "n": 4}'), "m", Limits())
    check_work(gen, 64, Limits(max_work=512))
    with pytest.raises(RequestError, match="8 answers x 65 NFE = 520") as info:
        check_work(gen, 65, Limits(max_work=512))
    assert info.value.code == "work_budget_exceeded"
