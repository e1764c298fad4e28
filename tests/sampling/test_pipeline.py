import pytest

from elfreg.sampling.config import SamplerConfig

from ._fixtures import PROMPTS, pipeline, strip_timing


def test_records_hold_every_setting_and_nfe():
    cfg = SamplerConfig(sampler="renoise", nfe=5, rho=3, w=2.0, seed=4)
    recs = list(pipeline(cfg, batch_size=3).generate(PROMPTS[:2], samples=2))
    assert [(r["prompt_index"], r["sample_index"]) for r in recs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in recs:
        for k, v in cfg.to_dict().items():
            assert r[k] == v
        assert r["nfe_spent"] == 5 and r["denoiser_calls"] == 4 and r["decoder_calls"] == 1
        assert 0 < r["exit_time"] < 1 and r["encoder_seconds"] >= 0 and r["sampler_seconds"] > 0
        assert isinstance(r["response"], str) and 0 not in r["response_token_ids"]  # 0 = <eos> cut


def test_batch_size_does_not_change_outputs():
    cfg = SamplerConfig(sampler="early-stop", nfe=4, rho=4, seed=1)
    one = strip_timing(pipeline(cfg, batch_size=1).generate(PROMPTS, samples=3))
    seven = strip_timing(pipeline(cfg, batch_size=7).generate(PROMPTS, samples=3))
    assert one == seven and len(one) == 15
    assert len({r["response"] for r in one}) > 1  # not a degenerate constant output


def test_response_text_is_detokenised_answer_up_to_first_eos():
    cfg = SamplerConfig(sampler="full-span", nfe=3)
    pipe = pipeline(cfg)
    rec = next(pipe.generate(PROMPTS[:1], samples=1))
    assert rec["response"] == pipe.tokenizer.decode(rec["response_token_ids"], skip_special_tokens=True)


@pytest.mark.parametrize("prompts, match", [
    ([], "no prompts"), (["one", "  "], ":2: empty prompt"),
    (["one", "one two three four five six seven"], ":2: prompt has 7 tokens"),
])
def test_bad_prompts_rejected_before_work(prompts, match):
    pipe = pipeline(SamplerConfig(nfe=3))
    with pytest.raises(ValueError, match=match):
        pipe.validate(prompts, "p.jsonl")
    assert pipe.counter.count.nfe == 0
