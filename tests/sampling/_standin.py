"""Small stand-in networks and tokenizer for sampler tests (no pretrained weights needed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from elfreg.model.student import StudentOutput


@dataclass
class StandInConfig:
    feature_dim: int = 8
    reg_dim: int = 4
    extra_token: str = "reg"
    max_len: int = 12
    vocab_size: int = 10


class StandInStudent(nn.Module):
    """Row-local network with cross-position mixing (a mean over positions), like a tiny transformer.

    Records every call's inputs and outputs in self.calls so tests can inspect the trajectory.
    """

    def __init__(self, cfg: StandInConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = cfg
        g = torch.Generator().manual_seed(seed)
        d, dr = cfg.feature_dim, cfg.reg_dim
        self.a = nn.Parameter(torch.randn(2 * d, d, generator=g) / (2 * d) ** 0.5)
        self.bt = nn.Parameter(torch.randn(d, generator=g))
        self.bw = nn.Parameter(torch.randn(d, generator=g) * 0.1)
        self.r_in = nn.Parameter(torch.randn(dr, d, generator=g) / dr ** 0.5)
        self.r_out = nn.Parameter(torch.randn(d, dr, generator=g) / d ** 0.5)
        self.head = nn.Parameter(torch.randn(d, cfg.vocab_size, generator=g))
        self.calls: list[dict] = []

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False, repa=False):
        h = torch.cat([z, q], dim=-1) @ self.a + t[:, None, None] * self.bt + w[:, None, None] * self.bw
        h = h + z.mean(dim=1, keepdim=True)
        if reg is not None:
            h = h + (reg + 0.5 * reg_q)[:, None, :] @ self.r_in
        x_hat = torch.tanh(h)
        reg_hat = None
        if reg is not None:
            reg_hat = torch.tanh(x_hat.mean(dim=1) @ self.r_out + 0.3 * reg)
        logits = z @ self.head if bool(decoder) else None
        self.calls.append(dict(z=z.clone(), q=q.clone(), t=t.clone(), w=w.clone(), decoder=bool(decoder),
                               reg=None if reg is None else reg.clone(),
                               reg_q=None if reg_q is None else reg_q.clone(),
                               x_hat=x_hat.clone(), reg_hat=None if reg_hat is None else reg_hat.clone()))
        return StudentOutput(x_hat=x_hat, reg_hat=reg_hat, logits=logits)

    def head_to_token_ids(self, idx):
        return idx


class AffineStandIn(nn.Module):
    """D(y, q, t) = 0.5 y + 0.25 q + t (elementwise); REG: 0.5 r + 0.1; logits pick sign of z — for hand checks."""

    def __init__(self, cfg: StandInConfig) -> None:
        super().__init__()
        self.config = cfg

    def forward(self, z, q, t, w, *, reg=None, reg_q=None, decoder=False, repa=False):
        x_hat = 0.5 * z + 0.25 * q + t[:, None, None]
        reg_hat = 0.5 * reg + 0.1 if reg is not None else None
        logits = None
        if bool(decoder):
            s = z.sum(dim=-1, keepdim=True)
            logits = torch.cat([s, -s], dim=-1)   # token 0 if sum > 0 else 1
        return StudentOutput(x_hat=x_hat, reg_hat=reg_hat, logits=logits)

    def head_to_token_ids(self, idx):
        return idx


def tiny_tokenizer():
    """WordLevel tokenizer over a handful of words, wrapped as a transformers fast tokenizer with EOS."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = ["<eos>", "<unk>", "one", "two", "three", "four", "plus", "is", "five", "six"]
    tok = Tokenizer(WordLevel({w_: i for i, w_ in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>")


@dataclass
class StandInEncoder:
    """encode_prompts(list[str]) -> EncodedPrompts: a fixed random embedding of each prompt token on the canvas."""

    tokenizer: object
    max_len: int
    feature_dim: int
    max_prompt_len: int = 6
    seed: int = 0
    table: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        g = torch.Generator().manual_seed(self.seed)
        self.table = torch.randn(len(self.tokenizer), self.feature_dim, generator=g)

    def prompt_token_ids(self, prompts: list[str]) -> list[list[int]]:
        return [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]

    def encode_prompts(self, prompts: list[str]):
        from elfreg.sampling.pipeline import EncodedPrompts

        ids = self.prompt_token_ids(prompts)
        x = torch.zeros(len(prompts), self.max_len, self.feature_dim)
        mask = torch.zeros(len(prompts), self.max_len, dtype=torch.bool)
        for i, row in enumerate(ids):
            x[i, : len(row)] = self.table[torch.tensor(row, dtype=torch.long)]
            mask[i, : len(row)] = True
        return EncodedPrompts(x_prompt=x, prompt_mask=mask, token_ids=ids)
