"""ELF-REG samplers (spec §5): full-span, prefix early-stop and re-noising, on the joint text + REG state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.decode import decode_token_ids
from elfreg.sampling.grids import sampler_grid
from elfreg.sampling.network import NFECount, NFECounter, StudentLike, uses_reg_state
from elfreg.sampling.seeding import STREAM_GRID, STREAM_NOISE, sample_generator
from elfreg.sampling.updates import euler_step, renoise_step


@dataclass
class SampleOutput:
    """One batch of samples: decoded ids (B, L), decoded states, grids (B, N - 1 or N) and NFE spent."""

    token_ids: torch.Tensor          # (B, L) tokenizer ids at every canvas position
    text_state: torch.Tensor         # (B, L, d) the state that was decoded
    reg_state: torch.Tensor | None   # (B, d_r) the REG state that was decoded, or None
    times: torch.Tensor              # (B, K) float64 times of the denoiser calls (full-span: plus the final 1)
    exit_time: torch.Tensor          # (B,) float64 time of the decoded state
    count: NFECount                  # calls spent on the whole batch (each = 1 NFE per sample)


def _check_inputs(x_prompt: torch.Tensor, prompt_mask: torch.Tensor, keys: Sequence[tuple[int, int]]) -> None:
    if x_prompt.dim() != 3:
        raise ValueError(f"x_prompt must be (B, L, d), got shape {tuple(x_prompt.shape)}")
    if prompt_mask.shape != x_prompt.shape[:2] or prompt_mask.dtype != torch.bool:
        raise ValueError(f"prompt_mask must be a bool (B, L) = {tuple(x_prompt.shape[:2])} tensor, "
                         f"got {prompt_mask.dtype} {tuple(prompt_mask.shape)}")
    if len(keys) != x_prompt.shape[0]:
        raise ValueError(f"need one (prompt_index, sample_index) key per row: {len(keys)} keys, {x_prompt.shape[0]} rows")


@torch.inference_mode()
def sample(network: StudentLike, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
           keys: Sequence[tuple[int, int]]) -> SampleOutput:
    """Run cfg.sampler on a batch and decode it; exactly cfg.nfe network calls (spec §5).

    x_prompt (B, L, d): clean standardised prompt features (values off the prompt are ignored);
    prompt_mask (B, L) bool; keys: (prompt_index, sample_index) per row — the row's grid and noise
    come only from (cfg.seed, key), so outputs do not depend on the batch it sits in.
    """
    _check_inputs(x_prompt, prompt_mask, keys)
    counter = network if isinstance(network, NFECounter) else NFECounter(network)
    counter.reset()
    mcfg = counter.config
    b, length, d = x_prompt.shape
    device = x_prompt.device
    has_reg_token = getattr(mcfg, "extra_token", "none") == "reg"
    carry_reg = uses_reg_state(mcfg, cfg.drop_reg)
    d_r = int(mcfg.reg_dim) if has_reg_token else 0

    # Grid and exit time per row, from the row's own grid stream.
    grids, exits = zip(*(sampler_grid(cfg, sample_generator(cfg.seed, p, s, STREAM_GRID)) for p, s in keys))
    times = torch.stack(list(grids))                       # (B, K) float64, on CPU
    exit_time = torch.tensor(exits, dtype=torch.float64)   # (B,)
    noise_gens = [sample_generator(cfg.seed, p, s, STREAM_NOISE) for p, s in keys]

    # Per-row noise at full canvas shape; REG noise is drawn whenever the model has a REG token, even
    # when it is dropped, so the drop-REG ablation sees the same text noise as the full model.
    eps, eps_r = draw_rows(noise_gens, length, d, d_r if has_reg_token else 0)
    keep, x_prompt, y, q, r, r_q = start_state(x_prompt, prompt_mask, eps, eps_r if carry_reg else None, cfg.sigma)
    w = torch.full((b,), float(cfg.w), device=device)

    n = cfg.nfe
    dev_times = times.to(device=device, dtype=torch.float32)
    for j in range(n - 1):
        t_j = dev_times[:, j]
        out = counter(y, q, t_j, w, reg=r, reg_q=r_q, decoder=False)
        d_j = torch.where(keep, x_prompt, out.x_hat.float())  # prompt output replaced by x (v = 0 there)
        dr_j = out.reg_hat.float() if r is not None else None
        if j == n - 2 and cfg.sampler != "full-span":
            y, r = d_j, dr_j            # early-stop / renoise decode the last clean prediction d_{N-2}
            break
        t_next = dev_times[:, j + 1]
        if cfg.sampler == "renoise":   # re-noising step (spec §5.1)
            xi, xi_r = draw_rows(noise_gens, length, d, d_r if has_reg_token else 0)
            y = torch.where(keep, x_prompt, renoise_step(d_j, t_next, xi.to(device), cfg.eta, cfg.sigma))
            if r is not None:
                r = renoise_step(dr_j, t_next, xi_r.to(device), cfg.eta, cfg.sigma)
        else:                          # Euler step (spec §5)
            y = euler_step(y, d_j, t_j, t_next, cfg.t_eps)
            if r is not None:
                r = euler_step(r, dr_j, t_j, t_next, cfg.t_eps)
        q, r_q = d_j, dr_j             # self-conditioning on the last clean prediction

    token_ids = decode_token_ids(counter, y, r, w)   # the one decoder call: NFE = (N - 1) + 1
    return SampleOutput(token_ids=token_ids.cpu(), text_state=y, reg_state=r, times=times,
                        exit_time=exit_time, count=counter.count)


def start_state(x_prompt: torch.Tensor, prompt_mask: torch.Tensor, eps: torch.Tensor, eps_r: torch.Tensor | None,
                sigma: float) -> tuple[torch.Tensor, ...]:
    """Start of every sampler (spec §5): y_0 = sigma eps, q_0 = 0, prompt slots of both hold the clean x.

    Returns (keep (B, L, 1) bool, x_prompt fp32, y, q, r, r_q); r = sigma eps_r and r_q = 0 when eps_r is given,
    else None (no REG state).
    """
    device = x_prompt.device
    keep = prompt_mask.to(device).unsqueeze(-1)
    x_prompt = x_prompt.float()
    y = torch.where(keep, x_prompt, sigma * eps.to(device))
    q = torch.where(keep, x_prompt, torch.zeros_like(x_prompt))
    r = sigma * eps_r.to(device) if eps_r is not None else None
    r_q = torch.zeros_like(r) if r is not None else None
    return keep, x_prompt, y, q, r, r_q


def draw_rows(gens: list[torch.Generator], length: int, d: int, d_r: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per row: (L, d) text noise then (d_r,) REG noise from that row's generator (CPU float32)."""
    text, reg = [], []
    for g in gens:
        text.append(torch.randn(length, d, generator=g))
        if d_r:
            reg.append(torch.randn(d_r, generator=g))
    return torch.stack(text), (torch.stack(reg) if d_r else None)
