"""Per-sample diagnostics rows and their per-NFE summary (spec §9, the paper's Table 11 and Figure 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import mean, median
from typing import Any, Sequence

import torch

from elfreg.diagnose.metrics import Flips, answer_agrees, paired_flips
from elfreg.flow import snr
from elfreg.sampling.exit import ExitRule, nfe_summary


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
    exit: dict[str, Any] | None = None  # where the adaptive exit rule stops on this path (nfe, steps, answer, ...)
    texts: list[str] | None = None     # decoded response of each read-out (kept for the first samples only)

    @property
    def answer_agree(self) -> list[bool]:
        """Answer agreement with the end: both extracted and equal."""
        end = self.answers[-1]
        return [a is not None and end is not None and a == end for a in self.answers]

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_index": self.prompt_index, "seed": self.seed, "times": self.times,
                "text_error": self.text_error, "joint_error": self.joint_error, "stable": self.stable,
                "response_agree": self.response_agree, "answer_agree": self.answer_agree,
                "answers": self.answers, "correct": self.correct, "lengths": self.lengths, "exit": self.exit,
                **({} if self.texts is None else {"texts": self.texts})}


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


def summarise_exit(rows: Sequence[SampleRow], rule: ExitRule, readouts: Sequence[int], steps: int) -> dict[str, Any]:
    """Where the adaptive exit rule fires along the paths, against fixed early-stop at its max_nfe on the same paths.

    The fixed comparison is the read-out at N = max_nfe (prefix early-stop with rho = steps / max_nfe), which spends
    max_nfe on every row. flips_vs_fixed: up = wrong at the fixed read-out, right at the exit; down = the reverse.
    settled_wrong: rows whose answer settled on a wrong answer; of those, fixed_right had it right at the fixed
    read-out (the rule's losses).
    """
    k = list(readouts).index(rule.max_nfe)
    nfe = [r.exit["nfe"] for r in rows]
    out: dict[str, Any] = {
        "rule": {**rule.to_dict(), "rho": steps // rule.max_nfe},
        "nfe": nfe_summary(nfe),
        "fixed_nfe": rule.max_nfe,
        "settled": mean(float(r.exit["settled"]) for r in rows),
        "steps_mean": mean(r.exit["steps"] for r in rows),
        "t_mean": mean(r.exit["t"] for r in rows),
        "answer_agreement_end": mean(float(r.exit["answer_agree_end"]) for r in rows),
        "answer_agreement_fixed": mean(float(answer_agrees(r.exit["answer"], r.answers[k])) for r in rows),
        "n": len(rows),
    }
    scored = [r for r in rows if r.correct is not None]
    if scored:
        exit_ok = [bool(r.exit["correct"]) for r in scored]
        fixed_ok = [r.correct[k] for r in scored]
        wrong_settled = [i for i, r in enumerate(scored) if r.exit["settled"] and not exit_ok[i]]
        out.update(accuracy_exit=mean(map(float, exit_ok)), accuracy_fixed=mean(map(float, fixed_ok)),
                   accuracy_end=mean(float(r.correct[-1]) for r in scored), n_scored=len(scored),
                   flips_vs_fixed=paired_flips(fixed_ok, exit_ok).to_dict(),
                   settled_wrong=len(wrong_settled),
                   settled_wrong_fixed_right=sum(1 for i in wrong_settled if fixed_ok[i]))
    else:
        out.update(accuracy_exit=None, accuracy_fixed=None, accuracy_end=None, n_scored=0, flips_vs_fixed=None,
                   settled_wrong=None, settled_wrong_fixed_right=None)
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


def _cell(text: str, width: int = 160) -> str:
    """Text fit for one Markdown table cell: one line, pipes escaped, at most ``width`` characters."""
    one = text.replace("\r", "").replace("\n", "⏎")
    one = one if len(one) <= width else one[:width - 1] + "…"
    return one.replace("|", "\\|") if one.strip() else "(empty)"


def texts_section(results: dict[str, dict], readouts: Sequence[int], prompts: Sequence[str]) -> str:
    """Markdown: for each model, the samples that kept their texts, one table row per read-out (NFE, t, answer,
    text); '' when none kept them."""
    out = []
    for label, res in results.items():
        for row in res["samples"]:
            if "texts" not in row:
                continue
            out += [f"#### {label}: prompt {row['prompt_index']}, seed {row['seed']}", "",
                    f"> {_cell(prompts[row['prompt_index']], 300)}", "",
                    "| NFE | t | answer | text |", "|---|---|---|---|"]
            for nfe, t, answer, text in zip(readouts, row["times"], row["answers"], row["texts"]):
                out.append(f"| {nfe} | {t:.4f} | {'none' if answer is None else _cell(str(answer), 40)} | "
                           f"{_cell(text)} |")
            out.append("")
    return "\n".join(out).rstrip()
