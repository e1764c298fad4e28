"""benchmarks/flops.py: FLOP counts against hand counts and torch's FLOP counter, MFU, the paper's cost figures."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from elfreg.config import ModelConfig, ObjectiveConfig, model_preset
from elfreg.model.student import ElfStudent
from elfreg.objective import TrainBatch, draw, elf_reg_loss
from flops import (PAPER_COSTS, BackboneShape, FrozenModels, backbone_forward_flops, expectations,
                   gpu_seconds_per_row, mfu, muon_flops, paper_ratio, repa_projector_flops, sampling_flops,
                   student_forward_flops, train_step_flops)

# d=4, h=8, one block of 2 heads, SwiGLU hidden int(int(4 * 8) * 2 / 3) = 21, bottleneck 2, 1+1+1 prefix tokens, L=3
HAND = ModelConfig(feature_dim=4, reg_dim=6, teacher_dim=6, vocab_size=5, width=8, depth=1, heads=2, bottleneck_dim=2,
                   num_time_tokens=1, num_w_tokens=1, num_mode_tokens=1, max_len=3, max_prompt_len=1,
                   extra_token="none", repa=False, repa_block=1, repa_hidden=16)


def counted(fn) -> int:
    with FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


def test_student_forward_hand_count():
    folded_map = 2 * 2 * 4 * 8  # bottleneck (2 x 4) @ self_cond_proj.weight (4 x 8), once per call
    input_path = 3 * (2 * 4 * 2 + 2 * 4 * 2 + 2 * 2 * 8)  # z and q through the folded map, bottleneck -> width
    embedders = 2 * (2 * 256 * 8 + 2 * 8 * 8)  # t and w: 256 sinusoidal features -> 8 -> 8
    seq = 3 + 3
    block = seq * (2 * 8 * 24 + 2 * 8 * 8 + 2 * 8 * 42 + 2 * 21 * 8) + 2 * 2 * seq * seq * 8  # qkv, proj, w12, w3, attn
    final = 3 * 2 * 8 * 4
    head = 3 * (2 * 8 * 4 + 2 * 4 * 5)  # the factored vocab head on a decoder row
    assert student_forward_flops(HAND, 1) == folded_map + input_path + embedders + block + final == 19_232
    assert student_forward_flops(HAND, 2, decoder_rows=1) == folded_map + 2 * (19_232 - folded_map) + head


@pytest.mark.parametrize("extra_token", ["reg", "none", "olt"])
@pytest.mark.parametrize("decoder", [False, True, "mask"])
def test_student_forward_matches_torch_flop_counter(extra_token, decoder):
    m = model_preset("tiny", extra_token=extra_token, max_len=20, max_prompt_len=8)
    net = ElfStudent(m)
    b = 3
    g = torch.Generator().manual_seed(0)
    z = torch.randn(b, 20, m.feature_dim, generator=g)
    reg = torch.randn(b, m.reg_dim, generator=g) if extra_token == "reg" else None
    dec = torch.tensor([True, False, True]) if decoder == "mask" else decoder
    n_dec = {False: 0, True: b, "mask": 2}[decoder]
    got = counted(lambda: net(z, z, torch.rand(b), torch.rand(b), reg=reg, reg_q=reg, decoder=dec))
    assert got == student_forward_flops(m, b, 20, decoder_rows=n_dec)
    h = torch.randn(b, 21, m.width)
    assert counted(lambda: net.repa_projector(h)) == repa_projector_flops(m, b, 21)


def test_backbone_hand_count_and_torch_counter():
    shape = BackboneShape("hand", hidden=4, intermediate=6, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10)
    per_token = 2 * 4 * 4 + 2 * 2 * 4 * 2 + 2 * 4 * 4 + 3 * 2 * 4 * 6  # q, k and v, o, SwiGLU
    attn_full = 2 * 2 * 3 * 3 * 4
    assert backbone_forward_flops(shape, 1, 3, 1, causal=False) == 3 * per_token + attn_full == 864
    assert backbone_forward_flops(shape, 1, 3, 1, causal=True) == 3 * per_token + attn_full * 4 / 6  # 6 of 9 pairs
    from transformers import Qwen3Config, Qwen3Model

    cfg = Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=8)
    cfg._attn_implementation = "eager"  # torch's counter sees eager attention's matmuls (not the CPU SDPA kernel)
    model = Qwen3Model(cfg).eval()
    ids = torch.randint(0, 50, (2, 17))
    with torch.no_grad():
        got = counted(lambda: model(input_ids=ids, use_cache=False))
    assert got == backbone_forward_flops(BackboneShape.from_config(cfg), 2, 17, 3, causal=False)


def test_train_step_composition():
    m = model_preset("tiny")
    bare = ObjectiveConfig(decoder_prob=0.0, self_cond_prob=0.0, use_repa=False, use_reg=False)
    fwd = student_forward_flops(m, 4)
    parts = train_step_flops(m, bare, 4)
    assert parts["student_grad_pass"] == 3 * fwd and parts["self_conditioning"] == 0 and parts["total"] == 3 * fwd
    sc = ObjectiveConfig(decoder_prob=0.0, self_cond_prob=1.0)
    parts = train_step_flops(m, sc, 4)
    assert parts["self_conditioning"] == 2 * fwd
    assert parts["student_grad_pass"] == 3 * (fwd + repa_projector_flops(m, 4, m.max_len + 1))
    half = train_step_flops(m, ObjectiveConfig(decoder_prob=0.5, self_cond_prob=0.5, use_repa=False), 4)
    assert half["self_conditioning"] == 2 * student_forward_flops(m, 4 * 0.5 * 0.5)  # only denoising rows
    assert half["student_grad_pass"] == 3 * student_forward_flops(m, 4, decoder_rows=2)
    enc = BackboneShape("e", 16, 32, 4, 2, 1, 8, 100)
    frozen = FrozenModels(enc, 3, enc, 4)
    with_frozen = train_step_flops(m, bare, 4, frozen)
    assert with_frozen["encoder"] == backbone_forward_flops(enc, 4, m.max_len, 3)
    assert with_frozen["teacher"] == backbone_forward_flops(enc, 4, m.max_len, 4)
    assert with_frozen["total"] == 3 * fwd + with_frozen["encoder"] + with_frozen["teacher"]


def test_train_step_forward_matches_the_objective_under_torch_counter():
    """With every row self-conditioned and none a decoder row the draws are fixed: the objective's forward work is
    the two self-conditioning passes plus one gradient-pass forward with the REPA projector."""
    m = model_preset("tiny", max_len=12, max_prompt_len=4)
    net = ElfStudent(m)
    obj = ObjectiveConfig(decoder_prob=0.0, self_cond_prob=1.0)
    b, g = 3, torch.Generator().manual_seed(0)
    pm = torch.zeros(b, 12, dtype=torch.bool)
    pm[:, :4] = True
    batch = TrainBatch(x=torch.randn(b, 12, m.feature_dim, generator=g), tokens=torch.randint(0, 50, (b, 12)),
                       prompt_mask=pm, content_mask=~pm, teacher=torch.randn(b, 12, m.teacher_dim, generator=g),
                       reg=torch.randn(b, m.reg_dim, generator=g), teacher_at_source=torch.randn(b, m.teacher_dim))
    draws = draw(obj, [torch.Generator().manual_seed(i) for i in range(b)], 12, m.feature_dim, m.reg_dim)
    got = counted(lambda: elf_reg_loss(net, batch, draws, obj))
    parts = train_step_flops(m, obj, b)
    assert got == parts["self_conditioning"] + parts["student_grad_pass"] / 3


def test_muon_sampling_and_mfu():
    assert muon_flops([(2, 3)]) == 5 * (2 * 4 * 3 + 2 * 8 + 2 * 4 * 3) == 320
    assert muon_flops([(3, 2)]) == muon_flops([(2, 3)])  # orthogonalised on the short side either way
    m = model_preset("tiny")
    s = sampling_flops(m, 2, 8)
    assert s["denoiser"] == 7 * student_forward_flops(m, 2)
    assert s["decoder"] == student_forward_flops(m, 2, decoder_rows=2)
    assert mfu(5e14, 2.0, 1e15) == 0.25
    with pytest.raises(ValueError):
        mfu(1.0, 0.0, 1e15)


def test_paper_cost_per_canvas():
    """seeds 002 §4.3: one GPU-seconds-per-canvas rate explains ELF-L's three runs (Tables 8-9) to 0.1 %."""
    elf_l = [gpu_seconds_per_row(c) for c in PAPER_COSTS if c.preset == "elf-l"]
    code = 317.3 * 3600 / (12 * 2_740_479)  # Table 8, code rows from configs/code/elf-l.yaml
    math_run = 449.6 * 3600 / (8 * 3_572_583 + 7.5 * 2_404_028)  # MATH: 8 epochs + the 7.5 GSM8K ones it starts from
    assert elf_l[0] == pytest.approx(code) and elf_l[1] == pytest.approx(math_run)
    assert (max(elf_l) - min(elf_l)) / min(elf_l) < 1e-3
    assert paper_ratio("code") == pytest.approx(407.9 / 317.3)
    assert gpu_seconds_per_row(next(c for c in PAPER_COSTS if c.epochs is None)) is None


def test_expectations_are_consistent():
    rows = {r["preset"]: r for r in expectations(peak_flops_per_s=790e12)}
    for r in rows.values():
        assert r["step_seconds"] == pytest.approx(r["gpu_seconds_per_row"] * 512 / 8)
        assert r["steps_12_epochs"] == math.ceil(12 * 2_404_028 / 512) == 56_345
        assert r["flops_per_row_online"] > r["flops_per_row_cached"] > 0
        assert 0 < r["paper_mfu"] < 1
    for p in ("elf-b", "elf-reg-b"):  # B: never below the least cost Table 9's hours allow in the epochs trained
        cap = {"elf-b": 18, "elf-reg-b": 12}[p]
        hours = next(c.gpu_hours for c in PAPER_COSTS if c.preset == p)
        assert rows[p]["gpu_seconds_per_row"] >= hours * 3600 / (cap * 2_404_028) * (1 - 1e-12)
        assert rows[p]["table9_epochs_implied"] <= cap + 1e-9
