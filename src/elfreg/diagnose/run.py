"""A diagnostics run: prompts x seeds -> master paths -> per-NFE summary and acceleration per model (spec §9)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm import tqdm

from elfreg.diagnose.config import STATE_DTYPES, DiagnoseConfig
from elfreg.diagnose.metrics import response_agrees, response_of, stable_fractions
from elfreg.diagnose.report import SampleRow, summarise, summarise_acceleration, summarise_exit
from elfreg.diagnose.tasks import AnswerTask
from elfreg.diagnose.trajectory import MasterTrajectory, run_acceleration, run_master
from elfreg.sampling.decode import text_answers
from elfreg.sampling.files import iter_prompt_records
from elfreg.sampling.pipeline import EncodedPrompts, validate_prompts


@dataclass
class Problems:
    """Prompt records read from a JSONL file ('prompt' string, optional 'answer' and 'id'), with file lines."""

    records: list[dict[str, Any]]
    lines: list[int]
    source: str

    @property
    def prompts(self) -> list[str]:
        return [r["prompt"] for r in self.records]


def read_problems(path: str | os.PathLike) -> Problems:
    """Read prompt records; errors name the file and line (missing file, bad JSON, no 'prompt' string)."""
    records, lines = [], []
    for n, obj in iter_prompt_records(path):
        if "answer" in obj and not isinstance(obj["answer"], (str, int, float)):
            raise ValueError(f"{path}:{n}: field 'answer' must be a string or a number")
        records.append(obj)
        lines.append(n)
    return Problems(records, lines, str(Path(path)))


def sample_rows(master: MasterTrajectory, prompt_mask: torch.Tensor, keys: Sequence[tuple[int, int]], seed: int,
                problems: Problems, tokenizer: Any, task: AnswerTask, keep_texts: int = 0) -> list[SampleRow]:
    """Per row of a batch: metrics of every read-out against the end (read-outs then the end, in order); the first
    ``keep_texts`` rows also keep their decoded texts."""
    eos = int(tokenizer.eos_token_id)
    mask = prompt_mask.cpu()
    rows = []
    readout_t = master.readout_times
    for i, (p, _) in enumerate(keys):
        ids = torch.cat([master.token_ids[:, i], master.end_token_ids[i:i + 1]])          # (R + 1, L)
        responses = [response_of(row.tolist(), mask[i].tolist(), eos) for row in ids]
        end = responses[-1]
        span = (~mask[i]).nonzero().flatten()[: end.span]                                  # end response + EOS
        texts = [tokenizer.decode(list(r.tokens), skip_special_tokens=True) for r in responses]
        problem = problems.records[p]
        has_gold = problem.get("answer") is not None
        joint = master.joint_error
        answers = [task.extract(t) for t in texts]
        exit_row = None
        if master.exit is not None:   # the adaptive sampler's exit on this path (nfe = max_nfe, rho = M / max_nfe)
            ex = master.exit
            text = tokenizer.decode(list(response_of(ex.token_ids[i].tolist(), mask[i].tolist(), eos).tokens),
                                    skip_special_tokens=True)
            answer = task.extract(text)
            exit_row = {"nfe": ex.nfe[i], "steps": ex.steps[i], "settled": ex.settled[i], "t": ex.times[i],
                        "answer": answer, "answer_agree_end": answer is not None and answer == answers[-1],
                        "correct": bool(task.is_correct(text, problem)) if has_gold else None}
        rows.append(SampleRow(
            prompt_index=p, seed=seed,
            times=[float(t) for t in readout_t[:, i]] + [1.0],
            text_error=[float(e) for e in master.text_error[:, i]] + [0.0],
            joint_error=None if joint is None else [float(e) for e in joint[:, i]] + [0.0],
            stable=[float(s) for s in stable_fractions(ids[:, span], ids[-1, span])],
            response_agree=[response_agrees(r, end) for r in responses],
            answers=answers,
            correct=[bool(task.is_correct(t, problem)) for t in texts] if has_gold else None,
            lengths=[r.length for r in responses], exit=exit_row, texts=texts if i < keep_texts else None))
    return rows


def diagnose_model(network: Any, encoder: Any, tokenizer: Any, problems: Problems, cfg: DiagnoseConfig,
                   task: AnswerTask, device: torch.device, max_prompt_len: int | None = None,
                   progress: bool = False) -> dict[str, Any]:
    """All diagnostics of one model: per-NFE summary, early-stop table, acceleration, per-sample rows."""
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has no eos_token_id; the first EOS ends a response")
    validate_prompts(problems.prompts, encoder, int(network.config.max_len), max_prompt_len, problems.source,
                     problems.lines)
    n = len(problems.records)
    dtype = STATE_DTYPES[cfg.state_dtype]
    rows: list[SampleRow] = []
    acc_times, acc_text, acc_token, acc_joint = None, [], [], []
    calls = {"denoiser_per_sample": None, "decoder_per_sample": None}
    batches = [(seed, list(range(s, min(s + cfg.batch_size, n)))) for seed in cfg.seeds
               for s in range(0, n, cfg.batch_size)]
    for seed, idx in tqdm(batches, disable=not progress, desc="diagnose", unit="batch"):
        keys = [(p, 0) for p in idx]   # sample 0 of seed s = what `elfreg generate --seed s` makes first
        enc = EncodedPrompts.of(encoder.encode_prompts([problems.prompts[p] for p in idx]))
        x, mask = enc.x_prompt.to(device), enc.prompt_mask.to(device)
        rule = cfg.exit_rule()
        exit_rule = None if rule is None else (rule, text_answers(tokenizer, mask, task.extract))
        master = run_master(network, x, mask, cfg.sampler_config(seed), keys, cfg.readout_steps, dtype, exit_rule)
        calls = {"denoiser_per_sample": master.denoiser_calls, "decoder_per_sample": master.decoder_calls}
        rows.extend(sample_rows(master, mask, keys, seed, problems, tokenizer, task,
                                max(cfg.keep_texts - len(rows), 0)))
        if cfg.accel_steps:
            prof = run_acceleration(network, x, mask, cfg.sampler_config(seed, "uniform", cfg.accel_steps), keys)
            acc_times = prof.times[0]
            acc_text.append(prof.text_norm)
            acc_token.append(prof.token_norm)
            if prof.joint_norm is not None:
                acc_joint.append(prof.joint_norm)
    summary = summarise(rows, cfg.readouts, cfg.sigma)
    early = next(e for e in summary if e["nfe"] == cfg.early_nfe)
    acceleration = None
    if acc_times is not None:
        acceleration = summarise_acceleration(acc_times, torch.cat(acc_text, 1), torch.cat(acc_token, 1),
                                              torch.cat(acc_joint, 1) if acc_joint else None, cfg.sigma)
    return {
        "readouts": summary,
        "early_stop": {"nfe": cfg.early_nfe, "end_nfe": cfg.steps,
                       "answer_agreement": early["answer_agreement"],
                       "response_agreement": early["response_agreement"],
                       "accuracy_early": early["accuracy"], "accuracy_end": summary[-1]["accuracy"],
                       "flips": early["flips_vs_end"], "n": early["n"]},
        "acceleration": acceleration,
        "exit_rule": None if cfg.exit_rule() is None else summarise_exit(rows, cfg.exit_rule(), cfg.readouts,
                                                                         cfg.steps),
        "calls": calls,
        "samples": [r.to_dict() for r in rows],
    }
