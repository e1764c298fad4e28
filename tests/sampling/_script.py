"""A scripted network whose decoded answer at every step is set per row, for exact exit-rule checks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from elfreg.model.student import StudentOutput


@dataclass
class ScriptConfig:
    feature_dim: int = 6      # = vocabulary: the decoder reads token argmax(z) at each position
    reg_dim: int = 2
    extra_token: str = "reg"
    max_len: int = 3          # prompt position 0 holds the row's script id, positions 1-2 the response


class ScriptNet(nn.Module):
    """On a uniform grid of M points, step j of row r predicts token script[r][j] at every response position.

    The row's script index sits in prompt feature 0 at position 0 (the clean prompt is kept in the state), the step
    is j = round(t (M - 1)); the decoder mode returns z as logits, so a decode reads argmax of the state. Every call
    records its mode and the script ids of the rows it computed.
    """

    def __init__(self, scripts: list[list[int]], m: int, cfg: ScriptConfig = ScriptConfig()) -> None:
        super().__init__()
        self.config = cfg
        self.scripts, self.m = scripts, m
        self.calls: list[tuple[str, list[int]]] = []

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False):
        ids = [int(round(float(v))) for v in z[:, 0, 0]]
        self.calls.append(("decoder" if decoder else "denoiser", ids))
        if decoder:
            return StudentOutput(x_hat=z, reg_hat=None, logits=z.clone())
        steps = [int(round(float(v) * (self.m - 1))) for v in t]
        tok = torch.tensor([self.scripts[i][j] for i, j in zip(ids, steps)])
        x_hat = torch.nn.functional.one_hot(tok, self.config.feature_dim).float()[:, None, :].expand_as(z).clone()
        reg_hat = None if reg is None else torch.zeros_like(reg)
        return StudentOutput(x_hat=x_hat, reg_hat=reg_hat, logits=None)

    def head_to_token_ids(self, idx):
        return idx


def script_batch(rows: list[int], cfg: ScriptConfig = ScriptConfig()) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt features (B, 3, V) with the script id of each row at position 0, and the prompt mask (position 0)."""
    x = torch.zeros(len(rows), cfg.max_len, cfg.feature_dim)
    x[:, 0, 0] = torch.tensor(rows, dtype=torch.float32)
    mask = torch.zeros(len(rows), cfg.max_len, dtype=torch.bool)
    mask[:, 0] = True
    return x, mask
