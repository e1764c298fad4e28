"""Optimiser split, Muon scaling, schedule, EMA and the per-example seed (reference facts §3.7)."""

import math

import pytest
import torch

from elfreg.config import model_preset
from elfreg.configtools import ConfigError
from elfreg.model.student import ElfStudent
from elfreg.train.config import TrainConfig
from elfreg.train.optim import EMA, ReferenceMuon, build_optimizers, fan_ratio, lr_at, newton_schulz, split_params
from elfreg.train.rng import example_generators, example_seed


def student():
    torch.manual_seed(0)
    return ElfStudent(model_preset("tiny", width=32, depth=1, heads=2, repa_block=1, repa_hidden=16,
                                   bottleneck_dim=8, feature_dim=8, reg_dim=8, teacher_dim=8, vocab_size=20))


def test_split_muon_gets_2d_matrices_only():
    groups = split_params(student(), "all")
    names = {k: {n for n, _ in v} for k, v in groups.items()}
    assert names["muon_in_out"] == {"head_p", "head_u"}
    assert "blocks.0.attn.qkv.weight" in names["muon_out_in"] and "self_cond_proj.weight" in names["muon_out_in"]
    assert {"time_tokens", "blocks.0.norm1.weight", "head_u_bias"} <= names["adam"]
    assert all(p.ndim == 2 for _, p in groups["muon_out_in"] + groups["muon_in_out"])
    assert all(p.ndim != 2 for _, p in groups["adam"])


def test_muon_on_hidden_matrices_only_leaves_the_input_output_maps_to_adamw():
    groups = split_params(student(), "hidden")
    names = {k: {n for n, _ in v} for k, v in groups.items()}
    muon = names["muon_out_in"] | names["muon_in_out"]
    assert muon and all(n.startswith("blocks.") for n in muon)
    assert "blocks.0.attn.qkv.weight" in muon and "blocks.0.mlp.w3.weight" in muon
    assert {"self_cond_proj.weight", "head_p", "head_u", "final_linear.weight"} <= names["adam"]
    # every trainable parameter is in exactly one group, as with "all"
    every = [n for v in groups.values() for n, _ in v]
    assert sorted(every) == sorted(n for v in split_params(student(), "all").values() for n, _ in v)
    with pytest.raises(ValueError, match="muon_params"):
        split_params(student(), "blocks")
    opt = build_optimizers(student(), TrainConfig(optimizer="muon", muon_params="hidden", muon_impl="reference"))
    assert {id(p) for g in opt.optimizers["muon"].param_groups for p in g["params"]} and \
        len([p for g in opt.optimizers["muon"].param_groups for p in g["params"]]) == len(muon)


def test_muon_lr_scales_only_the_muon_groups():
    cfg = TrainConfig(optimizer="muon", lr=1e-3, muon_lr=2e-2, muon_impl="reference", muon_params="all")
    opt = build_optimizers(student(), cfg)
    opt.set_lr(5e-4)  # the schedule's value for Muon is scaled by muon_lr / lr = 20
    assert [g["lr"] for g in opt.optimizers["muon"].param_groups] == pytest.approx([1e-2, 1e-2])
    assert [g["lr"] for g in opt.optimizers["adamw"].param_groups] == pytest.approx([5e-4])
    with pytest.raises(ConfigError, match="train.muon_lr"):
        TrainConfig(muon_lr=0.0)


def test_fan_ratio_hand_values():
    assert fan_ratio((300, 100), "out_in") == pytest.approx(math.sqrt(3))  # Linear (out, in)
    assert fan_ratio((100, 300), "out_in") == 1.0
    assert fan_ratio((100, 300), "in_out") == pytest.approx(math.sqrt(3))  # bare (in, out): U is d x V


def test_torch_muon_groups_give_reference_scale():
    opts = build_optimizers(student(), TrainConfig(muon_impl="torch", lr=1.0, muon_params="all"))
    opts.set_lr(0.5)
    groups = opts.optimizers["muon"].param_groups
    for g in groups:
        p = g["params"][0]
        torch_ratio = math.sqrt(max(1.0, p.shape[0] / p.shape[1]))
        orient = "in_out" if g["lr_scale"] != 1.0 or p.shape == (32, 8) else "out_in"
        if orient == "in_out":
            assert g["lr"] * torch_ratio == pytest.approx(0.5 * fan_ratio(tuple(p.shape), "in_out"))
    assert opts.optimizers["adamw"].param_groups[0]["lr"] == 0.5


def _matrices(seed: int):
    g = torch.Generator().manual_seed(seed)
    shapes = [(12, 4), (12, 4), (4, 12), (4, 4), (4, 4), (7, 5)]  # tall, wide (same stack once transposed), square
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="this torch has no torch.optim.Muon")
def test_grouped_muon_is_torch_muon_batched():
    from elfreg.train.optim import GroupedMuon

    ours, theirs = _matrices(0), _matrices(0)
    kw = dict(lr=0.05, momentum=0.9, weight_decay=0.01, adjust_lr_fn="original")
    groups = lambda ps: [{"params": ps[:3]}, {"params": ps[3:], "lr": 0.02}]  # noqa: E731
    a, b = GroupedMuon(groups(ours), torch.bfloat16, **kw), torch.optim.Muon(groups(theirs), **kw)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        for p, q in zip(ours, theirs):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        a.step(), b.step()
        for p, q in zip(ours, theirs):  # bf16 Newton-Schulz on both sides: batched vs one matrix at a time
            torch.testing.assert_close(p.detach(), q.detach(), atol=2e-3, rtol=0)
    moved = [(p.detach() - p0.detach()).abs().max().item() for p, p0 in zip(ours, _matrices(0))]
    assert min(moved) > 0.02  # four steps of lr 0.02-0.05 moved every matrix 10x past the tolerance
    # the same state layout: a checkpoint of one loads into the other
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(a.state[p]["momentum_buffer"], b.state[q]["momentum_buffer"]) for p, q in zip(ours, theirs))


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="this torch has no torch.optim.Muon")
def test_auto_muon_is_grouped_and_fsdp_takes_the_reference():
    from elfreg.train.optim import GroupedMuon, resolve_muon_impl

    assert isinstance(build_optimizers(student(), TrainConfig()).optimizers["muon"], GroupedMuon)
    assert resolve_muon_impl(TrainConfig(parallel="fsdp")) == "reference"


def test_newton_schulz_is_near_orthogonal():
    g = torch.randn(16, 40, generator=torch.Generator().manual_seed(0))
    o = newton_schulz(g)
    s = torch.linalg.svdvals(o)
    assert o.shape == g.shape and s.min() > 0.5 and s.max() < 1.5  # the quintic's known band


def test_reference_muon_first_step_hand_check():
    p = torch.nn.Parameter(torch.randn(6, 3, generator=torch.Generator().manual_seed(1)))
    g = torch.randn(6, 3, generator=torch.Generator().manual_seed(2))
    p0 = p.detach().clone()
    opt = ReferenceMuon([p], lr=0.1, momentum=0.95)
    p.grad = g.clone()
    opt.step()
    # k = 1: m = 0.05 g; u = 0.95 m / (1 - 0.95^2) + 0.05 g / 0.05 = g (0.0475/0.0975 + 1)
    u = g * (0.95 * 0.05 / (1 - 0.95 ** 2) + 1.0)
    torch.testing.assert_close(p.detach(), p0 - 0.1 * math.sqrt(2) * newton_schulz(u))


def test_warmup_then_constant():
    cfg = TrainConfig(lr=2e-3, warmup_steps=4)
    assert [lr_at(s, cfg) for s in range(6)] == pytest.approx([5e-4, 1e-3, 1.5e-3, 2e-3, 2e-3, 2e-3])
    assert lr_at(0, TrainConfig(lr=1e-3, warmup_steps=0)) == 1e-3


def test_linear_decay_to_zero_hand_values():
    # warm-up 2 of 6 steps, then 4 decay steps with p = 1/4, 2/4, 3/4, 1: the last step trains at exactly 0
    cfg = TrainConfig(lr=1e-3, steps=6, warmup_steps=2, lr_schedule="linear")
    assert [lr_at(s, cfg) for s in range(6)] == pytest.approx([5e-4, 1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0], abs=1e-15)


def test_cosine_decay_to_a_floor_hand_values():
    # no warm-up, 4 steps, floor 1e-4: 1e-4 + 9e-4 (1 + cos(pi p)) / 2 at p = 1/4, 1/2, 3/4, 1
    cfg = TrainConfig(lr=1e-3, steps=4, warmup_steps=0, lr_schedule="cosine", min_lr_ratio=0.1)
    assert [lr_at(s, cfg) for s in range(4)] == pytest.approx([8.681981e-4, 5.5e-4, 2.318019e-4, 1e-4], rel=1e-6)


def test_decay_over_the_last_fraction_keeps_the_peak_before_it():
    # warm-up 2 of 12 steps; decay_fraction 0.5 of the 10 after it: 5 decay steps (7..11), steps 2..6 keep lr
    cfg = TrainConfig(lr=1e-3, steps=12, warmup_steps=2, lr_schedule="linear", decay_fraction=0.5)
    want = [5e-4, 1e-3] + [1e-3] * 5 + [8e-4, 6e-4, 4e-4, 2e-4, 0.0]
    assert [lr_at(s, cfg) for s in range(12)] == pytest.approx(want, abs=1e-15)
    # the run's length may come from the plan (epochs): it overrides train.steps
    assert lr_at(3, cfg, warmup_steps=0, total_steps=4) == pytest.approx(0.0, abs=1e-15)
    assert lr_at(0, cfg, warmup_steps=0, total_steps=4) == pytest.approx(1e-3)  # 5 decay steps: p = 0 at step 0


def test_decaying_schedule_needs_the_run_length_and_valid_fields():
    with pytest.raises(ValueError, match="lr_schedule=cosine needs the run's length"):
        lr_at(5, TrainConfig(lr=1e-3, warmup_steps=0, lr_schedule="cosine"))
    assert lr_at(5, TrainConfig(lr=1e-3, warmup_steps=0)) == 1e-3  # constant needs no length
    for field, value in (("lr_schedule", "step"), ("min_lr_ratio", 1.5), ("decay_fraction", 0.0)):
        with pytest.raises(ConfigError, match=f"train.{field}"):
            TrainConfig(**{field: value})


def test_ema_update_hand_values():
    m = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        m.weight.fill_(1.0)
    ema = EMA(m, 0.9)
    with torch.no_grad():
        m.weight.fill_(3.0)
    ema.update(m)
    assert ema.shadow["weight"].item() == pytest.approx(1.0 + 0.1 * 2.0)


def test_example_seed_is_stable_and_keyed():
    assert example_seed(42, 0, 7) == example_seed(42, 0, 7)
    assert len({example_seed(42, 0, 7), example_seed(42, 1, 7), example_seed(42, 0, 8), example_seed(43, 0, 7)}) == 4
    a, b = example_generators(1, [(0, 3), (0, 3)])
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
    assert 0 <= example_seed(0, 0, 0) < 2 ** 63


def test_adamw_is_fused_on_plain_tensors_and_does_the_foreach_update():
    from elfreg.train.optim import adamw

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in ((7, 5), (5,), (3, 4, 2))]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    kw = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    fused, ref = adamw(params, **kw), torch.optim.AdamW(twins, foreach=True, **kw)
    assert fused.param_groups[0]["fused"]
    for step in range(5):
        grads = [torch.randn_like(p) for p in params]
        for p, q, g in zip(params, twins, grads):
            p.grad, q.grad = g.clone(), g.clone()
        fused.step()
        ref.step()
    for p, q in zip(params, twins):
        assert torch.allclose(p, q, atol=1e-6)


def smollm2_student(vocab: int = 4096):
    """The demo's student at SmolLM2's widths (576); a smaller vocab than 49,152, which changes no rule."""
    torch.manual_seed(0)
    return ElfStudent(model_preset("tiny", width=64, depth=4, heads=4, repa_block=2, repa_hidden=128, bottleneck_dim=32,
                                   feature_dim=576, reg_dim=576, teacher_dim=576, vocab_size=vocab, max_len=30,
                                   max_prompt_len=14))


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="this torch has no torch.optim.Muon")
@pytest.mark.parametrize("fast_bf16", [False, True])
def test_muon_by_default_orthogonalises_the_blocks_by_shape_in_the_runs_precision(monkeypatch, fast_bf16):
    from elfreg.train import optim

    st = smollm2_student()
    opt = build_optimizers(st, TrainConfig(), fast_bf16=fast_bf16)  # the defaults: muon, muon_params hidden
    names = {id(p): n for n, p in st.named_parameters()}
    in_muon = {names[id(p)] for g in opt.optimizers["muon"].param_groups for p in g["params"]}
    assert in_muon == {n for n, p in st.named_parameters() if n.startswith("blocks.") and p.ndim == 2}
    wide = {"head_u", "head_p", "self_cond_proj.weight", "text_proj.0.weight", "final_linear.weight",
            "reg_in.weight", "reg_out.weight", "repa_projector.net.4.weight"}
    adam = {names[id(p)] for g in opt.optimizers["adamw"].param_groups for p in g["params"]}
    assert wide <= adam
    calls = []
    real = optim.newton_schulz_batched

    def spy(x, coefficients, steps, eps, dtype=torch.float32):
        out = real(x, coefficients, steps, eps, dtype)
        calls.append((tuple(x.shape), out.dtype))
        return out
    monkeypatch.setattr(optim, "newton_schulz_batched", spy)
    for p in st.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    f = st.config.mlp_hidden
    ns = torch.bfloat16 if fast_bf16 else torch.float32
    # one call per shape, each on the 4 blocks' matrices stacked, transposed to (rows <= cols)
    assert sorted(calls) == sorted([((4, 64, 192), ns), ((4, 64, 64), ns), ((4, 64, 2 * f), ns), ((4, 64, f), ns)])


def test_muon_on_every_matrix_only_when_asked():
    st = smollm2_student()
    opt = build_optimizers(st, TrainConfig(muon_params="all"))
    params = {id(p) for g in opt.optimizers["muon"].param_groups for p in g["params"]}
    assert id(st.head_u) in params and id(st.self_cond_proj.weight) in params
    assert TrainConfig().muon_params == "hidden"


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="this torch has no torch.optim.Muon")
def test_grouped_muon_in_fp32_is_the_per_matrix_fp32_newton_schulz():
    from elfreg.train.optim import GroupedMuon, newton_schulz_batched

    ours, single = _matrices(0), _matrices(0)
    kw = dict(lr=0.05, momentum=0.9, weight_decay=0.0, adjust_lr_fn="original")
    a = GroupedMuon([{"params": ours}], **kw)
    assert a.ns_dtype == torch.float32
    g = torch.Generator().manual_seed(1)
    bufs = [torch.zeros_like(p) for p in single]
    for _ in range(3):
        for p, q, m in zip(ours, single, bufs):
            p.grad = torch.randn(p.shape, generator=g)
            with torch.no_grad():  # torch.optim.Muon's update, one matrix at a time, fp32 Newton-Schulz
                m.lerp_(p.grad, 0.1)
                u = p.grad.lerp(m, 0.9)
                tall = u.shape[0] > u.shape[1]
                o = newton_schulz_batched((u.mT if tall else u)[None], a.defaults["ns_coefficients"],
                                          a.defaults["ns_steps"], a.defaults["eps"])[0]
                q.add_(o.mT if tall else o, alpha=-0.05 * math.sqrt(max(1.0, q.shape[0] / q.shape[1])))
        a.step()
        for p, q in zip(ours, single):
            torch.testing.assert_close(p.detach(), q.detach(), atol=1e-5, rtol=1e-5)
