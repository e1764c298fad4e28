"""Networks for the diagnostics tests: a constant-prediction network (closed-form path) and a tiny real student."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from elfreg.config import model_preset
from elfreg.model.student import ElfStudent, StudentOutput


@dataclass
class ConstConfig:
    feature_dim: int = 4
    reg_dim: int = 3
    extra_token: str = "reg"
    max_len: int = 6


class ConstantNet(nn.Module):
    """Always predicts the same clean state c (B, L, d) and REG state c_r; decodes token = argmax of z (d = vocab)."""

    def __init__(self, c: torch.Tensor, c_r: torch.Tensor | None, cfg: ConstConfig) -> None:
        super().__init__()
        self.config = cfg
        self.c, self.c_r = c, c_r
        self.calls = []

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False):
        self.calls.append(("decoder" if decoder else "denoiser", t.clone()))
        b = z.shape[0]
        x_hat = self.c.expand(b, -1, -1).clone()
        reg_hat = None if reg is None else self.c_r.expand(b, -1).clone()
        return StudentOutput(x_hat=x_hat, reg_hat=reg_hat, logits=z.clone() if decoder else None)

    def head_to_token_ids(self, idx):
        return idx


def tiny_student(extra_token: str = "reg", seed: int = 0) -> ElfStudent:
    """The project's ElfStudent at the tiny preset, random weights with a non-zero output layer."""
    torch.manual_seed(seed)
    net = ElfStudent(model_preset("tiny", extra_token=extra_token, repa=False)).eval()
    torch.nn.init.normal_(net.final_linear.weight, std=0.1)   # the zero-initialised head would make x_hat constant
    return net


def student_inputs(net, b: int, seed: int = 1):
    """Random prompt features (B, L, d) and a prompt mask with 3 + 2i prompt positions in row i."""
    cfg = net.config
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, cfg.max_len, cfg.feature_dim, generator=g)
    mask = torch.zeros(b, cfg.max_len, dtype=torch.bool)
    for i in range(b):
        mask[i, : 3 + 2 * i] = True
    return x, mask
