"""The adaptive exit rule: exact per-row NFE on scripted answers, rows leaving the batch, invariance, validation."""

import pytest
import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.exit import ExitRule, nfe_summary
from elfreg.sampling.samplers import sample

from ._fixtures import PROMPTS, pipeline, strip_timing
from ._script import ScriptNet, script_batch
from ._standin import StandInConfig, StandInStudent

# decoded answer (token id) of each row at step j = 0, 1, ...; check k decodes step j = k - 1
SETTLES_AT_ONCE = [3] * 20                              # the same answer from the first check on
SETTLES_AT_J5 = [1, 2, 1, 3, 1, 4] + [4] * 14           # changes until step 5, then keeps 4
NEVER = [1, 2] * 10                                     # changes at every check (check_every = 2 sees 2, 2, ...)
NEVER_AT_EVEN_CHECKS = [1, 2, 2, 1] * 5                 # with check_every = 2: checks read j = 1, 3, 5, ... -> 2, 1, 2


def _adaptive(scripts, rows, **kw):
    settings = dict(sampler="adaptive", nfe=20, rho=1, grid="uniform", check_every=2, patience=2, min_nfe=0)
    settings.update(kw)
    net = ScriptNet(scripts, m=settings["rho"] * settings["nfe"])
    x, mask = script_batch(rows)
    out = sample(net, x, mask, SamplerConfig(**settings), [(r, 0) for r in rows])
    return net, out


def test_schedule_of_a_row_that_never_settles_ends_at_max_nfe():
    rule = ExitRule(check_every=2, patience=2, min_nfe=0, max_nfe=20)
    last = rule.schedule[-1]
    # k = 13 denoiser calls and 6 checks (k = 2, 4, ..., 12); one more call and its decode would make 21
    assert (last.k, last.checks, last.check, last.nfe) == (13, 6, False, 20)
    assert [p.k for p in rule.schedule if p.check] == [2, 4, 6, 8, 10, 12]
    assert rule.earliest.k == 6 and rule.earliest.nfe == 9   # three equal checks: k = 2, 4, 6 -> 6 + 3 NFE
    # a budget whose last call is a check: that check's decode is the output, no extra decode
    assert ExitRule(2, 1, 0, 15).schedule[-1] == ExitRule(2, 1, 0, 15).schedule[9] and \
        ExitRule(2, 1, 0, 15).schedule[-1].nfe == 15 and ExitRule(2, 1, 0, 15).schedule[-1].check


def test_exact_per_row_nfe_and_outputs_on_scripted_answers():
    scripts = [SETTLES_AT_ONCE, SETTLES_AT_J5, NEVER_AT_EVEN_CHECKS]
    net, out = _adaptive(scripts, [0, 1, 2])
    # row 0: checks at k = 2, 4, 6 read 3, 3, 3 -> settled at k = 6: 6 denoiser calls + 3 decodes
    # row 1: checks read j = 1, 3, 5, 7, 9 -> 2, 3, 4, 4, 4: streaks 0, 0, 0, 1, 2 -> settled at k = 10: 10 + 5
    # row 2: 2, 1, 2, 1, ... never repeats: the budget ends at k = 13 (6 checks + its own decode) = max_nfe 20
    assert out.nfe == [9, 15, 20]
    assert out.count.row_denoiser == [6, 10, 13] and out.count.row_decoder == [3, 5, 7]
    assert out.settled == [True, True, False]
    assert out.answers == [(3, 3), (4, 4), (1, 1)]   # row 2 decodes step j = 12 at its last call k = 13
    assert out.token_ids[:, 1:].tolist() == [[3, 3], [4, 4], [1, 1]]
    assert out.exit_time.tolist() == pytest.approx([5 / 19, 9 / 19, 12 / 19])
    # finished rows left the batch: every call computed exactly the rows still on the path
    den = [ids for kind, ids in net.calls if kind == "denoiser"]
    assert den == [[0, 1, 2]] * 6 + [[1, 2]] * 4 + [[2]] * 3
    dec = [ids for kind, ids in net.calls if kind == "decoder"]
    assert dec == [[0, 1, 2]] * 3 + [[1, 2]] * 2 + [[2]] * 2
    assert out.count.denoiser_calls == 13 and out.count.decoder_calls == 7


def test_min_nfe_delays_the_exit_and_patience_one_stops_at_the_first_repeat():
    _, out = _adaptive([SETTLES_AT_ONCE, SETTLES_AT_J5, NEVER_AT_EVEN_CHECKS], [0, 1, 2], min_nfe=12)
    # row 0 settles at k = 6 (9 NFE) but waits for 12 NFE: the check at k = 8 (8 + 4); row 1 is past 12 at k = 10
    assert out.nfe == [12, 15, 20] and out.settled == [True, True, False]
    _, out = _adaptive([SETTLES_AT_ONCE, SETTLES_AT_J5, NEVER], [0, 1, 2], patience=1)
    # patience 1: two equal checks; row 1 at k = 8 (8 + 4); NEVER reads 2, 2, ... at j = 1, 3: it settles at k = 4
    # although its answer changes at every step: the checks never see it (a wrong answer settling early)
    assert out.nfe == [6, 12, 6] and out.settled == [True, True, True]


def test_a_row_without_an_answer_never_settles():
    net = ScriptNet([SETTLES_AT_ONCE], m=20)
    x, mask = script_batch([0])
    cfg = SamplerConfig(sampler="adaptive", nfe=20, rho=1, grid="uniform", check_every=2, patience=2)
    out = sample(net, x, mask, cfg, [(0, 0)], answer_of=lambda ids, rows: [None] * len(rows))
    assert out.nfe == [20] and out.settled == [False] and out.answers == [None]


def test_rows_settle_the_same_alone_or_in_any_batch():
    scripts = [SETTLES_AT_ONCE, SETTLES_AT_J5, NEVER_AT_EVEN_CHECKS]
    _, together = _adaptive(scripts, [2, 0, 1])
    for i, r in enumerate([2, 0, 1]):
        _, alone = _adaptive(scripts, [r])
        assert alone.nfe[0] == together.nfe[i] and torch.equal(alone.token_ids[0], together.token_ids[i])


def test_adaptive_batch_size_one_and_seven_give_identical_outputs_and_nfe():
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, mcfg.max_len, mcfg.feature_dim, generator=g)
    mask = torch.zeros(7, mcfg.max_len, dtype=torch.bool)
    for i, n in enumerate([1, 2, 3, 4, 5, 2, 3]):
        mask[i, :n] = True
    keys = [(i // 2, i % 2) for i in range(7)]
    cfg = SamplerConfig(sampler="adaptive", nfe=24, rho=2, seed=9, check_every=1, patience=1)
    big = sample(net, x, mask, cfg, keys)
    assert len(set(big.nfe)) > 1 and min(big.nfe) < 24   # rows leave at different steps (not a degenerate case)
    for i in range(7):
        one = sample(net, x[i:i + 1], mask[i:i + 1], cfg, keys[i:i + 1])
        assert one.nfe == [big.nfe[i]] and one.settled == [big.settled[i]]
        assert torch.equal(one.token_ids[0], big.token_ids[i])
        assert torch.allclose(one.text_state[0], big.text_state[i], atol=1e-6)
        assert one.exit_time[0] == big.exit_time[i]


def test_adaptive_runs_a_prefix_of_the_early_stop_grid_of_its_budget():
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    x, mask = torch.randn(2, mcfg.max_len, mcfg.feature_dim), torch.zeros(2, mcfg.max_len, dtype=torch.bool)
    mask[:, :3] = True
    keys = [(0, 0), (1, 0)]
    cfg = SamplerConfig(sampler="adaptive", nfe=16, rho=4, seed=2, check_every=2, patience=2)
    out = sample(net, x, mask, cfg, keys, answer_of=lambda ids, rows: [None] * len(rows))
    es = sample(net, x, mask, SamplerConfig(sampler="early-stop", nfe=16, rho=4, seed=2), keys)
    # never settled: the budget's last call is the check at k = 10 (11 + 5 checks + 1 > 16), 10 + 5 = 15 NFE
    k = cfg.exit_rule().max_calls
    assert k == 10 and out.nfe == [15, 15] and out.settled == [False, False]
    assert torch.equal(out.times, es.times[:, :k]) and torch.equal(out.exit_time, es.times[:, k - 1])


def test_pipeline_records_per_row_nfe_and_batch_size_does_not_change_them():
    cfg = SamplerConfig(sampler="adaptive", nfe=16, rho=2, seed=1, check_every=1, patience=1)
    one = strip_timing(pipeline(cfg, batch_size=1).generate(PROMPTS, samples=3))
    seven = strip_timing(pipeline(cfg, batch_size=7).generate(PROMPTS, samples=3))
    assert one == seven and len(one) == 15
    nfe = [r["nfe_spent"] for r in one]
    assert all(r["nfe_spent"] == r["denoiser_calls"] + r["decoder_calls"] <= 16 for r in one)
    assert len(set(nfe)) > 1 and {r["settled"] for r in one} <= {True, False}
    for k in ("check_every", "patience", "min_nfe", "extract"):
        assert all(r[k] == getattr(cfg, k) for r in one)


def test_fixed_samplers_record_n_nfe_per_row():
    recs = list(pipeline(SamplerConfig(sampler="early-stop", nfe=5, rho=2), batch_size=2).generate(PROMPTS, 1))
    assert {r["nfe_spent"] for r in recs} == {5} and all("settled" not in r for r in recs)


def test_nfe_summary():
    s = nfe_summary([9, 15, 20, 9])
    assert s == {"n": 4, "mean": 13.25, "min": 9, "max": 20, "histogram": {9: 2, 15: 1, 20: 1}}
    assert nfe_summary([])["n"] == 0


@pytest.mark.parametrize("kwargs, field", [
    (dict(check_every=0), "check_every"), (dict(check_every=1.5), "check_every"), (dict(patience=0), "patience"),
    (dict(min_nfe=-1), "min_nfe"), (dict(min_nfe=40), "min_nfe"), (dict(nfe=8, check_every=4), "patience"),
    (dict(extract="regex"), "extract"),
])
def test_bad_adaptive_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        SamplerConfig(**{"sampler": "adaptive", "nfe": 32, **kwargs})


def test_fixed_samplers_accept_a_rule_that_could_not_fire():
    # the rule's settings are recorded with every sample, but only the adaptive sampler needs them to fit its budget
    assert SamplerConfig(sampler="early-stop", nfe=4, check_every=4, patience=3).exit_rule() is None


def test_counter_refuses_a_call_on_other_rows_than_selected():
    from elfreg.sampling.network import NFECounter

    mcfg = StandInConfig()
    counter = NFECounter(StandInStudent(mcfg))
    counter.reset(3)
    counter.select([0, 2])
    x = torch.zeros(3, mcfg.max_len, mcfg.feature_dim)
    with pytest.raises(RuntimeError, match="a call on 3 rows, but 2 rows are selected"):
        counter(x, x, torch.zeros(3), torch.ones(3))
    counter(x[:2], x[:2], torch.zeros(2), torch.ones(2), reg=torch.zeros(2, mcfg.reg_dim),
            reg_q=torch.zeros(2, mcfg.reg_dim))
    assert counter.count.row_nfe == [1, 0, 1] and counter.count.nfe == 1
