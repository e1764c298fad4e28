"""Validation while training (data.validation, train.validate_every): the held-out rows scored on the EMA weights.

Accuracy: the early-stop sampler at train.validate_nfe from the rows' prompts (encoded once), each response judged
against the row's final ``#### X`` answer by the rules `elfreg eval run --benchmark custom` applies (math: GSM8K's,
the final number compared as a number, an answer that is not a number as the final line's text; choice: the option
letter; code: no accuracy, its tests are elfreg eval's). Loss: the training objective on the rows' canvases with
fixed draws (the same every time), so that points are comparable.
``train.keep_best`` keeps the EMA model of the best accuracy as ``<output>/best``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
from pathlib import Path

import torch

from elfreg.atomic import atomic_write_text
from elfreg.data import CanvasStats, apply_template, build_canvas, collate
from elfreg.data.vocab import span_token_ids
from elfreg.pretrained import ElfModel
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.encoded import sample_texts_nfe
from elfreg.tasks.answers import verdict
from elfreg.tasks.formats import extract_final_answer

BEST = "best"  # <output>/best: the EMA model of the best validation accuracy (train.keep_best)
BEST_FILE = "best.json"
VALIDATION_SEED_EPOCH = -1  # the draws' key (epoch -1, row i): never a training example's
BATCH = 64  # rows per forward of the loss and the sampler


def answers_match(task: str, text: str, gold: str) -> bool | None:
    """Whether a response ``text`` gives the answer ``gold`` by the task's rule; None for code (judged by its
    tests, not its text)."""
    if task == "code":
        return None
    # the rules of `elfreg eval run --benchmark custom` on a GSM8K-format file, so the two scores agree
    return bool(verdict("choice" if task == "choice" else "gsm8k", None, 5, text, gold)["correct"])


def ema_model(elf: ElfModel, ema_state: dict[str, torch.Tensor], backbones) -> ElfModel:
    """A copy of the run's model holding the EMA weights, in eval mode, with the run's backbones."""
    model = copy.deepcopy(elf)
    model.student.load_state_dict(ema_state, strict=False)  # non-persistent buffers stay
    model.student.eval()
    model.attach_backbones(backbones)
    return model


class Validation:
    """The validation rows of a run, their canvases and prompts, scored at the steps ``due`` says."""

    def __init__(self, rows: list[dict], cfg, backbones, need_teacher: bool, output: Path) -> None:
        self.cfg, self.backbones, self.need_teacher, self.output = cfg, backbones, need_teacher, Path(output)
        task = cfg.data.task
        canvas_cfg = dataclasses.replace(cfg.canvas_config(), overflow="skip")
        stats = CanvasStats()
        self.prompts, self.golds, canvases, responses = [], [], [], []
        for r in rows:
            prompt, response = apply_template(r, task)
            c = build_canvas(prompt, response, backbones.tokenizer, canvas_cfg, stats)
            if c is None:
                continue   # a row over the canvas: left out, and counted
            canvases.append(c)
            responses.append(response)
            self.prompts.append(prompt)
            self.golds.append(extract_final_answer(response) if task == "math" else str(r.get("answer") or ""))
        if not canvases:
            raise ValueError(f"data.validation: none of its {len(rows)} rows fits the canvas (model.max_len "
                             f"{cfg.model.max_len}, model.max_prompt_len {cfg.model.max_prompt_len})")
        self.skipped = stats.skipped
        # the loss reads the response tokens through the head: under a restricted head (train.head_vocab) a row
        # whose response has a token the head lacks has no loss (its accuracy is still scored)
        kept = None if cfg.model.head_token_ids is None else set(cfg.model.head_token_ids)
        writable = [kept is None or set(response_ids(c)) <= kept for c in canvases]
        scored = [c for c, ok in zip(canvases, writable, strict=True) if ok]
        self.loss_rows = len(scored)
        lacking = [i for i, ok in enumerate(writable) if not ok]
        self.answers_unwritable = (0 if kept is None else unwritable_answers(
            backbones.tokenizer, [responses[i] for i in lacking], [self.golds[i] for i in lacking], kept))
        self.raw = [raw_features(backbones, collate(scored[i:i + BATCH]), need_teacher)
                    for i in range(0, len(scored), BATCH)]
        self.encoded: tuple[torch.Tensor, torch.Tensor] | None = None  # the prompts, once the statistics are fixed
        self.best = {"step": 0, "val_acc": -1.0}
        self.source = validation_source(cfg.data.validation)

    def __len__(self) -> int:
        return len(self.prompts)

    def due(self, step: int, total: int, checkpoint: bool) -> bool:
        """Whether ``step`` is scored: every train.validate_every steps (0: at every checkpoint) and the last."""
        every = self.cfg.train.validate_every
        return step == total or (step % every == 0 if every else checkpoint)

    def resume(self, step: int) -> None:
        """Take the best accuracy kept by a run resumed at ``step`` (one recorded after it is measured again)."""
        path = self.output / BEST_FILE
        if path.is_file():
            saved = json.loads(path.read_text())
            if saved.get("step", step + 1) <= step:
                self.best = saved

    def score(self, step: int, elf: ElfModel, ema_state: dict[str, torch.Tensor]) -> dict:
        """``val_acc`` (None for code), ``val_loss`` and ``val_rows`` of the EMA weights at ``step``; keeps the
        best model (train.keep_best)."""
        model = ema_model(elf, ema_state, self.backbones)
        out = {"val_loss": self.loss(model), "val_rows": len(self),
               "val_loss_rows": self.loss_rows}
        acc = self.accuracy(model)
        out["val_acc"] = acc
        if acc is not None and self.cfg.train.keep_best and acc > self.best["val_acc"]:
            self.best = {"step": step, "val_acc": acc}
            keep_best(self.output, model, ema_state, self.best)
        return out

    def record(self, last: dict) -> dict:
        """The card's account of the validation scored last (``last``: Trainer.last_validation): the held-out data
        by name and sha256 (or the fraction held out), its rows, the step, accuracy, loss and the sampler."""
        return {**self.source, "rows": len(self), "loss_rows": self.loss_rows,
                "answers_unwritable": self.answers_unwritable, "step": last["step"],
                "accuracy": last.get("val_acc"), "loss": last.get("val_loss"), "sampler": "early-stop",
                "nfe": self.cfg.train.validate_nfe}

    def loss(self, model: ElfModel) -> float | None:
        """The objective on the validation canvases (fixed draws), a mean over rows; None when no row has a loss."""
        from elfreg.objective import draw, elf_reg_loss
        from elfreg.train.features import standardize_batch
        from elfreg.train.rng import example_generators

        cfg, m = self.cfg, self.cfg.model
        total, n = 0.0, 0
        with torch.no_grad():
            for j, raw in enumerate(self.raw):
                batch = standardize_batch(raw, model.x_stats, model.reg_stats,
                                          model.teacher_stats if cfg.backbones.standardize_teacher else None)
                rows = batch.x.shape[0]
                keys = [(VALIDATION_SEED_EPOCH, j * BATCH + i) for i in range(rows)]
                draws = draw(cfg.objective, example_generators(cfg.train.seed, keys), batch.x.shape[1],
                             m.feature_dim, m.reg_dim if m.extra_token == "reg" else None)
                out = elf_reg_loss(model.student, batch, draws, cfg.objective)
                total += float(out.loss) * rows
                n += rows
        return total / n if n else None

    def accuracy(self, model: ElfModel) -> float | None:
        """The share of rows whose sampled answer is right (None for code)."""
        task = self.cfg.data.task
        if task == "code":
            return None
        if self.encoded is None:
            self.encoded = model.encode_prompts(self.prompts, formatted=True)[:2]
        x, mask = self.encoded
        scfg = SamplerConfig(sampler="early-stop", nfe=self.cfg.train.validate_nfe,
                             sigma=model.config.objective.sigma, seed=0, extract="final-line")
        texts = sample_texts_nfe(model, x, mask, scfg, BATCH)[0]
        return sum(bool(answers_match(task, t, g)) for t, g in zip(texts, self.golds, strict=True)) / len(texts)


def validation_source(validation: str | float | None) -> dict:
    """data.validation as a card records it: a file by its name and the sha256 of its bytes (never its path), a
    held-out fraction by its value."""
    if isinstance(validation, float):
        return {"fraction": validation}
    from elfreg.fingerprint import file_digest

    path = Path(str(validation))
    return {"file": path.name, "sha256": file_digest(path)}


def unwritable_answers(tokenizer, responses: list[str], golds: list[str | None], kept: set[int]) -> int | None:
    """How many of ``responses`` hold their final answer (the last occurrence of ``gold``) in a token outside
    ``kept``: rows a restricted head can never answer as written. None when the tokenizer gives no offsets."""
    count = 0
    for response, gold in zip(responses, golds, strict=True):
        start = response.rfind(gold) if gold else -1
        if start < 0:
            continue
        ids = span_token_ids(tokenizer, response, start, start + len(gold))
        if ids is None:
            return None
        count += not set(ids) <= kept
    return count


def unwritable_line(rows: int, unwritable: int, answers: int | None) -> str:
    """What a restricted head cannot write among the validation rows, said once when training starts."""
    answer = ("" if answers is None else
              f"; {answers} of them in the final answer itself, which can then never be right" if answers else
              "; none in the final answer itself")
    return (f"data.validation: {unwritable} of {rows} held-out responses use a token that no training response "
            f"uses; the vocabulary head keeps only those tokens (train.head_vocab: responses), so it cannot write "
            f"these responses as given and can answer them only in other words{answer}")


def response_ids(canvas) -> list[int]:
    """The token ids of a canvas's response positions (EOS padding included)."""
    return canvas.input_ids[canvas.prompt_len:].tolist()


def raw_features(backbones, batch, need_teacher: bool):
    """The raw features of collated canvases, on the CPU (kept for the run)."""
    from elfreg.train.features import raw_batch

    raw = raw_batch(backbones, batch, need_teacher)
    return type(raw)(**{k: (v.detach().cpu() if isinstance(v, torch.Tensor) else v) for k, v in raw.__dict__.items()})


def keep_best(output: Path, model: ElfModel, ema_state: dict[str, torch.Tensor], best: dict) -> Path:
    """``<output>/best``: the EMA model of the best validation accuracy so far (replaced whole: a temporary folder
    renamed over it), and ``best.json`` naming its step and accuracy."""
    output = Path(output)
    final, tmp = output / BEST, output / f".tmp-{BEST}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    dtype = next(iter(model.student.state_dict().values())).dtype
    model.save_pretrained(tmp, {k: v.to(dtype) for k, v in ema_state.items()})
    old = output / f".old-{BEST}-{os.getpid()}"
    if final.exists():
        final.replace(old)
    tmp.replace(final)
    shutil.rmtree(old, ignore_errors=True)
    atomic_write_text(output / BEST_FILE, json.dumps(best))
    return final
