"""The one sampler loop (spec §5): a batch's path on per-row grids, one step per denoiser call.

Every sampler (``samplers.sample``: full-span, prefix early-stop, re-noising, adaptive exit) and the diagnostics
(``elfreg.diagnose``) consume this generator; none of them writes the loop again. Each step yields the state y_j,
the clean prediction d_j (prompt slots replaced by the clean prompt, so v = 0 there), the velocity v_j (Euler
paths) and the next state y_{j+1}. Rows may leave between steps (``Trajectory.finish``): later calls compute only
the rows still on the path, and the NFE counter charges each row only for the calls that held it. A watcher
(``on_step``) sees every step as it is made and may decode the clean prediction of any rows on the path; those
decoder calls are counted apart from the NFE and change nothing on the path (``elfreg.sampling.watch``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch

from elfreg.flow import velocity
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.decode import decode_token_ids
from elfreg.sampling.network import NFECounter, is_flow_map, uses_reg_state
from elfreg.sampling.seeding import STREAM_NOISE, sample_generator
from elfreg.sampling.updates import euler_update, renoise_step

Key = tuple[int, int]
# on_step(step, view): called at every step before the loop's consumer sees it; view(local positions in step.rows)
# -> (n, L) token ids of those rows' clean prediction d_j, one decoder call counted apart from the NFE.
StepHook = Callable[["PathStep", Callable[[Sequence[int]], torch.Tensor]], None]


@dataclass
class PathStep:
    """Step j of the path: state y_j, clean prediction d_j, velocity v_j and the next state y_{j+1}.

    Tensors hold the rows still on the path (``rows``, their batch indices, in order): text (B', L, d), REG
    (B', d_r) or None; t, t_next (B',) float32. t_next, y_next and r_next are None after the last denoiser call of
    a path that is decoded from d_j (early-stop, re-noising, adaptive); v and vr are None on a re-noising path.
    """

    j: int
    t: torch.Tensor
    t_next: torch.Tensor | None
    y: torch.Tensor
    d: torch.Tensor
    v: torch.Tensor | None
    y_next: torch.Tensor | None
    r: torch.Tensor | None
    dr: torch.Tensor | None
    vr: torch.Tensor | None
    r_next: torch.Tensor | None
    rows: list[int]
    steps: int = 0   # denoiser calls the path plans (K; adaptive rows may leave before)


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


def check_batch(x_prompt: torch.Tensor, prompt_mask: torch.Tensor, keys: Sequence[Key]) -> None:
    """ValueError unless x_prompt is (B, L, d), prompt_mask a bool (B, L) and there is one key per row."""
    if x_prompt.dim() != 3:
        raise ValueError(f"x_prompt must be (B, L, d), got shape {tuple(x_prompt.shape)}")
    if prompt_mask.shape != x_prompt.shape[:2] or prompt_mask.dtype != torch.bool:
        raise ValueError(f"prompt_mask must be a bool (B, L) = {tuple(x_prompt.shape[:2])} tensor, "
                         f"got {prompt_mask.dtype} {tuple(prompt_mask.shape)}")
    if len(keys) != x_prompt.shape[0]:
        raise ValueError(f"need one (prompt_index, sample_index) key per row: {len(keys)} keys, {x_prompt.shape[0]} rows")


class Trajectory:
    """One batch's path: the denoiser is called at ``times[:, j]`` for every column j, in order (spec §5).

    x_prompt (B, L, d) clean prompt features, prompt_mask (B, L) bool, keys (prompt_index, sample_index) per row:
    a row's noise comes only from (cfg.seed, key). times (B, K) float64: each row's denoiser times. After the last
    call the path either ends at d_{K-1} (t_end None: early-stop, re-noising, adaptive) or takes one more update to
    t_end (B,) (full-span: the decoded y_K sits at t = 1). The update is Euler, or re-noising for
    cfg.sampler == "renoise" (spec §5.1). ``network`` may be an NFECounter (reset for this batch); it is told which
    rows each call holds. ``on_step``: a watcher of every step (``StepHook``).
    """

    def __init__(self, network, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
                 keys: Sequence[Key], times: torch.Tensor, t_end: torch.Tensor | None = None,
                 on_step: StepHook | None = None) -> None:
        check_batch(x_prompt, prompt_mask, keys)
        b, length, d = x_prompt.shape
        if times.dim() != 2 or times.shape[0] != b or times.shape[1] < 1:
            raise ValueError(f"times must be (B, K >= 1) with B = {b}, got {tuple(times.shape)}")
        if isinstance(network, NFECounter):
            self.counter = network
        else:
            self.counter = NFECounter(network)
            self.counter.reset(b)
        mcfg = self.counter.config
        self.cfg = cfg
        has_reg_token = getattr(mcfg, "extra_token", "none") == "reg"
        self.d_r = int(mcfg.reg_dim) if has_reg_token else 0
        self.flow_map = is_flow_map(mcfg)
        self.length, self.dim = length, d
        device = x_prompt.device
        self.rows = list(range(b))
        self.gens = [sample_generator(cfg.seed, p, s, STREAM_NOISE) for p, s in keys]
        # REG noise is drawn whenever the model has a REG token, even when it is dropped, so the drop-REG ablation
        # sees the same text noise as the full model.
        eps, eps_r = draw_rows(self.gens, length, d, self.d_r)
        carry = eps_r if uses_reg_state(mcfg, cfg.drop_reg) else None
        self.keep, self.x_prompt, self.y, self.q, self.r, self.r_q = start_state(x_prompt, prompt_mask, eps, carry,
                                                                                 cfg.sigma)
        self.w = torch.full((b,), float(cfg.w), device=device)
        self.times = times.to(device=device, dtype=torch.float32)
        self.t_end = None if t_end is None else t_end.to(device=device, dtype=torch.float32)
        self._leaving: list[int] = []
        self.on_step = on_step

    def __iter__(self) -> Iterator[PathStep]:
        cfg, renoise = self.cfg, self.cfg.sampler == "renoise"
        k_total = self.times.shape[1]
        for j in range(k_total):
            self._drop_leaving()
            if not self.rows:
                return
            t_j = self.times[:, j]
            t_next = self.times[:, j + 1] if j + 1 < k_total else self.t_end
            # a flow map jumps to the next grid time: its Euler update below is then the jump X_{t_j, t_next}
            # (elfreg.distill.flowmap); a last call decoded from d_j asks for the instantaneous prediction
            jump = {"t_to": t_next} if self.flow_map and t_next is not None and not renoise else {}
            out = self.counter(self.y, self.q, t_j, self.w, reg=self.r, reg_q=self.r_q, decoder=False, **jump)
            d_j = torch.where(self.keep, self.x_prompt, out.x_hat.float())   # prompt output replaced by x (v = 0)
            dr_j = out.reg_hat.float() if self.r is not None else None
            v = vr = y_next = r_next = None
            if not renoise:
                v = velocity(d_j, self.y, t_j, cfg.t_eps)
                vr = velocity(dr_j, self.r, t_j, cfg.t_eps) if dr_j is not None else None
            if t_next is not None:
                if renoise:   # re-noising step (spec §5.1), fresh noise from each row's own stream
                    xi, xi_r = draw_rows(self.gens, self.length, self.dim, self.d_r)
                    y_next = torch.where(self.keep, self.x_prompt,
                                         renoise_step(d_j, t_next, xi.to(d_j.device), cfg.eta, cfg.sigma))
                    if dr_j is not None:
                        r_next = renoise_step(dr_j, t_next, xi_r.to(d_j.device), cfg.eta, cfg.sigma)
                else:         # Euler step (spec §5)
                    y_next = euler_update(self.y, v, t_j, t_next)
                    if dr_j is not None:
                        r_next = euler_update(self.r, vr, t_j, t_next)
            step = PathStep(j=j, t=t_j, t_next=t_next, y=self.y, d=d_j, v=v, y_next=y_next, r=self.r, dr=dr_j,
                            vr=vr, r_next=r_next, rows=list(self.rows), steps=k_total)
            if self.on_step is not None:
                self.on_step(step, lambda local, step=step: self.view(step, local))
            yield step
            if t_next is None:
                return
            self.y, self.r = y_next, r_next
            self.q, self.r_q = d_j, dr_j             # self-conditioning on the last clean prediction

    def finish(self, local: Sequence[int]) -> None:
        """Rows at these positions of the last step's rows leave the path before its next call."""
        self._leaving.extend(int(i) for i in local)

    def decode(self, z: torch.Tensor, reg: torch.Tensor | None) -> torch.Tensor:
        """(B', L) token ids of the state z of the rows on the path (the final decode, spec §5): one decoder call."""
        return decode_token_ids(self.counter, z, reg, self.w)

    def view(self, step: PathStep, local: Sequence[int]) -> torch.Tensor:
        """(n, L) token ids of the clean prediction d_j of the rows at these positions of ``step.rows``: the final
        decode's call on d_j, counted apart from the NFE (the path's state is only read)."""
        idx = torch.tensor(list(local), dtype=torch.long, device=step.d.device)
        dr = step.dr.index_select(0, idx) if step.dr is not None else None
        with self.counter.apart([step.rows[i] for i in local]):
            return decode_token_ids(self.counter, step.d.index_select(0, idx), dr, self.w.index_select(0, idx))

    def _drop_leaving(self) -> None:
        if not self._leaving:
            return
        gone = set(self._leaving)
        self._leaving = []
        stay = [i for i in range(len(self.rows)) if i not in gone]
        idx = torch.tensor(stay, dtype=torch.long, device=self.y.device)
        self.rows = [self.rows[i] for i in stay]
        self.gens = [self.gens[i] for i in stay]
        self.keep, self.x_prompt, self.y, self.q, self.w, self.times = (
            t.index_select(0, idx) for t in (self.keep, self.x_prompt, self.y, self.q, self.w, self.times))
        if self.r is not None:
            self.r, self.r_q = self.r.index_select(0, idx), self.r_q.index_select(0, idx)
        if self.t_end is not None:
            self.t_end = self.t_end.index_select(0, idx)
        if self.counter.rows is not None:
            self.counter.select(self.rows)
