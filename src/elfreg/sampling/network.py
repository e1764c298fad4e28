"""The network contract the samplers rely on, and an NFE counter around it (spec §5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class StudentLike(Protocol):
    """What a sampler needs from the ELF student (src/elfreg/model/student.py implements it).

    forward(z, q, t, w, *, reg, reg_q, decoder) -> output with .x_hat (B, L, d), .reg_hat (B, d_r) or None,
    .logits (B, L, V_head) or None; config has feature_dim, reg_dim, extra_token, max_len.
    """

    config: Any

    def __call__(self, z: torch.Tensor, q: torch.Tensor, t: torch.Tensor, w: torch.Tensor, *,
                 reg: torch.Tensor | None = None, reg_q: torch.Tensor | None = None,
                 decoder: bool | torch.Tensor = False) -> Any: ...

    def head_to_token_ids(self, idx: torch.Tensor) -> torch.Tensor: ...


@dataclass
class NFECount:
    """Network calls spent on one batch: each call on the whole batch counts one NFE per sample."""

    denoiser_calls: int = 0
    decoder_calls: int = 0

    @property
    def nfe(self) -> int:
        """NFE = denoiser calls + decoder calls (spec §5)."""
        return self.denoiser_calls + self.decoder_calls


class NFECounter:
    """Wraps a network; counts denoiser-mode and decoder-mode calls (spec §5: NFE = denoiser calls + 1)."""

    def __init__(self, network: StudentLike) -> None:
        self.network = network
        self.count = NFECount()

    @property
    def config(self) -> Any:
        return self.network.config

    def reset(self) -> None:
        """Start a new batch's count."""
        self.count = NFECount()

    def __call__(self, z: torch.Tensor, q: torch.Tensor, t: torch.Tensor, w: torch.Tensor, *,
                 reg: torch.Tensor | None = None, reg_q: torch.Tensor | None = None,
                 decoder: bool | torch.Tensor = False) -> Any:
        is_decoder = bool(decoder.any()) if isinstance(decoder, torch.Tensor) else bool(decoder)
        if is_decoder:
            self.count.decoder_calls += 1
        else:
            self.count.denoiser_calls += 1
        return self.network(z, q, t, w, reg=reg, reg_q=reg_q, decoder=decoder)

    def head_to_token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        return self.network.head_to_token_ids(idx)


def uses_reg_state(config: Any, drop_reg: bool) -> bool:
    """True when the sampler carries a REG state: model has a REG token and it is not dropped (spec §5, §10)."""
    return getattr(config, "extra_token", "none") == "reg" and not drop_reg
