import pytest
import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.network import NFECounter
from elfreg.sampling.samplers import sample
from elfreg.sampling.seeding import STREAM_NOISE, sample_generator
from elfreg.sampling.updates import euler_step

from ._standin import AffineStandIn, StandInConfig, StandInStudent


def _batch(b, cfg, prompt_lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, cfg.max_len, cfg.feature_dim, generator=g)
    mask = torch.zeros(b, cfg.max_len, dtype=torch.bool)
    for i, n in enumerate(prompt_lens):
        mask[i, :n] = True
    return x, mask


@pytest.mark.parametrize("sampler", ["full-span", "early-stop", "renoise"])
@pytest.mark.parametrize("n", [2, 3, 8, 17])
def test_every_sampler_spends_exactly_n_nfe(sampler, n):
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    x, mask = _batch(3, mcfg, [2, 4, 1])
    out = sample(net, x, mask, SamplerConfig(sampler=sampler, nfe=n, rho=4), [(0, 0), (0, 1), (1, 0)])
    assert out.count.denoiser_calls == n - 1 and out.count.decoder_calls == 1 and out.count.nfe == n
    assert len(net.calls) == n and [c["decoder"] for c in net.calls] == [False] * (n - 1) + [True]


def test_counter_counts_calls_of_wrapped_network():
    mcfg = StandInConfig(extra_token="none")
    counter = NFECounter(StandInStudent(mcfg))
    x, mask = _batch(2, mcfg, [3, 3])
    out = sample(counter, x, mask, SamplerConfig(sampler="early-stop", nfe=5, rho=2), [(0, 0), (1, 0)])
    assert counter.count is out.count and counter.count.nfe == 5


@pytest.mark.parametrize("sampler", ["early-stop", "renoise"])
def test_early_stop_decodes_last_prediction_not_last_state(sampler):
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    x, mask = _batch(2, mcfg, [3, 5])
    n = 6
    out = sample(net, x, mask, SamplerConfig(sampler=sampler, nfe=n, rho=8, grid="uniform"), [(0, 0), (1, 0)])
    last, dec = net.calls[n - 2], net.calls[n - 1]
    d_last = torch.where(mask[..., None], x, last["x_hat"])
    assert torch.equal(dec["z"], d_last) and torch.equal(out.text_state, d_last)
    assert torch.equal(dec["reg"], last["reg_hat"])
    if sampler == "early-stop":
        # the Euler state y_{N-1} would differ from d_{N-2} (t_{N-2} < 1): it is never decoded
        y_next = euler_step(last["z"], d_last, last["t"], torch.full((2,), 5 / 47), 0.05)
        assert not torch.allclose(y_next, d_last)


def test_decoder_call_uses_t1_zero_self_conditioning_and_clean_prompt():
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    x, mask = _batch(2, mcfg, [3, 5])
    sample(net, x, mask, SamplerConfig(sampler="full-span", nfe=4, w=2.5), [(0, 0), (1, 0)])
    dec = net.calls[-1]
    assert dec["decoder"] and torch.all(dec["t"] == 1) and torch.all(dec["q"] == 0) and torch.all(dec["reg_q"] == 0)
    assert torch.all(dec["w"] == 2.5)
    assert torch.equal(dec["z"][mask], x[mask])


def test_prompt_states_fixed_and_self_conditioning_chain():
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    x, mask = _batch(2, mcfg, [2, 6])
    sample(net, x, mask, SamplerConfig(sampler="full-span", nfe=5, w=3.0), [(0, 0), (0, 1)])
    den = net.calls[:-1]
    for j, c in enumerate(den):
        assert torch.equal(c["z"][mask], x[mask]) and torch.equal(c["q"][mask], x[mask])
        assert torch.all(c["w"] == 3.0)
        if j == 0:
            assert torch.all(c["q"][~mask] == 0) and torch.all(c["reg_q"] == 0)
        else:  # q_{j} = d_{j-1}
            assert torch.equal(c["q"][~mask], den[j - 1]["x_hat"][~mask])
            assert torch.equal(c["reg_q"], den[j - 1]["reg_hat"])


def test_full_span_by_hand_with_affine_network():
    # D(y, q, t) = 0.5 y + 0.25 q + t; uniform grid [0, 0.5, 1]; one response position, d = 1, sigma = 2.
    mcfg = StandInConfig(feature_dim=1, reg_dim=1, max_len=2, vocab_size=2)
    x = torch.tensor([[[0.7], [0.0]]])
    mask = torch.tensor([[True, False]])
    cfg = SamplerConfig(sampler="full-span", nfe=3, grid="uniform", seed=11)
    g = sample_generator(11, 4, 2, STREAM_NOISE)
    e, e_r = torch.randn(2, 1, generator=g)[1, 0].item(), torch.randn(1, generator=g).item()
    out = sample(AffineStandIn(mcfg), x, mask, cfg, [(4, 2)])
    y0 = 2 * e
    d0 = 0.5 * y0
    y1 = y0 + 0.5 * (d0 - y0) / 1.0
    d1 = 0.5 * y1 + 0.25 * d0 + 0.5
    y2 = y1 + 0.5 * (d1 - y1) / 0.5
    assert out.text_state[0, 1, 0].item() == pytest.approx(y2, rel=1e-6)
    assert out.text_state[0, 0, 0].item() == pytest.approx(0.7)
    r0 = 2 * e_r
    r1 = r0 + 0.5 * ((0.5 * r0 + 0.1) - r0)
    r2 = r1 + 0.5 * ((0.5 * r1 + 0.1) - r1) / 0.5
    assert out.reg_state[0].item() == pytest.approx(r2, rel=1e-6)
    assert out.token_ids[0, 1].item() == (0 if y2 > 0 else 1)
    assert out.exit_time.tolist() == [1.0]


def test_renoise_by_hand_with_affine_network():
    # N = 3, rho = 1, uniform master [0, 0.5, 1] -> t* = 0.5, power grid [0, 0.5]; eta = 1.2, sigma = 2.
    mcfg = StandInConfig(feature_dim=1, reg_dim=1, max_len=2, vocab_size=2, extra_token="none")
    x = torch.tensor([[[0.7], [0.0]]])
    mask = torch.tensor([[True, False]])
    cfg = SamplerConfig(sampler="renoise", nfe=3, rho=1, grid="uniform", seed=2, p=0.5, eta=1.2)
    g = sample_generator(2, 0, 0, STREAM_NOISE)
    e = torch.randn(2, 1, generator=g)[1, 0].item()
    xi = torch.randn(2, 1, generator=g)[1, 0].item()
    out = sample(AffineStandIn(mcfg), x, mask, cfg, [(0, 0)])
    z0 = 2 * e
    x0 = 0.5 * z0
    z1 = 0.5 * x0 + 0.5 * 1.2 * 2 * xi
    x1 = 0.5 * z1 + 0.25 * x0 + 0.5
    assert out.text_state[0, 1, 0].item() == pytest.approx(x1, rel=1e-6)
    assert out.exit_time.tolist() == [0.5] and out.reg_state is None


@pytest.mark.parametrize("sampler", ["full-span", "early-stop", "renoise"])
def test_batch_size_one_and_seven_give_identical_outputs(sampler):
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    x, mask = _batch(7, mcfg, [1, 2, 3, 4, 5, 2, 3])
    keys = [(i // 2, i % 2) for i in range(7)]
    cfg = SamplerConfig(sampler=sampler, nfe=6, rho=4, seed=9)
    big = sample(net, x, mask, cfg, keys)
    for i in range(7):
        one = sample(net, x[i:i + 1], mask[i:i + 1], cfg, keys[i:i + 1])
        assert torch.equal(one.token_ids[0], big.token_ids[i])
        assert torch.allclose(one.text_state[0], big.text_state[i], atol=1e-6)
        assert torch.equal(one.times[0], big.times[i]) and one.exit_time[0] == big.exit_time[i]


def test_rows_get_different_noise_and_grids():
    mcfg = StandInConfig()
    net = StandInStudent(mcfg)
    x, mask = _batch(2, mcfg, [2, 2])
    x[1] = x[0]
    out = sample(net, x, mask, SamplerConfig(sampler="early-stop", nfe=5, rho=4), [(0, 0), (0, 1)])
    assert not torch.equal(out.times[0], out.times[1])
    assert not torch.allclose(out.text_state[0], out.text_state[1])


def test_drop_reg_passes_no_reg_and_keeps_text_noise():
    mcfg = StandInConfig()
    x, mask = _batch(2, mcfg, [2, 3])
    keys = [(0, 0), (1, 0)]
    net = StandInStudent(mcfg)
    out = sample(net, x, mask, SamplerConfig(sampler="full-span", nfe=3, drop_reg=True), keys)
    assert out.reg_state is None and all(c["reg"] is None and c["reg_q"] is None for c in net.calls)
    net2 = StandInStudent(mcfg)
    sample(net2, x, mask, SamplerConfig(sampler="full-span", nfe=3), keys)
    assert torch.equal(net.calls[0]["z"], net2.calls[0]["z"])   # same initial text noise
    assert net2.calls[0]["reg"] is not None


def test_olt_model_carries_no_reg_state():
    mcfg = StandInConfig(extra_token="olt")
    net = StandInStudent(mcfg)
    x, mask = _batch(1, mcfg, [2])
    out = sample(net, x, mask, SamplerConfig(sampler="early-stop", nfe=3, rho=2), [(0, 0)])
    assert out.reg_state is None and all(c["reg"] is None for c in net.calls)


def test_bad_shapes_raise():
    mcfg = StandInConfig()
    x, mask = _batch(2, mcfg, [2, 3])
    with pytest.raises(ValueError, match="one .* key per row"):
        sample(StandInStudent(mcfg), x, mask, SamplerConfig(nfe=3), [(0, 0)])
    with pytest.raises(ValueError, match="prompt_mask"):
        sample(StandInStudent(mcfg), x, mask.float(), SamplerConfig(nfe=3), [(0, 0), (1, 0)])
