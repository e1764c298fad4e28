"""Per-term gradient shares: the metric against a hand computation, and a run that measures them trains the same."""

import json
import math

import pytest
import torch

from _tiny import tiny_overrides
from elfreg.config import ObjectiveConfig, model_preset
from elfreg.model.student import ElfStudent
from elfreg.objective import draw, elf_reg_loss
from elfreg.train.config import load_run_config
from elfreg.train.gradshare import grad_shares, shares
from elfreg.train.trainer import train
from helpers import REPO, random_train_batch

CONFIG = str(REPO / "configs/tiny-smoke.yaml")
B, L, P = 6, 10, 3


def test_shares_of_hand_vectors():
    # two "parameters": [3] and [4] for the text, [0] and [0.5] for REPA, [-4] and [3] for REG
    t = lambda *v: [torch.tensor([x]) for x in v]  # noqa: E731
    out = shares({"elf": t(3.0, 4.0), "repa": t(0.0, 0.5), "reg": t(-4.0, 3.0)})
    assert out["grad_rel_repa"] == pytest.approx(0.1) and out["grad_cos_repa"] == pytest.approx(0.8)
    assert out["grad_rel_reg"] == pytest.approx(1.0) and out["grad_cos_reg"] == pytest.approx(0.0, abs=1e-12)
    assert math.isnan(shares({"elf": t(0.0), "reg": t(1.0)})["grad_rel_reg"])


def _batch():
    return random_train_batch(B, L, P, 64, seed=0)


def _block_grad(student, batch, draws, cfg):
    """The gradient of the whole weighted loss at the blocks, by an ordinary backward."""
    student.zero_grad(set_to_none=True)
    elf_reg_loss(student, batch, draws, cfg).loss.backward()
    return torch.cat([p.grad.reshape(-1).double() for p in student.blocks.parameters()])


def test_grad_shares_against_a_hand_computation():
    """Each term's block gradient, from whole-loss backwards whose weights switch the other terms off, against
    ``grad_shares``' one pass: the same norms relative to L_ELF's and the same cosines."""
    torch.manual_seed(0)
    student = ElfStudent(model_preset("tiny"))
    torch.nn.init.normal_(student.final_linear.weight, std=0.1)
    torch.nn.init.normal_(student.reg_out.weight, std=0.1)
    cfg = ObjectiveConfig()
    batch = _batch()
    draws = draw(cfg, [torch.Generator().manual_seed(i) for i in range(B)], L, 64, 64)
    got = grad_shares(student, batch, draws, cfg)
    assert all(p.grad is None for p in student.parameters())  # the student's gradients are left alone
    off = ObjectiveConfig(repa_weight=0.0, reg_weight=0.0)
    g_elf = _block_grad(student, batch, draws, off)
    # the loss is linear in the weights: a term's weight x K, minus the text's gradient, over K is the term's
    # gradient; K = 100 keeps the subtraction's rounding far below the tolerance
    k = 100.0
    g_repa = (_block_grad(student, batch, draws, ObjectiveConfig(repa_weight=k * cfg.repa_weight, reg_weight=0.0))
              - g_elf) / k
    g_reg = (_block_grad(student, batch, draws, ObjectiveConfig(repa_weight=0.0, reg_weight=k * cfg.reg_weight))
             - g_elf) / k
    for name, g in (("repa", g_repa), ("reg", g_reg)):
        assert got[f"grad_rel_{name}"] == pytest.approx(float(g.norm() / g_elf.norm()), rel=1e-4)
        assert got[f"grad_cos_{name}"] == pytest.approx(float(g @ g_elf / (g.norm() * g_elf.norm())), abs=1e-4)
    assert got["grad_rel_reg"] > 0 and got["grad_rel_repa"] > 0


def test_no_auxiliary_term_no_shares():
    torch.manual_seed(0)
    student = ElfStudent(model_preset("tiny", extra_token="none", repa=False))
    cfg = ObjectiveConfig(use_repa=False, use_reg=False)
    draws = draw(cfg, [torch.Generator().manual_seed(i) for i in range(B)], L, 64, None)
    assert grad_shares(student, _batch(), draws, cfg) == {}


def test_a_run_measuring_shares_trains_the_same_and_logs_them(tmp_path, tiny_lm_dir, sums_jsonl):
    """train.grad_share_every changes what is logged, nothing the run computes: the same losses and weights."""
    runs = {}
    for every in (0, 2):
        over = {"train.steps": 5, "train.log_every": 5, "train.grad_share_every": every, "data.features": "cached"}
        runs[every] = train(load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, sums_jsonl, **over)),
                            tmp_path / f"every-{every}")
    assert [h["loss"] for h in runs[0].history] == [h["loss"] for h in runs[2].history]
    w = [(r.model_dir / "model.safetensors").read_bytes() for r in runs.values()]
    assert w[0] == w[1]
    records = [json.loads(line) for line in (tmp_path / "every-2" / "metrics.jsonl").read_text().splitlines()]
    measured = [r["step"] for r in records if "grad_rel_reg" in r]
    assert measured == [2, 4, 5]   # every 2 steps and the last
    assert all(r["grad_rel_repa"] > 0 and -1 <= r["grad_cos_reg"] <= 1 for r in records if "grad_rel_reg" in r)
    assert not any("grad_rel_reg" in r for r in runs[0].history)
    from elfreg.train.metrics import plot_learning_curve, share_summary

    png = plot_learning_curve(tmp_path / "every-2")
    assert png == tmp_path / "every-2" / "learning_curve.png" and png.read_bytes()[:4] == b"\x89PNG"
    last = next(r for r in reversed(records) if "grad_rel_reg" in r)
    assert share_summary(last) == (f"repa {last['grad_rel_repa']:.2f} (cos {last['grad_cos_repa']:+.2f}) "
                                   f"reg {last['grad_rel_reg']:.2f} (cos {last['grad_cos_reg']:+.2f})")
