"""The demo's evaluation: test accuracy of a model for every (sampler, NFE, sampling seed) cell, and the accuracy
curve a training run measures on its EMA weights as it goes."""

from __future__ import annotations

import contextlib
import logging
import statistics
import threading
import time
from pathlib import Path
from types import ModuleType

import torch

from elfreg.atomic import append_line, atomic_write_text
from elfreg.tasks.formats import apply_template
from elfreg.demo.config import DemoConfig
from elfreg.demo.prepare import task_module
from elfreg.pretrained import ElfModel
from elfreg.jsontext import dumps
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.encoded import FP32, EncodedRows, sample_texts_nfe  # noqa: F401 (the demo's names)
from elfreg.train.metrics import read_metrics
from elfreg.train.trainer import Trainer
from elfreg.train.validation import ema_model

log = logging.getLogger(__name__)


def sample_texts(model: ElfModel, x: torch.Tensor, mask: torch.Tensor, scfg: SamplerConfig,
                 batch_size: int) -> tuple[list[str], list[float]]:
    """Response texts and exit times of every encoded prompt (row i uses noise key (i, 0)); checks the NFE spent."""
    return sample_texts_nfe(model, x, mask, scfg, batch_size)[:2]


def per_problem(texts: list[str], problems: list, task: ModuleType) -> tuple[list[int], list[int]]:
    """(exact final answer, whole worked solution right) as 0/1 per problem of ``texts`` against their problems."""
    return ([int(task.score(s, p)) for s, p in zip(texts, problems, strict=True)],
            [int(task.chain_correct(s, p)) for s, p in zip(texts, problems, strict=True)])


def accuracy(texts: list[str], problems: list, task: ModuleType) -> tuple[float, float]:
    """(exact final answer, whole worked solution right) fractions of ``texts`` against their problems."""
    right, chain_right = per_problem(texts, problems, task)
    return sum(right) / len(problems), sum(chain_right) / len(problems)


def sampler_config(model: ElfModel, cfg: DemoConfig, sampler_name: str, nfe: int, seed: int,
                   drop_reg: bool = False) -> SamplerConfig:
    """The demo's sampler settings for one cell: its w and rho, the model's training sigma, the final-line answer;
    ``drop_reg``: the REG token left out (the "REG removed at inference" ablation)."""
    ev = cfg.eval
    return SamplerConfig(sampler=sampler_name, nfe=nfe, rho=ev.rho, w=ev.w, sigma=model.config.objective.sigma,
                         seed=seed, extract="final-line", drop_reg=drop_reg)


CELL_LISTS = ("acc", "chain_acc", "correct", "exit_time", "seconds", "nfe_mean")


def eval_cells(cfg: DemoConfig) -> list[tuple[str, int]]:
    """(sampler, NFE) of every evaluated cell: each sampler at each NFE, then the adaptive exit at each max NFE."""
    ev = cfg.eval
    return [(s, n) for s in ev.samplers for n in ev.nfes] + [("adaptive", n) for n in ev.adaptive_nfes]


def merge_evals(evals: dict[int, dict]) -> dict:
    """One variant's evaluations of several training seeds {seed: evaluate(...)} as one set of cells.

    A merged cell's lists (CELL_LISTS) run over (training seed, sampling seed) pairs, training seed outermost;
    ``train_seed`` names each entry's training seed, for the paired claims.
    """
    seeds = list(evals)
    first = evals[seeds[0]]
    out = {"encoder_seconds": sum(e["encoder_seconds"] for e in evals.values()), "cells": []}
    for i, c0 in enumerate(first["cells"]):
        cell = {"sampler": c0["sampler"], "nfe": c0["nfe"], "train_seed": []}
        for key in CELL_LISTS:
            cell[key] = []
        for s in seeds:
            c = evals[s]["cells"][i]
            if (c["sampler"], c["nfe"]) != (c0["sampler"], c0["nfe"]):
                raise ValueError("evaluations of different training seeds have different cells")
            for key in CELL_LISTS:
                cell[key] += c[key]
            cell["train_seed"] += [s] * len(c["acc"])
        cell["examples"] = c0.get("examples", [])
        cell["mean"] = statistics.fmean(cell["acc"])
        cell["std"] = statistics.stdev(cell["acc"]) if len(cell["acc"]) > 1 else 0.0
        out["cells"].append(cell)
    return out


def encode_test(model: ElfModel, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(features, mask, seconds) of the test prompts, through the model's encoder."""
    t0 = time.perf_counter()
    x, mask, _ = model.encode_prompts([apply_template(r, "math")[0] for r in rows], formatted=True)
    return x, mask, time.perf_counter() - t0


def evaluate(model: ElfModel, problems: list, rows: list[dict], cfg: DemoConfig, progress,
             encoded: tuple[torch.Tensor, torch.Tensor, float], drop_reg: bool = False) -> dict:
    """Accuracy of every (sampler, NFE, seed) on the test problems, from their prompts ``encode_test``-ed once;
    ``drop_reg``: sampled without the REG token."""
    x, mask, encoder_s = encoded
    ev, task = cfg.eval, task_module(cfg)
    out: dict = {"encoder_seconds": encoder_s, "cells": []}
    for sampler_name, nfe in eval_cells(cfg):
        cell = {"sampler": sampler_name, "nfe": nfe, **{key: [] for key in CELL_LISTS}}
        for seed in ev.seeds:
            t1 = time.perf_counter()
            texts, exits, spent, _ = sample_texts_nfe(model, x, mask,
                                                      sampler_config(model, cfg, sampler_name, nfe, seed, drop_reg),
                                                      ev.batch_size)
            cell["seconds"].append(time.perf_counter() - t1)
            right, chain_right = per_problem(texts, problems, task)
            cell["acc"].append(sum(right) / len(problems))
            cell["chain_acc"].append(sum(chain_right) / len(problems))
            cell["correct"].append(right)  # per problem, for the paired comparisons of the report
            cell["exit_time"].append(statistics.fmean(exits))
            cell["nfe_mean"].append(statistics.fmean(spent))  # NFE per sample (adaptive: check decodes included)
            if seed == ev.seeds[0]:
                cell["examples"] = [{"prompt": r["prompt"], "response": s, "answer": r["answer"]}
                                    for r, s in list(zip(rows, texts))[:3]]
            progress.update(1)
        cell["mean"] = statistics.fmean(cell["acc"])
        cell["std"] = statistics.stdev(cell["acc"]) if len(cell["acc"]) > 1 else 0.0
        out["cells"].append(cell)
    return out


class AccuracyCurve:
    """Trainer hook: every ``eval.curve_every`` steps and at the last one, test accuracy of the current EMA weights.

    Early-stop at the main NFE with the first evaluation seed, the same noise keys and batches as ``evaluate``, so
    the point at the last step equals the final evaluation's cell. Shows when the model starts to solve the task,
    which the loss alone does not. Points are appended to ``path`` as they come; a resumed run keeps those up to
    its checkpoint's step (later ones are measured again). ``lock``: held while measuring, when runs train side by
    side (the backbones' tokenizer is not thread-safe).
    """

    def __init__(self, trainer: Trainer, problems: list, rows: list[dict], cfg: DemoConfig, path: Path,
                 lock: threading.Lock | None = None) -> None:
        self.trainer, self.problems, self.cfg, self.path = trainer, problems, cfg, path
        self.lock = lock or contextlib.nullcontext()
        self.rows = rows
        self.encoded: tuple[torch.Tensor, torch.Tensor] | None = None
        self.points = [pt for pt in read_points(path) if pt["step"] <= int(trainer.state["step"])]
        atomic_write_text(path, "".join(dumps(pt) + "\n" for pt in self.points))

    def __call__(self, step: int) -> None:
        ev = self.cfg.eval
        # the last step too, when curve_every does not divide the run: the curve always ends at the final model
        if not ev.curve_every or (step % ev.curve_every and step != self.trainer.total_steps):
            return
        with self.lock:
            self.measure(step)

    def measure(self, step: int) -> None:
        """Measure and record a point now (``step`` names it); the caller holds ``lock`` where runs share it."""
        ev = self.cfg.eval
        model = ema_model(self.trainer.elf, self.trainer.ema.shadow, self.trainer.backbones)
        if self.encoded is None:  # the standardisation is fixed before the first step
            self.encoded = encode_test(model, self.rows)[:2]
        x, mask = self.encoded
        scfg = sampler_config(model, self.cfg, "early-stop", ev.main_nfe, ev.seeds[0])
        acc, chain_acc = accuracy(sample_texts(model, x, mask, scfg, ev.batch_size)[0], self.problems,
                                  task_module(self.cfg))
        self.points.append({"step": step, "acc": acc, "chain_acc": chain_acc})
        append_line(self.path, dumps(self.points[-1]))
        log.info("step %d: test exact match %.3f (early-stop %d NFE, EMA)", step, acc, ev.main_nfe)


def read_points(path: Path) -> list[dict]:
    """The curve points saved in ``path`` (none if it is missing); a torn last line from a kill is dropped."""
    return read_metrics(path)
