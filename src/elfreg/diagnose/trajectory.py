"""Read-outs of one master trajectory and the finite-difference acceleration along a path (spec §9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from elfreg.diagnose.path import euler_path, master_path, path_grids
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.exit import AnswerFn, ExitRule, ExitTracker
from elfreg.sampling.network import NFECounter


@dataclass
class MasterTrajectory:
    """Decoded read-outs d_j of one M-point path and their distance to its end point y_{M-1} (spec §9).

    R read-outs, B rows, canvas L. Errors are Frobenius norms over the whole (L, d) text state (the prompt
    slots agree and add nothing); joint errors also include the REG state.
    """

    readout_steps: list[int]          # j of each read-out (NFE = j + 2)
    times: torch.Tensor               # (B, M) float64 grid of each row
    token_ids: torch.Tensor           # (R, B, L) tokenizer ids decoded from d_j
    end_token_ids: torch.Tensor       # (B, L) tokenizer ids decoded from y_{M-1}
    text_error: torch.Tensor          # (R, B) ||d_j - y_{M-1}||
    joint_error: torch.Tensor | None  # (R, B) ||(d_j, d^r_j) - (y_{M-1}, r_{M-1})||, None without a REG state
    denoiser_calls: int               # M - 1
    decoder_calls: int                # R + 1 (+ the exit rule's decodes; diagnostic, not part of the trajectory)
    exit: "PathExits | None" = None   # where the adaptive exit rule fires on this path (run_master's exit_rule)

    @property
    def readout_times(self) -> torch.Tensor:
        """(R, B) float64 time t_j of each read-out."""
        return self.times[:, self.readout_steps].T.contiguous()


def _check_steps(readout_steps: Sequence[int], m: int) -> list[int]:
    steps = list(readout_steps)
    if any(not 0 <= j <= m - 2 for j in steps):
        raise ValueError(f"readout steps must lie in [0, M - 2] = [0, {m - 2}], got {steps}")
    if steps != sorted(set(steps)):
        raise ValueError(f"readout steps must be strictly increasing, got {steps}")
    return steps


@dataclass
class PathExits:
    """Per row: where the adaptive exit rule (``elfreg.sampling.exit``) stops on the path, and what it decodes.

    The rule with max_nfe X on an M-point path is the adaptive sampler with nfe = X and rho = M / X, so these are
    that sampler's outputs for the same seed and keys.
    """

    rule: ExitRule
    steps: list[int]                  # k: denoiser calls before the exit (the decoded prediction is d_{k-1})
    nfe: list[int]                    # NFE the adaptive sampler spends on the row (k + its decodes)
    settled: list[bool]               # the answer settled (False: the budget ended)
    times: list[float]                # t_{k-1} of the decoded prediction
    token_ids: torch.Tensor           # (B, L) tokenizer ids decoded at the exit


@torch.inference_mode()
def run_master(network, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
               keys: Sequence[tuple[int, int]], readout_steps: Sequence[int],
               state_dtype: torch.dtype = torch.float32,
               exit_rule: tuple[ExitRule, AnswerFn] | None = None) -> MasterTrajectory:
    """Run the M = cfg.master_points path, decode d_j at each read-out step and y_{M-1} at the end (spec §9).

    x_prompt (B, L, d), prompt_mask (B, L) bool. Memory: decoded ids are kept at every read-out, the
    continuous d_j (and d^r_j) only at read-outs, on the CPU in state_dtype, because the error to
    y_{M-1} can only be taken once the end is known (one pass, R x (B, L, d) extra storage).
    exit_rule (rule, answer_of): also note where the rule would stop each row (``MasterTrajectory.exit``); its
    check decodes are extra decoder calls, shared with a read-out at the same step.
    """
    counter = network if isinstance(network, NFECounter) else NFECounter(network)
    b = x_prompt.shape[0]
    counter.reset(b)
    times = path_grids(cfg, keys)
    steps = _check_steps(readout_steps, times.shape[1])
    wanted = set(steps)
    tracker = None if exit_rule is None else ExitTracker(exit_rule[0], exit_rule[1], b)
    exits = {"steps": [0] * b, "nfe": [0] * b, "settled": [False] * b, "times": [0.0] * b,
             "token_ids": torch.zeros(prompt_mask.shape, dtype=torch.long)}
    ids, saved, saved_r = [], [], []
    last = None
    path = master_path(counter, x_prompt, prompt_mask, cfg, keys, times=times)
    for st in path:
        decoded: list[torch.Tensor] = []

        def decode() -> torch.Tensor:   # at most one decoder call per step, shared by a read-out and a check
            if not decoded:
                decoded.append(path.decode(st.d, st.dr).cpu())
            return decoded[0]

        if st.j in wanted:
            ids.append(decode())   # one decoder call per read-out
            saved.append(st.d.to(device="cpu", dtype=state_dtype))
            if st.dr is not None:
                saved_r.append(st.dr.to(device="cpu", dtype=state_dtype))
        if tracker is not None and not tracker.done:
            event = tracker.step(st.j + 1, st.rows, decode)
            for i, settled in zip(event.local if event else (), event.settled if event else ()):
                exits["steps"][i], exits["nfe"][i], exits["settled"][i] = event.k, event.nfe, settled
                exits["times"][i] = float(times[i, st.j])
                exits["token_ids"][i] = event.token_ids[i]
        last = st
    assert last is not None  # M >= 2, so at least one step
    end_ids = path.decode(last.y_next, last.r_next).cpu()
    y_end = last.y_next.float().cpu()
    text_sq = torch.stack([((s.float() - y_end) ** 2).flatten(1).sum(1) for s in saved]).double()
    joint_error = None
    if saved_r:
        r_end = last.r_next.float().cpu()
        reg_sq = torch.stack([((s.float() - r_end) ** 2).sum(1) for s in saved_r]).double()
        joint_error = (text_sq + reg_sq).sqrt()
    return MasterTrajectory(readout_steps=steps, times=times, token_ids=torch.stack(ids), end_token_ids=end_ids,
                            text_error=text_sq.sqrt(), joint_error=joint_error,
                            denoiser_calls=counter.count.denoiser_calls, decoder_calls=counter.count.decoder_calls,
                            exit=None if tracker is None else PathExits(rule=exit_rule[0], **exits))


@dataclass
class AccelerationProfile:
    """Norm of a_j = (v_{j+1} - v_j) / (t_{j+1} - t_j) along a path, per step j = 0 .. M - 3 (spec §9)."""

    times: torch.Tensor               # (B, M - 2) float64 t_j at which each a_j is reported
    text_norm: torch.Tensor           # (M - 2, B) ||a_j|| over the (L, d) text state
    token_norm: torch.Tensor          # (M - 2, B) mean over response positions of the per-token ||a_j||
    joint_norm: torch.Tensor | None   # (M - 2, B) over text and REG state together, None without REG


@torch.inference_mode()
def run_acceleration(network, x_prompt: torch.Tensor, prompt_mask: torch.Tensor, cfg: SamplerConfig,
                     keys: Sequence[tuple[int, int]]) -> AccelerationProfile:
    """Finite-difference acceleration of the velocity along the path of cfg (spec §9; use grid='uniform').

    The difference of velocities taken at consecutive path points approximates the total derivative
    d v(y_s, s)/ds = ∂_s v + J_y v · v along the path. Only the previous velocity is kept.
    """
    times = path_grids(cfg, keys)
    if times.shape[1] < 3:
        raise ValueError(f"acceleration needs a path of M >= 3 points, got {times.shape[1]}")
    response = (~prompt_mask).cpu()
    n_resp = response.sum(1).clamp(min=1).double()
    text, token, joint = [], [], []
    prev = None
    for st in euler_path(network, x_prompt, prompt_mask, cfg, keys, times=times):
        if prev is not None:
            # difference on the network's device (float32), only the (B,) norms come back
            dt = (st.t - prev.t).float()                                  # (B,) t_{j+1} - t_j
            a = (st.v - prev.v) / dt[:, None, None]
            text_sq = (a ** 2).flatten(1).sum(1).double().cpu()
            text.append(text_sq.sqrt())
            token.append((a.norm(dim=-1).double().cpu() * response).sum(1) / n_resp)
            if st.vr is not None:
                ar = (st.vr - prev.vr) / dt[:, None]
                joint.append((text_sq + (ar ** 2).sum(1).double().cpu()).sqrt())
        prev = st
    return AccelerationProfile(times=times[:, : times.shape[1] - 2].clone(), text_norm=torch.stack(text),
                               token_norm=torch.stack(token), joint_norm=torch.stack(joint) if joint else None)
