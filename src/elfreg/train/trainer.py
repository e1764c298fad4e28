"""The training loop (issue 5): per-example draws, global-count loss reduction, Muon/AdamW, EMA, checkpoints.

Every example's draws come from a generator seeded by (seed, epoch, global index) and every loss term is divided
by its count over the whole global batch (all ranks, all micro-batches), so a run's weights do not depend on the
world size or the accumulation split (up to float reduction order).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from elfreg import precision
from elfreg.atomic import atomic_write_text
from elfreg.configtools import ConfigError, dump_yaml, to_dict
from elfreg.tasks.formats import prompt_template
from elfreg.fingerprint import move_aside
from elfreg.hub import ElfModel, check_shapes
from elfreg.jsontext import dumps
from elfreg.objective import draw, loss_counts
from elfreg.precision import Precision
from elfreg.resources import check_fits, training_need
from elfreg.stats import FeatureStats
from elfreg.train import checkpoint as ck
from elfreg.train.config import RunConfig
from elfreg.train.dist import DistInfo, all_reduce_sum, barrier, init_distributed, resolve_device, wrap
from elfreg.train.features import CachedFeatures, StatsAccumulator, paper_token_mask, standardize_batch
from elfreg.train.metrics import MetricsLog
from elfreg.train.optim import EMA, build_optimizers, lr_at
from elfreg.train.plan import TrainPlan, check_init, check_overflow, count_lengths, init_source, make_plan
from elfreg.train.rng import example_generators

SUM_TERMS = ("loss", "loss_elf", "loss_repa", "loss_reg")  # global-count contributions: summed
MEAN_TERMS = ("l2", "ce", "decoder_frac")  # per-batch diagnostics: averaged


class TrainingDiverged(RuntimeError):
    """A NaN/inf loss; the message names the step and the last good checkpoint."""


@dataclass
class TrainResult:
    step: int
    output: Path
    model_dir: Path | None
    last_checkpoint: Path | None
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)  # also written as summary.json: steps, epochs, tokens, overflow


def run_stream(cfg: RunConfig, rank: int = 0, world: int = 1, epochs: int | None | str = "cfg"):
    """The run's ExampleStream (``{shared}`` in a path is $ELFREG_SHARED, else ../shared)."""
    import os

    from elfreg.data import ExampleStream

    d = cfg.data
    if not d.sources:
        raise ValueError("data.sources is empty: name at least one source, e.g. \"data.sources=[{name: mine, task: "
                         "math, path: mydata.jsonl, format: jsonl, columns: {prompt: question, response: answer}}]\" "
                         "(docs/training.md, \"Train on your JSONL\"; docs/data.md)")
    specs = d.source_specs(os.environ.get("ELFREG_SHARED") or str(Path.cwd().parent / "shared"))
    return ExampleStream(specs, cfg.train.seed, d.shuffle_buffer, d.epochs if epochs == "cfg" else epochs, rank, world)


def count_rows(cfg: RunConfig, tokenizer) -> dict:
    """One pass over the run's data (one epoch, no shuffle buffer): the token counts the plan needs."""
    d = cfg.data
    stream = run_stream(dataclasses.replace(cfg, data=dataclasses.replace(d, shuffle_buffer=1)), epochs=1)
    lengths = count_lengths(stream, d.task, tokenizer, cfg.canvas.add_special_tokens, d.on_bad_row)
    return lengths.counts(cfg.model.max_len, cfg.model.max_prompt_len)


def plan_from_counts(cfg: RunConfig, counts: dict) -> TrainPlan:
    """make_plan from count_rows' (or a feature cache's) counts."""
    plan = make_plan(cfg, rows=counts["rows"], overflow=tuple(counts["overflow"]),
                     tokens_per_epoch=counts["tokens_per_epoch"], max_tokens=counts["max_tokens"], fit=counts.get("fit"))
    plan.rows_read, plan.bad_rows = counts.get("rows_read", plan.rows_read), counts.get("bad_rows", 0)
    return plan


def plan_run(cfg: RunConfig, tokenizer=None) -> TrainPlan:
    """The plan of a run without training (``elfreg train --dry-run``): only the tokenizer is loaded."""
    if tokenizer is None:
        from elfreg.backbones import load_tokenizer
        from elfreg.train.plan import check_sources

        b = cfg.backbones
        offline = check_sources(cfg)  # an unreachable hub fails here, naming each source, not after ~40 s of retries
        tokenizer = load_tokenizer(b.encoder, b.encoder_gguf_file, b.revision, local_files_only=offline)
    return plan_from_counts(cfg, count_rows(cfg, tokenizer))


def _full(t: Tensor) -> Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _assign(dst: Tensor, full: Tensor) -> None:
    """Copy a full tensor into a plain or FSDP-sharded (DTensor) destination."""
    if hasattr(dst, "device_mesh"):
        from torch.distributed.tensor import distribute_tensor

        full = distribute_tensor(full.to(dst.dtype), dst.device_mesh, dst.placements)
    dst.copy_(full.to(dst.device) if not hasattr(full, "device_mesh") else full)


def match_backbones(cfg: RunConfig, backbones) -> RunConfig:
    """Set model widths and vocab size from the loaded backbones (train.match_backbones)."""
    m = cfg.model
    changes = dict(feature_dim=backbones.feature_dim, vocab_size=len(backbones.tokenizer))
    if backbones.teacher_dim is not None:
        changes.update(teacher_dim=backbones.teacher_dim, reg_dim=backbones.teacher_dim)
    return dataclasses.replace(cfg, model=dataclasses.replace(m, **changes))


def check_backbones(cfg: RunConfig, backbones) -> None:
    """Model widths must equal the backbones' (errors name the field)."""
    from elfreg.configtools import check

    check(cfg.model.feature_dim == backbones.feature_dim, "model.feature_dim",
          f"{cfg.model.feature_dim} != encoder width {backbones.feature_dim}")
    check(cfg.model.vocab_size >= len(backbones.tokenizer), "model.vocab_size",
          f"{cfg.model.vocab_size} < len(tokenizer) = {len(backbones.tokenizer)}")
    if backbones.teacher_dim is not None and cfg.model.repa:
        check(cfg.model.teacher_dim == backbones.teacher_dim, "model.teacher_dim",
              f"{cfg.model.teacher_dim} != teacher width {backbones.teacher_dim}")
    if backbones.teacher_dim is not None and cfg.model.extra_token == "reg":
        check(cfg.model.reg_dim == backbones.teacher_dim, "model.reg_dim",
              f"{cfg.model.reg_dim} != teacher width {backbones.teacher_dim}")


def need_teacher(cfg: RunConfig) -> bool:
    return cfg.backbones.teacher is not None and (cfg.objective.use_repa or cfg.objective.use_reg
                                                  or cfg.model.extra_token == "reg")


class Trainer:
    """One training run in ``output``; see ``train``."""

    def __init__(self, cfg: RunConfig, output: str | Path, resume: str = "auto", backbones=None,
                 dataset: CachedFeatures | None = None, hooks: list[Callable[[int], None]] = (),
                 restart: bool = False) -> None:
        if resume not in ("auto", "never"):
            raise ValueError(f"resume must be 'auto' or 'never', got {resume!r}")
        self.info: DistInfo = init_distributed()
        self.device = resolve_device(cfg.train.device, self.info)
        self.output = Path(output)
        self.hooks = list(hooks)
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
        self.module = wrap(student, tc.parallel, self.info, self.device)
        if tc.compile:
            self.module = torch.compile(self.module)
        self.optim = build_optimizers(student, tc, self.precision.fast_bf16)
        self.ema = EMA(student, tc.ema_decay)
        if self.resume_from is not None:
            self._load_train_state(ema_init)
        elif ema_init is not None:  # train.init_from: the EMA continues; the optimiser too when asked
            self._assign_ema(ema_init)
            if self.init_optimizer_from is not None:
                self._load_optimizer(self.init_optimizer_from, "train.init_optimizer: continue")

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

    def _assign_ema(self, ema_full: dict[str, Tensor]) -> None:
        with torch.no_grad():
            for n, v in self.ema.shadow.items():
                _assign(v, ema_full[n])

    def _load_train_state(self, ema_full: dict[str, Tensor]) -> None:
        self._assign_ema(ema_full)
        world = self.state.get("world_size", 1)
        if world != self.info.world_size:
            raise ValueError(f"{self.resume_from} was written by {world} processes; resume with the same world size "
                             f"(this run has {self.info.world_size})")
        self._load_optimizer(self.resume_from, "resume")
        self.batches.load_state_dict(self.state["data"][self.info.rank])
        ck.set_rng_state(self.state["rng"])

    def _load_optimizer(self, d: Path, why: str) -> None:
        """The optimiser state of checkpoint ``d`` (FSDP: this rank's shard, which needs the world size it was
        written with)."""
        meta = json.loads((d / "optimizer.json").read_text())
        fsdp = self.cfg.train.parallel == "fsdp"
        if fsdp:
            world = json.loads((d / "train_state.json").read_text()).get("world_size", 1)
            if world != self.info.world_size:
                raise ValueError(f"{why}: {d} holds FSDP optimiser shards of {world} processes; this run has "
                                 f"{self.info.world_size} (use that many, or train.init_optimizer=fresh)")
        name = f"optimizer-rank{self.info.rank}.safetensors" if fsdp else "optimizer.safetensors"
        state = ck.unflatten_optimizer(ck.load_tensors(d / name), meta)
        for key, opt in self.optim.optimizers.items():  # FSDP: local shards back into DTensors
            params = [p for g in opt.param_groups for p in g["params"]]
            for idx, st in state[key]["state"].items():
                p = params[idx]
                if hasattr(p, "device_mesh"):
                    from torch.distributed.tensor import DTensor

                    for k, v in st.items():
                        if isinstance(v, Tensor) and v.shape == p.to_local().shape and v.ndim > 0:
                            st[k] = DTensor.from_local(v.to(p.device), p.device_mesh, p.placements)
        self.optim.load_state_dict(state)

    # -- one optimiser step ---------------------------------------------------------------------------------------
    def _autocast(self):
        return self.precision.autocast(self.device.type)

    def _micro_batches(self):
        cfg, m = self.cfg, self.cfg.model
        out = []
        for _ in range(cfg.train.grad_accum):
            nb = self.batches.next_batch(self.per_rank)
            if nb is None:
                return None
            raw, keys = nb
            batch = standardize_batch(raw, self.elf.x_stats, self.elf.reg_stats,
                                      self.elf.teacher_stats if cfg.backbones.standardize_teacher else None)
            draws = draw(cfg.objective, example_generators(cfg.train.seed, keys), batch.x.shape[1], m.feature_dim,
                         m.reg_dim if m.extra_token == "reg" else None)
            out.append((batch.to(self.device), draws))
        return out

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
            for k, v in loss_counts(batch, draws, cfg.objective, cfg.model.extra_token).items():
                counts[k] = counts.get(k, 0) + v.to(self.device)
        names = sorted(counts)
        total = all_reduce_sum(torch.stack([counts[k].float() for k in names]
                                           + [local_tokens.float().to(self.device)]), info)
        counts, tokens_t = {k: total[i] for i, k in enumerate(names)}, total[-1]
        self.optim.set_lr(lr_at(step, cfg.train, self.warmup_steps, self.total_steps))
        self.optim.zero_grad()
        sums = torch.zeros(len(SUM_TERMS) + len(MEAN_TERMS), device=self.device)
        for i, (batch, draws) in enumerate(micro):
            sync = i == len(micro) - 1 or not hasattr(self.module, "no_sync")
            ctx = contextlib.nullcontext() if sync else self.module.no_sync()
            with ctx:
                with self._autocast():
                    out = self.module(batch, draws, cfg.objective, counts)
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
        metrics.update(lr=lr_at(step, cfg.train, self.warmup_steps, self.total_steps), grad_norm=float(_full(grad_norm)),
                       time_features=t1 - t0, time_update=t2 - t1, tokens=tokens,
                       canvas_tokens=cfg.train.batch_size * cfg.train.grad_accum * micro[0][0].x.shape[1])
        return metrics

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

    def card_training(self, step: int) -> dict:
        """How the model was trained up to ``step``, for its model card (elfreg.card.training_record); collective
        under torch.distributed (``progress``)."""
        from elfreg.card import training_record

        losses = [h["loss"] for h in getattr(self, "_history", [])]
        return training_record(to_dict(self.cfg), step, {"planned_steps": self.total_steps, **self.progress(step)},
                               losses, self.info.world_size)

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def save(self, step: int) -> Path | None:
        """Write ckpt-<step> (collective under FSDP; the main rank writes)."""
        info = self.info
        weights = {k: _full(v).detach().cpu() for k, v in self.student.state_dict().items()}
        ema = {k: _full(v).detach().cpu() for k, v in self.ema.shadow.items()}
        opt_tensors, opt_meta = ck.flatten_optimizer(self.optim.state_dict())
        data_states = [self.batches.state_dict()]
        if info.enabled:
            import torch.distributed as dist

            data_states = [None] * info.world_size
            dist.all_gather_object(data_states, self.batches.state_dict())
        shard_dir = self.output / ".optim-shards"
        if self.cfg.train.parallel == "fsdp" and info.enabled:
            ck.save_tensors(shard_dir / f"optimizer-rank{info.rank}.safetensors", opt_tensors)
        barrier(info)
        path = None
        training = self.card_training(step)   # collective (progress sums the overflow counts over ranks)
        if info.is_main:
            dtype = next(iter(self.student.state_dict().values())).dtype
            state = {"step": step, "world_size": info.world_size, "data": data_states, "rng": ck.rng_state(),
                     "tokens": int(self.state.get("tokens", 0))}

            def write_model(folder: Path) -> None:
                self.elf.save_pretrained(folder, {k: v.to(dtype) for k, v in ema.items()}, training=training)

            def write_opt(p: Path) -> None:
                if self.cfg.train.parallel == "fsdp" and info.enabled:
                    for r in range(info.world_size):
                        name = f"optimizer-rank{r}.safetensors"
                        (shard_dir / name).replace(p.parent / name)
                else:
                    ck.save_tensors(p, opt_tensors)

            files = {
                "model": write_model,
                "weights.safetensors": lambda p: ck.save_tensors(p, weights),
                "optimizer.safetensors": write_opt,
                "optimizer.json": lambda p: atomic_write_text(p, json.dumps(opt_meta)),
                "train_state.json": lambda p: atomic_write_text(p, json.dumps(state)),
                "config.yaml": lambda p: dump_yaml(self.cfg, p),
            }
            protect = set(self.epoch_steps.values())
            path = ck.write_checkpoint(self.output, step, files, self.cfg.train.keep_last, protect)
            for key, s in self.epoch_steps.items():
                if s == step:
                    ck.link_epoch(self.output, key, path)
        barrier(info)
        return path

    # -- the run --------------------------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        cfg, tc, info = self.cfg, self.cfg.train, self.info
        step = int(self.state["step"])
        total = self.total_steps
        if info.is_main:
            dump_yaml(cfg, self.output / "config.yaml")
        log = MetricsLog(self.output, info.is_main, total, step, tc.progress and info.is_main, tc.tensorboard,
                         tc.wandb_project, to_dict(cfg), self.progress_desc)
        history, last_ckpt = [], ck.latest_checkpoint(self.output)
        self._history = history   # the model card's final loss reads it
        saved_step = step if self.resume_from is not None else -1  # same on every rank
        epoch_steps = set(self.epoch_steps.values())
        try:
            while step < total:
                metrics = self.step_once(step)
                if metrics is None:
                    break
                step += 1
                self.state["tokens"] = int(self.state.get("tokens", 0)) + metrics["tokens"]
                history.append({"step": step, **metrics})
                log.advance()
                if step % tc.log_every == 0 or step == total:
                    metrics.update(self.progress(step), **self.precision.record())
                    log.log(step, metrics)
                    self.check_overflow(metrics)
                if step % tc.save_every == 0 or step in epoch_steps:
                    last_ckpt, saved_step = self.save(step) or last_ckpt, step
                for hook in self.hooks:
                    hook(step)
            if saved_step != step:
                last_ckpt = self.save(step) or last_ckpt
        finally:
            log.close()
        model_dir = None
        dtype = next(iter(self.student.state_dict().values())).dtype
        ema = {k: _full(v).detach().cpu().to(dtype) for k, v in self.ema.shadow.items()}  # collective under FSDP
        summary = {"steps": step, "planned_steps": total, **self.progress(step), **self.precision.record(),
                   "epoch_checkpoints": {k: s for k, s in self.epoch_steps.items() if s <= step},
                   "plan": json.loads(self.plan.to_json()) if self.plan is not None else None}
        training = self.card_training(step)
        if info.is_main:
            model_dir = self.output / "model"
            self.elf.save_pretrained(model_dir, ema, training=training)
            atomic_write_text(self.output / "summary.json", dumps(summary, indent=2))
        self.check_overflow(summary)
        return TrainResult(step, self.output, model_dir, last_ckpt, history, summary)


def train(cfg: RunConfig, output: str | Path, resume: str = "auto", backbones=None,
          dataset: CachedFeatures | None = None, hooks: list[Callable[[int], None]] = (),
          restart: bool = False) -> TrainResult:
    """Train (or resume) a run in ``output``; returns the final step, checkpoint and EMA model folder.

    Resuming refuses a config that differs from the checkpoint's (elfreg.train.checkpoint.check_resume);
    ``restart``: move an existing ``output`` aside first (``<name>.replaced-<UTC time>``) and start over."""
    return Trainer(cfg, output, resume, backbones, dataset, hooks, restart).run()
