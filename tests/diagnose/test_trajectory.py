"""Read-outs, end-point errors and acceleration on paths known in closed form (constant network) and a real student."""

import pytest
import torch

from elfreg.diagnose.path import draw_start_noise
from elfreg.diagnose.trajectory import run_acceleration, run_master
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.samplers import sample

from ._nets import student_inputs, tiny_student
from .test_path import _const_setup

KEYS = [(0, 0), (1, 0)]


def _start(x, mask, c, seed):
    eps, eps_r = draw_start_noise(KEYS, seed, 6, 4, 3)
    keep = mask.unsqueeze(-1)
    return torch.where(keep, x, c), torch.where(keep, x, 2.0 * eps), 2.0 * eps_r


def test_master_errors_tokens_and_calls_of_a_constant_network():
    net, c, c_r, x, mask = _const_setup()
    cfg = SamplerConfig(sampler="full-span", nfe=41, grid="uniform", sigma=2.0, seed=3)
    c_rows, y0, r0 = _start(x, mask, c, 3)
    m = run_master(net, x, mask, cfg, KEYS, [0, 10, 39])
    # d_j = c at every step and y_40 - c = 0.0125 (y_0 - c) (see test_path): ||d_j - y_40|| = 0.0125 ||y_0 - c||
    text = 0.0125 * (y0 - c_rows).flatten(1).norm(dim=1)
    joint = 0.0125 * ((y0 - c_rows).flatten(1).pow(2).sum(1) + (r0 - c_r).pow(2).sum(1)).sqrt()
    for k in range(3):
        assert torch.allclose(m.text_error[k], text.double(), rtol=1e-4)
        assert torch.allclose(m.joint_error[k], joint.double(), rtol=1e-4)
        assert torch.equal(m.token_ids[k], c_rows.argmax(-1))          # the decoder reads argmax of z
    assert torch.equal(m.end_token_ids, (c_rows + 0.0125 * (y0 - c_rows)).argmax(-1))
    assert torch.allclose(m.readout_times, torch.tensor([[0.0, 0.0], [0.25, 0.25], [0.975, 0.975]],
                                                        dtype=torch.float64))
    assert (m.denoiser_calls, m.decoder_calls) == (40, 4)


def test_fp16_readout_storage_is_close():
    net = tiny_student()
    x, mask = student_inputs(net, 2)
    cfg = SamplerConfig(sampler="full-span", nfe=8, seed=0)
    a = run_master(net, x, mask, cfg, KEYS, [0, 2, 5])
    b = run_master(net, x, mask, cfg, KEYS, [0, 2, 5], state_dtype=torch.float16)
    assert torch.equal(a.token_ids, b.token_ids)
    assert torch.allclose(a.text_error, b.text_error, rtol=2e-3)


def test_master_readouts_match_early_stop_and_full_span():
    net = tiny_student()
    x, mask = student_inputs(net, 2)
    cfg = SamplerConfig(sampler="full-span", nfe=16, seed=7)
    m = run_master(net, x, mask, cfg, KEYS, [0, 2, 6, 14])
    full = sample(net, x, mask, cfg, KEYS)
    assert torch.equal(m.end_token_ids, full.token_ids)
    for k, n in enumerate((2, 4, 8, 16)):
        es = sample(net, x, mask, SamplerConfig(sampler="early-stop", nfe=n, rho=16 // n, seed=7), KEYS)
        assert torch.equal(m.token_ids[k], es.token_ids)
        err = (es.text_state - full.text_state).flatten(1).norm(dim=1).double()
        assert torch.allclose(m.text_error[k], err, rtol=1e-4, atol=1e-5)


def test_readout_steps_are_checked():
    net, c, c_r, x, mask = _const_setup()
    cfg = SamplerConfig(sampler="full-span", nfe=5)
    with pytest.raises(ValueError, match=r"\[0, M - 2\] = \[0, 3\]"):
        run_master(net, x, mask, cfg, KEYS, [4])
    with pytest.raises(ValueError, match="strictly increasing"):
        run_master(net, x, mask, cfg, KEYS, [2, 1])


def test_acceleration_of_a_constant_network():
    # v_j = (c - y_j)/c_j = c - y_0 while 1 - t_j >= 0.05; at t_39 = 0.975 the clamp halves it, so the only
    # non-zero finite difference is a_38 = (v_39 - v_38)/0.025 = -20 (c - y_0).
    net, c, c_r, x, mask = _const_setup()
    cfg = SamplerConfig(sampler="full-span", nfe=41, grid="uniform", sigma=2.0, seed=3)
    c_rows, y0, r0 = _start(x, mask, c, 3)
    prof = run_acceleration(net, x, mask, cfg, KEYS)
    assert prof.text_norm.shape == (39, 2) and prof.times.shape == (2, 39)
    assert torch.allclose(prof.times[0], torch.arange(39, dtype=torch.float64) / 40)
    assert prof.text_norm[:38].abs().max() < 1e-3
    gap = (c_rows - y0).double()
    assert torch.allclose(prof.text_norm[38], 20 * gap.flatten(1).norm(dim=1), rtol=1e-4)
    joint = 20 * (gap.flatten(1).pow(2).sum(1) + (c_r - r0).double().pow(2).sum(1)).sqrt()
    assert torch.allclose(prof.joint_norm[38], joint, rtol=1e-4)
    resp = ~mask
    token = torch.stack([20 * gap[i].norm(dim=-1)[resp[i]].mean() for i in range(2)])
    assert torch.allclose(prof.token_norm[38], token, rtol=1e-4)


def test_acceleration_of_a_real_student_is_finite_and_without_reg_for_olt():
    net = tiny_student("olt")
    x, mask = student_inputs(net, 2)
    prof = run_acceleration(net, x, mask, SamplerConfig(sampler="full-span", nfe=6, grid="uniform"), KEYS)
    assert prof.joint_norm is None and torch.isfinite(prof.text_norm).all() and (prof.text_norm > 0).all()


@pytest.mark.parametrize("check_every, patience", [(1, 1), (2, 1), (3, 2)])
def test_exit_rule_on_the_master_path_is_the_adaptive_sampler(check_every, patience):
    from elfreg.sampling.exit import ExitRule

    net = tiny_student()
    x, mask = student_inputs(net, 6)
    keys = [(i, i % 2) for i in range(6)]
    m, top = 48, 24   # the adaptive sampler with nfe = 24, rho = 2 runs a prefix of this master path

    def first_token(ids, rows):   # a one-token "answer", so that some rows settle on a random network
        return [int(ids[i][~mask[r]][0]) for i, r in enumerate(rows)]

    rule = ExitRule.checked(check_every, patience, 0, top)
    master = run_master(net, x, mask, SamplerConfig(sampler="full-span", nfe=m, seed=3), [*keys], [0, 5],
                        exit_rule=(rule, first_token))
    ad = sample(net, x, mask, SamplerConfig(sampler="adaptive", nfe=top, rho=m // top, seed=3,
                                            check_every=check_every, patience=patience), keys, first_token)
    ex = master.exit
    assert any(ex.settled) and ex.nfe != [ex.nfe[0]] * 6   # some rows stop early, at different steps
    assert ex.nfe == ad.nfe and ex.settled == ad.settled
    assert torch.equal(ex.token_ids, ad.token_ids)
    assert ex.times == ad.exit_time.tolist()
    assert all(k <= rule.max_calls and n <= top for k, n in zip(ex.steps, ex.nfe))
    assert master.denoiser_calls == m - 1 and master.decoder_calls > 3   # the rule's decodes are extra calls
