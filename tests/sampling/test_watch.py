"""Watching the path (elfreg.sampling.watch): views at every k-th step from the one sampler loop, answers bit for
bit the same as without watching, the views' decoder calls counted apart from the NFE."""

import pytest
import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.network import NFECounter
from elfreg.sampling.samplers import sample
from elfreg.sampling.watch import Watch, step_hook

from ._fixtures import PROMPTS, pipeline, strip_timing

SAMPLERS = [dict(sampler="early-stop", nfe=7, rho=2), dict(sampler="full-span", nfe=7),
            dict(sampler="renoise", nfe=7, rho=2, eta=0.5), dict(sampler="adaptive", nfe=9, rho=2, check_every=2,
                                                                  patience=1, min_nfe=3)]
KEYS = [(0, 0), (0, 1), (1, 0), (2, 0), (3, 0)]


@pytest.mark.parametrize("opts", SAMPLERS, ids=[o["sampler"] for o in SAMPLERS])
@pytest.mark.parametrize("every", [1, 3])
def test_watching_changes_no_answer_and_costs_apart_from_the_nfe(opts, every):
    cfg = SamplerConfig(seed=5, **opts)
    plain = pipeline(cfg, 8).run_rows([PROMPTS[p] for p, _ in KEYS], KEYS)
    seen = []
    watched = pipeline(cfg, 8).run_rows([PROMPTS[p] for p, _ in KEYS], KEYS, watch=Watch(seen.extend, every))
    views = [v for v in seen]
    assert strip_timing([{k: v for k, v in r.items() if k != "view_calls"} for r in watched]) == strip_timing(plain)
    for i, rec in enumerate(watched):
        mine = [v for v in views if (v.prompt_index, v.sample_index) == KEYS[i]]
        assert rec["view_calls"] == len(mine) > 0   # one view decode per view, none of it in nfe_spent
        steps = [v.step for v in mine]
        assert steps == sorted(steps) and all(s % every == 0 or s == v.steps for s, v in zip(steps, mine))
        assert not any(mine[0].stable) and all(len(v.stable) == len(v.token_ids) == len(v.tokens) for v in mine)
        assert all("".join(v.tokens) == v.text for v in mine)
        ts = [v.t for v in mine]
        assert ts == sorted(ts) and all(0 <= t < 1 for t in ts)
        if cfg.sampler in ("early-stop", "renoise"):   # the last view decodes the state the answer is decoded from
            assert mine[-1].step == cfg.nfe - 1 and mine[-1].token_ids == rec["response_token_ids"]
            assert mine[-1].text == rec["response"]


def test_stability_marks_the_tokens_that_kept_their_place():
    cfg = SamplerConfig(seed=1, sampler="early-stop", nfe=12, rho=2)
    seen = []
    pipeline(cfg, 8).run_rows(PROMPTS[:2], [(0, 0), (1, 0)], watch=Watch(seen.extend, 1))
    for key in (0, 1):
        mine = [v for v in seen if v.prompt_index == key]
        for before, now in zip(mine, mine[1:]):
            assert now.stable == [i < len(before.token_ids) and before.token_ids[i] == tok
                                  for i, tok in enumerate(now.token_ids)]
    assert any(any(v.stable) for v in seen)


def test_the_sampler_states_are_bit_for_bit_with_a_watcher():
    """At the loop itself: decoded states and NFE equal, the view decodes counted in view_calls only."""
    from ._fixtures import bundle

    net, enc, tok, _ = bundle()
    enc_out = enc.encode_prompts(PROMPTS[:3])
    x, mask = enc_out.x_prompt, enc_out.prompt_mask
    cfg = SamplerConfig(seed=2, sampler="full-span", nfe=6)
    keys = [(0, 0), (1, 0), (2, 0)]
    a = sample(NFECounter(net), x, mask, cfg, keys)
    b = sample(NFECounter(net), x, mask, cfg, keys, on_step=step_hook(Watch(lambda v: None, 2), keys, mask, tok))
    assert torch.equal(a.text_state, b.text_state) and torch.equal(a.token_ids, b.token_ids)
    assert b.count.row_nfe == a.count.row_nfe == [6, 6, 6]
    assert b.count.view_calls == 3 and b.count.row_view == [3, 3, 3] and a.count.view_calls == 0   # steps 2, 4, 5


def test_per_row_watchers_see_only_their_rows_and_every_is_checked():
    cfg = SamplerConfig(seed=0, sampler="early-stop", nfe=5, rho=2)
    mine, theirs = [], []
    one, two = Watch(mine.extend, 1), Watch(theirs.extend, 2)
    recs = pipeline(cfg, 8).run_rows(PROMPTS[:3], [(0, 0), (1, 0), (0, 0)], watch=[one, None, two])
    assert {v.prompt_index for v in mine} == {0} and [v.step for v in mine] == [1, 2, 3, 4]
    assert [v.step for v in theirs] == [2, 4]
    assert [r["view_calls"] for r in recs] == [4, 0, 2]
    with pytest.raises(ValueError, match="every"):
        Watch(print, 0)
