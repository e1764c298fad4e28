"""ELF-REG samplers (spec §5): full-span, prefix early-stop, re-noising, and the adaptive exit, on one trajectory.

Every sampler consumes the one loop of ``elfreg.sampling.trajectory``; they differ in the grid, the update and
which state is decoded. The adaptive sampler is prefix early-stop on the master grid of rho * max_nfe points
whose rows stop when their answer settles (``elfreg.sampling.exit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import torch

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.exit import AnswerFn, ExitTracker
from elfreg.sampling.grids import sampler_grid
from elfreg.sampling.network import NFECount, NFECounter, StudentLike
from elfreg.sampling.seeding import STREAM_GRID, sample_generator
from elfreg.sampling.trajectory import Key, StepHook, Trajectory, check_batch


@dataclass
class SampleOutput:
    """One batch of samples: decoded ids (B, L), decoded states, grids, and the NFE each row spent."""

    token_ids: torch.Tensor          # (B, L) tokenizer ids at every canvas position
    text_state: torch.Tensor         # (B, L, d) the state that was decoded
    reg_state: torch.Tensor | None   # (B, d_r) the REG state that was decoded, or None
    times: torch.Tensor              # (B, K) float64 times of the denoiser calls (full-span: plus the final 1)
    exit_time: torch.Tensor          # (B,) float64 time of the decoded state
    count: NFECount                  # calls spent on the batch, and per row (count.row_nfe)
    settled: list[bool] | None = None                 # adaptive: the answer settled (False: the budget ended)
    answers: list[Hashable | None] | None = None      # adaptive: the answer of the decoded exit state

    @property
    def nfe(self) -> list[int]:
        """NFE each row spent: every network call that computed it, check decodes included."""
        return self.count.row_nfe


def response_positions(prompt_mask: torch.Tensor) -> AnswerFn:
    """The default answer of the adaptive rule without a tokenizer: every token id after the prompt, as a tuple."""
    mask = prompt_mask.cpu()

    def answer_of(ids: torch.Tensor, rows: Sequence[int]) -> list[Hashable]:
        return [tuple(row[~mask[r]].tolist()) for row, r in zip(ids.cpu(), rows)]
    return answer_of


@torch.inference_mode()
def sample(network: StudentLike, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
           keys: Sequence[Key], answer_of: AnswerFn | None = None, on_step: StepHook | None = None) -> SampleOutput:
    """Run cfg.sampler on a batch and decode it (spec §5): exactly cfg.nfe network calls per row, at most for adaptive.

    x_prompt (B, L, d): clean standardised prompt features (values off the prompt are ignored);
    prompt_mask (B, L) bool; keys: (prompt_index, sample_index) per row — the row's grid and noise
    come only from (cfg.seed, key), so outputs do not depend on the batch it sits in.
    answer_of(ids (B', L), batch rows) -> answers: the adaptive rule's answer extractor (default: the response
    token ids, ``response_positions``); the generation pipeline passes the task's extractor on the decoded text.
    on_step: a watcher of the path (``trajectory.StepHook``); the samples are the same with and without it.
    """
    check_batch(x_prompt, prompt_mask, keys)
    counter = network if isinstance(network, NFECounter) else NFECounter(network)
    counter.reset(len(keys))
    # Grid and exit time per row, from the row's own grid stream.
    grids, exits = zip(*(sampler_grid(cfg, sample_generator(cfg.seed, p, s, STREAM_GRID)) for p, s in keys))
    times = torch.stack(list(grids))                       # (B, K) float64, on CPU
    exit_time = torch.tensor(exits, dtype=torch.float64)   # (B,)
    if cfg.sampler == "adaptive":
        return _adaptive(counter, x_prompt, prompt_mask, cfg, keys, times,
                         answer_of or response_positions(prompt_mask), on_step)
    calls = cfg.nfe - 1
    full_span = cfg.sampler == "full-span"
    path = Trajectory(counter, x_prompt, prompt_mask, cfg, keys, times[:, :calls],
                      t_end=times[:, calls] if full_span else None, on_step=on_step)
    last = None
    for last in path:
        pass
    assert last is not None   # nfe >= 2: at least one denoiser call
    if full_span:
        z, z_r = last.y_next, last.r_next   # the final updated state y_{N-1}
    else:
        z, z_r = last.d, last.dr            # early-stop / renoise decode the last clean prediction d_{N-2}
    token_ids = path.decode(z, z_r)         # the one decoder call: NFE = (N - 1) + 1
    return SampleOutput(token_ids=token_ids.cpu(), text_state=z, reg_state=z_r, times=times,
                        exit_time=exit_time, count=counter.count)


def _adaptive(counter: NFECounter, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
              keys: Sequence[Key], times: torch.Tensor, answer_of: AnswerFn,
              on_step: StepHook | None = None) -> SampleOutput:
    """Prefix early-stop whose rows leave the batch when their answer settles (elfreg.sampling.exit)."""
    rule = cfg.exit_rule()
    assert rule is not None
    b = len(keys)
    path = Trajectory(counter, x_prompt, prompt_mask, cfg, keys, times[:, :rule.max_calls], on_step=on_step)
    tracker = ExitTracker(rule, answer_of, b)
    token_ids = torch.zeros(prompt_mask.shape, dtype=torch.long)
    text_state = torch.zeros(x_prompt.shape, dtype=torch.float32, device=x_prompt.device)
    reg_state = None
    exit_time = torch.zeros(b, dtype=torch.float64)
    settled: list[bool] = [False] * b
    answers: list[Hashable | None] = [None] * b
    for st in path:
        event = tracker.step(st.j + 1, st.rows, lambda: path.decode(st.d, st.dr))
        if event is None:
            continue
        at = torch.tensor(event.local, dtype=torch.long)
        rows = [st.rows[i] for i in event.local]
        token_ids[rows] = event.token_ids.cpu()[at]
        text_state[rows] = st.d[at.to(st.d.device)]
        if st.dr is not None:
            if reg_state is None:
                reg_state = torch.zeros(b, st.dr.shape[1], dtype=torch.float32, device=st.dr.device)
            reg_state[rows] = st.dr[at.to(st.dr.device)]
        exit_time[rows] = times[rows, event.k - 1]   # the float64 grid time of the decoded d_{k-1}
        for r, s, a in zip(rows, event.settled, event.answers):
            settled[r], answers[r] = s, a
        path.finish(event.local)
        if tracker.done:
            break
    return SampleOutput(token_ids=token_ids, text_state=text_state, reg_state=reg_state, times=times[:, :rule.max_calls],
                        exit_time=exit_time, count=counter.count, settled=settled, answers=answers)
