"""The training loop (issue 5): per-example draws, global-count loss reduction, Muon/AdamW, EMA, checkpoints.

Every example's draws come from a generator seeded by (seed, epoch, global index) and every loss term is divided
by its count over the whole global batch (all ranks, all micro-batches), so a run's weights do not depend on the
world size or the accumulation split (up to float reduction order).

Before the first step, the run's data, plan and backbones are :mod:`.setup`'s; its checkpoints, written and read
back, :mod:`.checkpointing`'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from elfreg import precision
from elfreg.atomic import atomic_write_text
from elfreg.configtools import ConfigError, dump_yaml, to_dict
from elfreg.tasks.formats import prompt_template
from elfreg.fingerprint import move_aside
from elfreg.pretrained import ElfModel, check_shapes
from elfreg.jsontext import dumps
from elfreg.moved import moved
from elfreg.objective import draw, loss_counts
from elfreg.precision import Precision
from elfreg.resources import check_fits, training_need
from elfreg.stats import FeatureStats
from elfreg.train import checkpoint as ck
from elfreg.train.budget import TimeBudget
from elfreg.train.checkpointing import Checkpointing, full_tensor
from elfreg.train.config import RunConfig
from elfreg.train.dist import DistInfo, all_reduce_sum, barrier, init_distributed, resolve_device, wrap
from elfreg.train.features import CachedFeatures, StatsAccumulator, paper_token_mask, standardize_batch
from elfreg.train.metrics import MetricsLog
from elfreg.train.optim import EMA, aux_weights_at, build_optimizers, decay_start, lr_at
from elfreg.train.plan import TrainPlan, check_init, check_overflow, init_source
from elfreg.train.rng import example_generators
from elfreg.train.setup import (check_backbones, count_rows, match_backbones, need_teacher, plan_from_counts,
                                restrict_head, run_stream, validation_rows)

SUM_TERMS = ("loss", "loss_elf", "loss_repa", "loss_reg")  # global-count contributions: summed
MEAN_TERMS = ("l2", "ce", "decoder_frac")  # per-batch diagnostics: averaged
logger = logging.getLogger(__name__)
PLOT_EVERY_S = 60.0  # learning_curve.png: drawn at a checkpoint at most this often (and always at the end)


class TrainingDiverged(RuntimeError):
    """A NaN/inf loss; the message names the step and the last good checkpoint."""


@dataclass
class TrainResult:
    """What a training run leaves: its last step, output folder, final model, last checkpoint and logged history."""

    step: int
    output: Path
    model_dir: Path | None
    last_checkpoint: Path | None
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # also written as summary.json: steps, epochs, tokens, overflow


class Trainer(Checkpointing):
    """One training run in ``output``; see ``train``."""

    def __init__(self, cfg: RunConfig, output: str | Path, resume: str = "auto", backbones=None,
                 dataset: CachedFeatures | None = None, hooks: list[Callable[[int], None]] = (),
                 restart: bool = False) -> None:
        if resume not in ("auto", "never"):
            raise ValueError(f"resume must be 'auto' or 'never', got {resume!r}")
        # train.minutes: the clock starts before the backbones load and the feature cache is built, both part of it
        self.budget = TimeBudget(cfg.train.minutes, cfg.train.steps) if cfg.train.minutes is not None else None
        self.info: DistInfo = init_distributed()
        self.device = resolve_device(cfg.train.device, self.info)
        self.output = Path(output)
        self.hooks = list(hooks)
        self._plotted_at: float | None = None  # when learning_curve.png was last drawn (time.monotonic)
        self.progress_desc = "train"  # the progress bar's label (runs side by side name theirs)
        tc = cfg.train
        world = self.info.world_size
        if tc.batch_size % world:
            raise ValueError(f"train.batch_size {tc.batch_size} is not divisible by the world size {world}")
        self.per_rank = tc.batch_size // world
        check_fits(training_need(cfg, str(self.device), world))   # before the backbones: the configured widths
        self.need_teacher = need_teacher(cfg)
        if backbones is None:
            from elfreg.backbones import Backbones

            backbones = Backbones(cfg.backbones, self.device, need_teacher=self.need_teacher)
        self.backbones = backbones
        if tc.match_backbones:
            cfg = match_backbones(cfg, backbones)
        check_backbones(cfg, backbones)
        cfg = restrict_head(cfg, backbones.tokenizer)   # train.head_vocab: before the resume check compares it
        self.cfg = cfg
        if self.info.is_main:
            if restart:
                move_aside([self.output])
            self.output.mkdir(parents=True, exist_ok=True)
            ck.clean_temporaries(self.output)
        barrier(self.info)
        self.resume_from = ck.latest_checkpoint(self.output) if resume == "auto" else None
        if self.resume_from is not None:  # every rank: they all refuse alike, before any work
            ck.check_resume(self.resume_from, cfg, self.output)
        self.dataset = dataset
        self.batches = self._make_batches()
        self.plan = self._make_plan()
        self.total_steps = self.plan.steps if self.plan is not None else tc.steps
        if self.total_steps is None:
            raise ConfigError("train: set train.steps or train.epochs (the run's length)")
        self.warmup_steps = self.plan.warmup_steps if self.plan is not None else (tc.warmup_steps or 0)
        self.epoch_steps = self.plan.epoch_steps if self.plan is not None else {}
        self._build_model()
        if self.budget is not None:   # a resumed run continues its budget: seconds spent, the decided length
            self.budget.restore(self.state.get("budget"))
            self.total_steps = self.budget.steps or self.total_steps
        self.validation = self._make_validation()

    def _make_validation(self):
        """data.validation's rows with their features, scored while training (elfreg.train.validation); None
        without it."""
        if self.cfg.data.validation is None:
            return None
        from elfreg.train.validation import Validation, unwritable_line

        v = Validation(validation_rows(self.cfg), self.cfg, self.backbones, self.need_teacher, self.output)
        v.resume(int(self.state["step"]))
        if v.loss_rows < len(v) and self.info.is_main:
            logger.warning("%s", unwritable_line(len(v), len(v) - v.loss_rows, v.answers_unwritable))
        return v

    def validate(self, step: int) -> dict:
        """The validation metrics of the EMA weights at ``step`` (scored on the main rank)."""
        ema = {k: full_tensor(v).detach() for k, v in self.ema.shadow.items()}   # collective under FSDP
        if not self.info.is_main:
            return {}
        out = self.validation.score(step, self.elf, ema)
        self.last_validation = {"step": step, **out}
        return out

    # -- setup ----------------------------------------------------------------------------------------------------
    def _make_batches(self):
        from elfreg.train.batches import CachedBatches, StreamBatches

        cfg, info = self.cfg, self.info
        if cfg.data.features == "cached" or self.dataset is not None:
            if self.dataset is None:
                self.dataset = self._build_cache()
            return CachedBatches(self.dataset, cfg.train.seed, info.rank, info.world_size, cfg.data.epochs,
                                 self.device)
        return StreamBatches(self._stream(info.rank, info.world_size), cfg.data.task, self.backbones,
                             cfg.canvas_config(), self.need_teacher, cfg.data.on_bad_row)

    def _stream(self, rank: int, world: int, epochs: int | None | str = "cfg"):
        return run_stream(self.cfg, rank, world, epochs)

    def _make_plan(self) -> TrainPlan | None:
        """The plan (rows, tokens, steps, warm-up, epoch checkpoints), before any work; None for a streamed run
        whose budget needs no row count (steps, warm-up in steps, no epoch checkpoints): no pass over the data then.

        A streamed run counts its rows once (rank 0) into ``data_counts.json``; a resumed run reuses it.
        """
        cfg, tc = self.cfg, self.cfg.train
        eos = self.backbones.tokenizer.eos_token_id
        if self.dataset is not None:
            per_row = self.dataset.token_counts(eos)
            o = self.dataset.overflow
            counts = dict(rows=len(self.dataset), overflow=[o.prompt_too_long, o.canvas_too_long],
                          tokens_per_epoch=int(per_row.sum()), max_tokens=int(per_row.max()))
            return plan_from_counts(cfg, counts)
        if tc.epochs is None and tc.warmup_epochs is None and not tc.keep_epochs:
            return None
        path = self.output / "data_counts.json"
        key = json.dumps([to_dict(cfg.data), to_dict(cfg.canvas_config()), cfg.backbones.encoder,
                          cfg.backbones.encoder_gguf_file, cfg.train.seed], sort_keys=True)
        if self.info.is_main:
            saved = json.loads(path.read_text()) if path.is_file() else {}
            if saved.get("key") != key or "error" in saved:
                try:
                    counts = count_rows(cfg, self.backbones.tokenizer)
                except (ValueError, OSError) as exc:  # every rank raises it after the barrier (none waits forever)
                    counts = {"error": f"{type(exc).__name__}: {exc}"}
                atomic_write_text(path, json.dumps({"key": key, **counts}))
        barrier(self.info)
        counts = json.loads(path.read_text())
        if "error" in counts:
            raise ValueError(f"counting the training rows failed: {counts['error']}")
        plan = plan_from_counts(cfg, counts)
        if self.info.is_main:
            atomic_write_text(self.output / "plan.json", plan.to_json())
        return plan

    def _build_cache(self) -> CachedFeatures:
        rows = list(self._stream(0, 1, epochs=1))
        cache_dir = self.cfg.data.cache_dir or str(self.output / "feature-cache")
        if self.info.is_main:
            CachedFeatures.build_or_load(rows, self.backbones, self.cfg.canvas_config(), cache_dir,
                                         self.cfg.data.task, self.need_teacher, progress=self.cfg.train.progress)
        barrier(self.info)
        return CachedFeatures.build_or_load(rows, self.backbones, self.cfg.canvas_config(), cache_dir,
                                            self.cfg.data.task, self.need_teacher)

    def _estimate_stats(self) -> tuple[FeatureStats, FeatureStats | None, FeatureStats | None]:
        """Statistics from the first train.stats_canvases canvases of the global order (identical on every rank)."""
        from elfreg.train.batches import CachedBatches, StreamBatches

        cfg = self.cfg
        if self.dataset is not None:
            src = CachedBatches(self.dataset, cfg.train.seed, 0, 1, 1)
        else:
            src = StreamBatches(self._stream(0, 1, epochs=1), cfg.data.task, self.backbones, cfg.canvas_config(),
                                self.need_teacher, cfg.data.on_bad_row)
        m = cfg.model
        acc = StatsAccumulator.for_dims(m.feature_dim, m.reg_dim if m.extra_token == "reg" else None,
                                        m.teacher_dim if cfg.backbones.standardize_teacher else None,
                                        cfg.train.stats_positions, self.backbones.tokenizer.eos_token_id)
        seen = 0
        while seen < cfg.train.stats_canvases:
            nb = src.next_batch(1)
            if nb is None:
                break
            acc.update(nb[0])
            seen += 1
        if seen == 0:
            raise ValueError("no training canvas available to estimate the feature statistics")
        return acc.finalize()

    def _build_model(self) -> None:
        cfg, tc = self.cfg, self.cfg.train
        check_fits(training_need(cfg, str(self.device), self.info.world_size))   # the widths the backbones gave
        torch.manual_seed(tc.seed)
        elf = ElfModel.new(cfg.elf_config(), prompt_template=prompt_template(cfg.data.task))  # saved with the model
        ema_init = None
        self.init_optimizer_from: Path | None = None
        self.state: dict = {"step": 0}
        if self.resume_from is not None:
            saved = ElfModel.from_pretrained(self.resume_from / "model")
            elf.x_stats, elf.reg_stats, elf.teacher_stats = saved.x_stats, saved.reg_stats, saved.teacher_stats
            elf.student.load_state_dict(ck.load_tensors(self.resume_from / "weights.safetensors"))
            ema_init = {k: v.float() for k, v in saved.student.state_dict().items()}
            self.state = json.loads((self.resume_from / "train_state.json").read_text())
        elif tc.init_from:
            # The start (docs/training.md "The MATH start"): online or EMA weights; the EMA continues from the
            # checkpoint's EMA; the optimiser state continues (loaded below) or starts fresh.
            ckpt, model_dir = init_source(tc.init_from)
            check_init(tc, ckpt, Path(tc.init_from))
            src = ElfModel.from_pretrained(model_dir)
            weights = src.student.state_dict() if tc.init_weights == "ema" else \
                ck.load_tensors(ckpt / "weights.safetensors")
            check_shapes({k: tuple(v.shape) for k, v in elf.student.state_dict().items()},
                         {k: tuple(v.shape) for k, v in weights.items()}, f"train.init_from {tc.init_from}",
                         "the run's model section")
            elf.student.load_state_dict(weights)
            elf.x_stats, elf.reg_stats, elf.teacher_stats = src.x_stats, src.reg_stats, src.teacher_stats
            ema_init = {k: v.float() for k, v in src.student.state_dict().items()}
            self.init_optimizer_from = ckpt if tc.init_optimizer == "continue" else None
        else:
            elf.x_stats, reg, teacher = self._estimate_stats()
            if cfg.model.extra_token == "reg":
                elf.reg_stats = reg
            elf.teacher_stats = teacher
        self.elf = elf
        student = elf.student.to(self.device).train()
        student.grad_checkpointing = tc.grad_checkpointing
        self.student = student
        self.precision = self._resolve_precision()
        self._build_update(student)
        if self.resume_from is not None:
            self._load_train_state(ema_init)
        elif ema_init is not None:  # train.init_from: the EMA continues; the optimiser too when asked
            self._assign_ema(ema_init)
            if self.init_optimizer_from is not None:
                self._load_optimizer(self.init_optimizer_from, "train.init_optimizer: continue")

    def _build_update(self, student: torch.nn.Module, loss: torch.nn.Module | None = None) -> None:
        """What updates ``student``: the wrapped module (DDP / FSDP, compiled when asked; ``loss``: another loss
        module than training's), the optimisers and the EMA."""
        tc = self.cfg.train
        self.module = wrap(student, tc.parallel, self.info, self.device, loss=loss)
        if tc.compile:
            self.module = torch.compile(self.module)
        self.optim = build_optimizers(student, tc, self.precision.fast_bf16)
        self.ema = EMA(student, tc.ema_decay)

    def _resolve_precision(self) -> Precision:
        """train.precision for this run (elfreg.precision: on a CPU, measured at the student's shapes); under
        torch.distributed every rank takes rank 0's choice, so that all compute alike."""
        cfg = self.cfg
        choice = None
        if self.info.is_main:
            workload = precision.student_workload(cfg.model, self.per_rank, backward=True)
            choice = precision.resolve(cfg.train.precision, self.device, workload, "train.precision")
        if self.info.enabled:
            import torch.distributed as dist

            box = [choice]
            dist.broadcast_object_list(box, src=0)
            choice = box[0]
        return choice

    # -- one optimiser step ---------------------------------------------------------------------------------------
    def _autocast(self):
        return self.precision.autocast(self.device.type)

    def _micro_batches(self):
        cfg = self.cfg
        out = []
        for _ in range(cfg.train.grad_accum):
            nb = self.batches.next_batch(self.per_rank)
            if nb is None:
                return None
            raw, keys = nb
            batch = standardize_batch(raw, self.elf.x_stats, self.elf.reg_stats,
                                      self.elf.teacher_stats if cfg.backbones.standardize_teacher else None)
            out.append((batch.to(self.device), self._draw(batch, keys)))
        return out

    def _draw(self, batch, keys: list[tuple[int, int]]):
        """The step's draws for a batch whose rows are keyed (epoch, global index): from the rows' own generators
        (elfreg.train.rng), so a row's draws do not depend on its batch (a distillation run draws more per row)."""
        m = self.cfg.model
        return draw(self.cfg.objective, example_generators(self.cfg.train.seed, keys), batch.x.shape[1],
                    m.feature_dim, m.reg_dim if m.extra_token == "reg" else None)

    def _loss_counts(self, batch, draws) -> dict:
        """The loss's denominators of one micro-batch, summed over ranks and micro-batches by ``step_once``."""
        return loss_counts(batch, draws, self.cfg.objective, self.cfg.model.extra_token)

    def step_once(self, step: int) -> dict | None:
        """Run optimiser step ``step`` (0-based); returns its metrics, or None when the data ran out."""
        cfg, info = self.cfg, self.info
        t0 = time.perf_counter()
        micro = self._micro_batches()
        if micro is None:
            return None
        t1 = time.perf_counter()
        eos = self.backbones.tokenizer.eos_token_id
        # The paper's tokens ride on the counts' all-reduce, as a tensor: no host sync before the forward passes.
        local_tokens = sum(paper_token_mask(b.tokens, b.prompt_mask, eos).sum() for b, _ in micro)
        counts = {}
        for batch, draws in micro:
            for k, v in self._loss_counts(batch, draws).items():
                counts[k] = counts.get(k, 0) + v.to(self.device)
        names = sorted(counts)
        total = all_reduce_sum(torch.stack([counts[k].float() for k in names]
                                           + [local_tokens.float().to(self.device)]), info)
        counts, tokens_t = {k: total[i] for i, k in enumerate(names)}, total[-1]
        objective = aux_weights_at(step, cfg.train, cfg.objective, self.total_steps)
        # measured before the step's own pass, on the same weights, batch and draws; nothing the step computes changes
        shares = self._grad_shares(step, micro[0], objective)
        self.optim.set_lr(lr_at(step, cfg.train, self.warmup_steps, self.total_steps))
        self.optim.zero_grad()
        sums = torch.zeros(len(SUM_TERMS) + len(MEAN_TERMS), device=self.device)
        for i, (batch, draws) in enumerate(micro):
            sync = i == len(micro) - 1 or not hasattr(self.module, "no_sync")
            ctx = contextlib.nullcontext() if sync else self.module.no_sync()
            with ctx:
                with self._autocast():
                    out = self.module(batch, draws, objective, counts)
                (out.loss * info.world_size).backward()
            vals = [out.terms.get(k, torch.zeros(())) for k in SUM_TERMS]
            vals += [out.terms[k] / (len(micro) * info.world_size) for k in MEAN_TERMS]
            sums += torch.stack([v.detach().float().to(self.device) for v in vals])
        sums = all_reduce_sum(sums, info)
        loss = float(sums[0])
        if not math.isfinite(loss):
            last = ck.latest_checkpoint(self.output)
            raise TrainingDiverged(f"loss is {loss} at step {step + 1}; last good checkpoint: "
                                   f"{last if last is not None else 'none (no checkpoint written yet)'}")
        for p in self.student.parameters():  # the reference zero-fills missing gradients
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.student.parameters(),
                                                   cfg.train.clip_grad if cfg.train.clip_grad > 0 else float("inf"))
        self.optim.step()
        self.ema.update(self.student)
        t2 = time.perf_counter()
        metrics = {k: float(sums[i]) for i, k in enumerate(SUM_TERMS + MEAN_TERMS)}
        tokens = int(tokens_t)
        metrics.update(lr=lr_at(step, cfg.train, self.warmup_steps, self.total_steps), grad_norm=float(full_tensor(grad_norm)),
                       time_features=t1 - t0, time_update=t2 - t1, tokens=tokens,
                       canvas_tokens=cfg.train.batch_size * cfg.train.grad_accum * micro[0][0].x.shape[1])
        if objective is not cfg.objective:  # a decaying auxiliary weight: the step's own
            metrics.update(repa_weight=objective.repa_weight, reg_weight=objective.reg_weight)
        metrics.update(shares)
        return metrics

    def grad_shares_due(self, step: int) -> bool:
        """Whether optimiser step ``step`` (0-based) measures the per-term gradient shares (train.grad_share_every,
        and the run's last step)."""
        every = self.cfg.train.grad_share_every
        return bool(every) and ((step + 1) % every == 0 or step + 1 == self.total_steps)

    def _grad_shares(self, step: int, micro_batch, objective) -> dict[str, float]:
        """elfreg.train.gradshare on the step's first micro-batch (main rank; not under FSDP, whose sharded
        parameters the plain student cannot use on one rank alone)."""
        if not self.grad_shares_due(step) or not self.info.is_main:
            return {}
        if self.info.enabled and self.cfg.train.parallel == "fsdp":
            return {}
        from elfreg.train.gradshare import grad_shares

        batch, draws = micro_batch
        return grad_shares(self.student, batch, draws, objective, self._autocast())

    # -- counts: tokens, epochs, overflow -------------------------------------------------------------------------
    def overflow_counts(self) -> tuple[int, int]:
        """(rows skipped for overflow, rows read) so far over all ranks (the feature cache's, in cached mode)."""
        if self.dataset is not None:
            o = self.dataset.overflow
            return o.skipped, o.kept + o.skipped
        o = self.batches.overflow
        total = all_reduce_sum(torch.tensor([float(o.skipped), float(o.kept + o.skipped)], device=self.device),
                               self.info)
        return int(total[0]), int(total[1])

    def progress(self, step: int) -> dict:
        """Tokens (the paper's count), examples and epochs trained so far, and the overflow counts."""
        examples = step * self.cfg.train.batch_size * self.cfg.train.grad_accum
        skipped, read = self.overflow_counts()
        out = {"tokens_total": int(self.state.get("tokens", 0)), "examples": examples,
               "overflow_skipped": skipped, "overflow_rows_read": read,
               "overflow_fraction": skipped / read if read else 0.0}
        if self.plan is not None and self.plan.rows:
            out["epoch"] = examples / self.plan.rows
        return out

    def check_overflow(self, progress: dict) -> None:
        """The run's skipped share against canvas.max_overflow_fraction, once enough rows were read."""
        if progress["overflow_rows_read"] >= self.cfg.canvas.overflow_check_rows:
            check_overflow(self.cfg, progress["overflow_skipped"], progress["overflow_rows_read"])

    # -- the run --------------------------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        cfg, tc, info = self.cfg, self.cfg.train, self.info
        step = int(self.state["step"])
        if info.is_main:
            dump_yaml(cfg, self.output / "config.yaml")
        log = MetricsLog(self.output, info.is_main, self.total_steps, step, tc.progress and info.is_main,
                         tc.tensorboard, tc.wandb_project, to_dict(cfg), self.progress_desc)
        history, last_ckpt = [], ck.latest_checkpoint(self.output)
        self._history = history   # the model card's final loss reads it
        saved_step = step if self.resume_from is not None else -1  # same on every rank
        epoch_steps = set(self.epoch_steps.values())
        self.last_validation: dict | None = None
        budget = self.budget   # train.minutes: decided at the first checkpoint, then at each until the decay
        clock = budget.clock if budget is not None else time.monotonic
        try:
            while step < self.total_steps:
                t_step = clock()
                metrics = self.step_once(step)
                if metrics is None:
                    break
                step += 1
                total = self.total_steps
                self.state["tokens"] = int(self.state.get("tokens", 0)) + metrics["tokens"]
                history.append({"step": step, **metrics})
                log.advance()
                checkpoint = (step % tc.save_every == 0 or step in epoch_steps
                              or (budget is not None and budget.steps is None
                                  and self._budget_forces_checkpoint(budget)))
                validate = self.validation is not None and self.validation.due(step, total, checkpoint)
                t_val = clock()
                if validate:
                    metrics.update(self.validate(step))
                t_val = clock() - t_val
                shares = any(k.startswith("grad_rel_") for k in metrics)
                if step % tc.log_every == 0 or step == total or validate or shares:
                    metrics.update(self.progress(step), **self.precision.record())
                    log.log(step, metrics)
                    self.check_overflow(metrics)
                t_save = clock()
                if checkpoint:
                    last_ckpt, saved_step = self.save(step) or last_ckpt, step
                    self._plot(final=False)
                t_save = clock() - t_save
                for hook in self.hooks:
                    hook(step)
                if budget is not None:
                    budget.step_done(clock() - t_step - t_val - t_save)
                    if checkpoint and step < self.total_steps and self._length_open(step):
                        self.total_steps = self._decide_length(budget, step, t_val, t_save)
                        log.set_total(self.total_steps)
            if saved_step != step:
                last_ckpt = self.save(step) or last_ckpt
        finally:
            log.close()
        total = self.total_steps
        model_dir = None
        dtype = next(iter(self.student.state_dict().values())).dtype
        ema = {k: full_tensor(v).detach().cpu().to(dtype) for k, v in self.ema.shadow.items()}  # collective under FSDP
        summary = {"steps": step, "planned_steps": total, **self.progress(step), **self.precision.record(),
                   **({"time_budget": self.budget.summary()} if self.budget is not None else {}),
                   "epoch_checkpoints": {k: s for k, s in self.epoch_steps.items() if s <= step},
                   "plan": json.loads(self.plan.to_json()) if self.plan is not None else None}
        if self.last_validation is not None:
            summary["validation"] = {**self.last_validation, "skipped_rows": self.validation.skipped}
            if tc.keep_best and self.validation.best["val_acc"] >= 0:
                summary["validation"]["best"] = {**self.validation.best, "model": str(self.output / "best")}
        training = self.card_training(step)
        if info.is_main:
            model_dir = self.output / "model"
            self.elf.save_pretrained(model_dir, ema, training=training)
            atomic_write_text(self.output / "summary.json", dumps(summary, indent=2))
        self.check_overflow(summary)
        self._plot(final=True)
        return TrainResult(step, self.output, model_dir, last_ckpt, history, summary)

    def _budget_forces_checkpoint(self, budget: TimeBudget) -> bool:
        """Whether train.minutes needs a checkpoint now to decide the length in time (rank 0's clock decides for all
        ranks, since a checkpoint is collective)."""
        force = budget.force_checkpoint() if self.info.is_main else False
        if self.info.enabled:
            force = bool(all_reduce_sum(torch.tensor([float(force)], device=self.device), self.info)[0] > 0)
        return force

    def _length_open(self, step: int, total: int | None = None) -> bool:
        """Whether the first ``step`` steps trained at rates that a run of ``total`` steps (default: the current
        length) shares with every other length: none of them is in the learning rate's final decay."""
        total = self.total_steps if total is None else total
        return step <= self.warmup_steps or decay_start(self.cfg.train, self.warmup_steps, total) >= step

    def _decide_length(self, budget: TimeBudget, step: int, validation_s: float, checkpoint_s: float) -> int:
        """train.minutes: the run's length, decided after the checkpoint at ``step`` (rank 0's measurements), never
        one whose decay would have begun already."""
        def checkpoints(k: int, n: int) -> bool:
            return k % self.cfg.train.save_every == 0 or k == n

        def validates(k: int, n: int) -> bool:
            return self.validation is not None and self.validation.due(k, n, checkpoints(k, n))

        least = next((n for n in range(step, budget.cap + 1) if self._length_open(step, n)), budget.cap)
        before = budget.steps
        if self.info.is_main:
            budget.decide(step, validation_s, checkpoint_s, validates, checkpoints, least)
        if self.info.enabled:
            import torch.distributed as dist

            box = [budget.record]
            dist.broadcast_object_list(box, src=0)
            budget.record = box[0]
        r = budget.record
        if self.info.is_main and before is None:
            logger.info(f"train.minutes = {r['minutes']:g}: {r['steps']:,} steps (decided at step {step:,}: "
                        f"{r['elapsed_s']:.0f} s spent, {r['step_s']:.3f} s a step, {r['validation_s']:.1f} s a "
                        f"validation, {r['checkpoint_s']:.1f} s a checkpoint; at most {r['cap']:,}; decided again at "
                        f"each checkpoint until the learning rate's decay begins)")
        elif self.info.is_main and r["steps"] != before:
            logger.info(f"train.minutes = {r['minutes']:g}: {r['steps']:,} steps instead of {before:,} (decided again "
                        f"at step {step:,}: {r['elapsed_s']:.0f} s spent, {r['step_s']:.3f} s a step planned)")
        return budget.steps

    def _plot(self, final: bool) -> None:
        """learning_curve.png from metrics.jsonl (main rank): at the end, at the run's first checkpoint, and at a later
        one when PLOT_EVERY_S have passed since the last drawing (a drawing costs about half a second: on a short
        CPU run that saves every few seconds, drawing at each checkpoint took 3 % of the run)."""
        if not self.info.is_main:
            return
        now = time.monotonic()
        if final or self._plotted_at is None or now - self._plotted_at >= PLOT_EVERY_S:
            from elfreg.train.metrics import plot_learning_curve

            plot_learning_curve(self.output)
            self._plotted_at = now


def train(cfg: RunConfig, output: str | Path, resume: str = "auto", backbones=None,
          dataset: CachedFeatures | None = None, hooks: list[Callable[[int], None]] = (),
          restart: bool = False) -> TrainResult:
    """Train (or resume) a run in ``output``; returns the final step, checkpoint and EMA model folder.

    Resuming refuses a config that differs from the checkpoint's (elfreg.train.checkpoint.check_resume);
    ``restart``: move an existing ``output`` aside first (``<name>.replaced-<UTC time>``) and start over."""
    return Trainer(cfg, output, resume, backbones, dataset, hooks, restart).run()


# names this module held before the run's setup and checkpoints moved to modules of their own
__getattr__ = moved(__name__, {"plan_run": "elfreg.train.setup", "_full": "elfreg.train.checkpointing:full_tensor",
                               "_assign": "elfreg.train.checkpointing:assign_full"})
