"""Per-sample diagnostics rows and their per-NFE summary (spec §9, the paper's Table 11 and Figure 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import mean, median
from typing import Any, Sequence

import torch

from elfreg.diagnose.metrics import Flips, paired_flips
from elfreg.flow import snr


@dataclass
class SampleRow:
    """One (prompt, seed) sample along its master path; lists run over the read-outs, the end last."""

    prompt_index: int
    seed: int
    times: list[float]                 # t of each read-out (1.0 at the end)
    text_error: list[float]            # ||d_j - y_{M-1}|| (0 at the end)
    joint_error: list[float] | None    # text + REG state, None without a REG state
    stable: list[float]                # stable-token fraction on the end response's span
    response_agree: list[bool]         # full-response agreement with the end
    answers: list[str | None]          # extracted answer of each read-out
    correct: list[bool] | None         # None when the prompt has no reference answer
    lengths: list[int]                 # response length in tokens

    @property
    def answer_agree(self) -> list[bool]:
        """Answer agreement with the end: both extracted and equal."""
        end = self.answers[-1]
        return [a is not None and end is not None and a == end for a in self.answers]

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_index": self.prompt_index, "seed": self.seed, "times": self.times,
                "text_error": self.text_error, "joint_error": self.joint_error, "stable": self.stable,
                "response_agree": self.response_agree, "answer_agree": self.answer_agree,
                "answers": self.answers, "correct": self.correct, "lengths": self.lengths}


def _finite(x: float) -> float | None:
    """JSON-safe float: inf / nan become None."""
    return x if math.isfinite(x) else None


def summarise(rows: Sequence[SampleRow], readouts: Sequence[int], sigma: float) -> list[dict[str, Any]]:
    """One summary dict per read-out NFE: means over samples, accuracy and paired flips vs the end."""
    if not rows:
        raise ValueError("no samples to summarise")
    scored = [r for r in rows if r.correct is not None]
    out = []
    for k, nfe in enumerate(readouts):
        t = torch.tensor([r.times[k] for r in rows], dtype=torch.float64)
        entry: dict[str, Any] = {
            "nfe": int(nfe),
            "t_mean": float(t.mean()),
            "snr_mean": _finite(float(snr(t, sigma).mean())),
            "text_error_mean": mean(r.text_error[k] for r in rows),
            "joint_error_mean": (mean(r.joint_error[k] for r in rows)
                                 if all(r.joint_error is not None for r in rows) else None),
            "stable_token_fraction": mean(r.stable[k] for r in rows),
            "response_agreement": mean(float(r.response_agree[k]) for r in rows),
            "answer_agreement": mean(float(r.answer_agree[k]) for r in rows),
            "answer_rate": mean(float(r.answers[k] is not None) for r in rows),
            "mean_length": mean(r.lengths[k] for r in rows),
            "n": len(rows),
        }
        if scored:
            flips: Flips = paired_flips([r.correct[k] for r in scored], [r.correct[-1] for r in scored])
            entry["accuracy"] = mean(float(r.correct[k]) for r in scored)
            entry["n_scored"] = len(scored)
            entry["flips_vs_end"] = flips.to_dict()
        else:
            entry["accuracy"], entry["n_scored"], entry["flips_vs_end"] = None, 0, None
        out.append(entry)
    return out


def summarise_acceleration(times: torch.Tensor, text_norm: torch.Tensor, token_norm: torch.Tensor,
                           joint_norm: torch.Tensor | None, sigma: float) -> list[dict[str, Any]]:
    """Per grid time t_j: mean and median over samples of the acceleration norms, and SNR(t_j).

    times (K,) the shared uniform grid; norms (K, S) over S samples.
    """
    out = []
    for j in range(times.shape[0]):
        t = float(times[j])
        text = text_norm[j].tolist()
        entry = {"t": t, "snr": _finite(float(snr(torch.tensor(t, dtype=torch.float64), sigma))),
                 "text_mean": mean(text), "text_median": median(text),
                 "token_mean": float(token_norm[j].mean())}
        if joint_norm is not None:
            joint = joint_norm[j].tolist()
            entry["joint_mean"], entry["joint_median"] = mean(joint), median(joint)
        out.append(entry)
    return out
