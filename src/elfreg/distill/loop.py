"""The distillation loop: one training run per stage (a PD round, or the flow map's one stage), each a
:class:`~elfreg.train.trainer.Trainer` with the teacher held frozen beside the student, so progress, atomic
checkpoints, exact resume, Ctrl-C, metrics, the learning curve and the model card are the training loop's own.

Output folder::

    OUTPUT/distill.yaml          the resolved run config and the teacher (a resumed run must match it)
    OUTPUT/round-1-16-steps/     a training run folder per stage (ckpt-*, metrics.jsonl, model/, summary.json)
    OUTPUT/round-2-8-steps/ ...  (the flow map: OUTPUT/flowmap/)
    OUTPUT/model/                the final student (the last stage's EMA weights) with distill.json
    OUTPUT/metrics.jsonl, learning_curve.png, summary.json

A stage whose folder holds summary.json and model/ is done: a resumed run starts from its model; the stage in
progress resumes from its newest checkpoint, bit for bit.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import yaml

from elfreg.atomic import atomic_write_text
from elfreg.config import ElfRegConfig
from elfreg.configtools import to_dict
from elfreg.distill.config import FLOWMAP_ONLY, DistillRunConfig
from elfreg.distill.draws import distill_draws
from elfreg.distill.loss import DistillLoss
from elfreg.distill.pd import PDRound, pd_rounds
from elfreg.distilled import DistillRecord
from elfreg.pretrained import ElfModel
from elfreg.train import checkpoint as ck
from elfreg.train.config import RunConfig
from elfreg.train.dist import barrier, init_distributed, resolve_device
from elfreg.train.trainer import Trainer, TrainResult

# Hook of a distillation run: hook(stage index (1-based), optimiser step within the stage), after every step.
StageHook = Callable[[int, int], None]


def stage_name(method: str, index: int, steps: int) -> str:
    """A stage's folder: ``round-<i>-<n>-steps`` (PD), ``flowmap`` (the flow map's one stage)."""
    return f"round-{index}-{steps}-steps" if method == "pd" else "flowmap"


def stage_config(run: DistillRunConfig, teacher: ElfRegConfig, index: int, output: Path | None = None) -> RunConfig:
    """The training config of stage ``index`` (1-based): the teacher's model (a flow map gets the jump's time input),
    its objective with the run's branch shares and without REPA (not part of distillation), its backbones; the run's
    train section with this stage's budget and seed (seed + index - 1), data and canvas. Cached features go to
    ``output``/feature-cache unless data.cache_dir says otherwise: every stage reads the same cache."""
    d, ec = run.distill, teacher
    data = run.data
    if data.features == "cached" and data.cache_dir is None and output is not None:
        data = dataclasses.replace(data, cache_dir=str(Path(output) / "feature-cache"))
    model = dataclasses.replace(ec.model, flow_map=d.method == "flowmap")
    objective = dataclasses.replace(d.objective(ec.objective), use_repa=False)
    train = dataclasses.replace(run.train, seed=run.train.seed + index - 1, epochs=d.epochs_per_round,
                                steps=d.steps_per_round, match_backbones=False, head_vocab="full")
    return RunConfig(model=model, objective=objective, backbones=ec.backbones, train=train, data=data,
                     canvas=run.canvas)


class StageTrainer(Trainer):
    """One stage: the Trainer's loop on a student that starts from ``start`` (the teacher's or the previous round's
    EMA weights), with the distillation loss, the frozen teacher network and its own per-row draws."""

    def __init__(self, cfg: RunConfig, output: Path, teacher: ElfModel, start: dict[str, torch.Tensor],
                 run: DistillRunConfig, round_: PDRound | None, record: DistillRecord, resume: str = "auto",
                 backbones=None, dataset=None, hooks=(), restart: bool = False) -> None:
        self.teacher_model, self.start_weights, self.run_cfg, self.round, self.record = (teacher, start, run, round_,
                                                                                         record)
        super().__init__(cfg, output, resume, backbones, dataset, hooks, restart)
        self.progress_desc = f"distill {output.name}"

    def _build_model(self) -> None:
        cfg, tc, d = self.cfg, self.cfg.train, self.run_cfg.distill
        teacher = self.teacher_model
        torch.manual_seed(tc.seed)
        elf = ElfModel.new(cfg.elf_config(), prompt_template=teacher.prompt_template)
        elf.x_stats, elf.reg_stats, elf.teacher_stats = teacher.x_stats, teacher.reg_stats, teacher.teacher_stats
        elf.distill = self.record
        self.state: dict = {"step": 0}
        ema_init = None
        if self.resume_from is not None:
            elf.student.load_state_dict(ck.load_tensors(self.resume_from / "weights.safetensors"))
            saved = ck.load_tensors(self.resume_from / "model" / "model.safetensors")
            ema_init = {k: v.float() for k, v in saved.items()}
            self.state = json.loads((self.resume_from / "train_state.json").read_text())
        else:
            load_start(elf.student, self.start_weights)
        self.elf = elf
        student = elf.student.to(self.device).train()
        student.grad_checkpointing = tc.grad_checkpointing
        self.student = student
        self.precision = self._resolve_precision()
        # a copy of the teacher folder's weights (the original model's EMA weights, every round), frozen
        self.teacher_net = copy.deepcopy(teacher.student).to(self.device).eval().requires_grad_(False)
        loss = DistillLoss(self.teacher_net, d.method, self.round, d.diagonal_frac, d.full_frac)
        self._build_update(student, loss)
        if d.method == "flowmap" and d.target_weights == "ema":
            loss.ema_targets(student, self.ema.shadow)
        if self.resume_from is not None:
            self._load_train_state(ema_init)

    def _draw(self, batch, keys):
        from elfreg.train.rng import example_generators

        m = self.cfg.model
        return distill_draws(self.cfg.objective, example_generators(self.cfg.train.seed, keys), batch.x.shape[1],
                             m.feature_dim, m.reg_dim if m.extra_token == "reg" else None,
                             self.run_cfg.distill.teacher_grid)

    def _loss_counts(self, batch, draws) -> dict:
        return {"rows": torch.tensor(batch.x.shape[0])}   # per-example means, then the global batch's mean

    def card_training(self, step: int) -> dict:
        out = super().card_training(step)
        out["distill"] = dataclasses.asdict(self.record)
        return out


def load_start(student: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """The start weights into a student; a flow-map student made from a denoiser keeps its new jump embedder's
    initialisation (its last layer zero: the flow map starts as the denoiser)."""
    missing, unexpected = student.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.startswith("jump_embedder.")]
    if missing or unexpected:
        raise ValueError(f"the start weights do not fit the student: missing {missing[:5]}, unexpected "
                         f"{unexpected[:5]}")


@dataclass
class DistillResult:
    """What a distillation run leaves: the final model folder, its record, each stage's result (None for a stage
    an earlier run finished) and the summary (also summary.json)."""

    output: Path
    model_dir: Path | None
    record: DistillRecord
    stages: list[TrainResult | None] = field(default_factory=list)
    summary: dict = field(default_factory=dict)


def _run_key(run: DistillRunConfig, teacher: str) -> dict:
    return {"teacher": str(teacher), **to_dict(run)}


def check_same_run(output: Path, run: DistillRunConfig, teacher: str) -> None:
    """Refuse to continue an output made with another teacher or other distillation settings (one line)."""
    from elfreg.fingerprint import RunMismatch, differences, flatten, mismatch_message

    path = output / "distill.yaml"
    if not path.is_file():
        return
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        raise ValueError(f"{path}: cannot read the run's config; pass --restart to start over") from None
    free = {"train.progress", "train.log_every", "train.save_every", "train.keep_last", "train.device",
            "train.tensorboard", "train.wandb_project", "train.compile", "train.grad_checkpointing"}
    if run.distill.method == "pd":   # the flow map's settings change nothing in a PD run
        free |= {f"distill.{k}" for k in FLOWMAP_ONLY}
    keep = lambda d: {k: v for k, v in flatten(json.loads(json.dumps(d))).items() if k not in free}  # noqa: E731
    diffs = differences(keep(saved), keep(_run_key(run, teacher)))
    if diffs:
        raise RunMismatch(mismatch_message(output, diffs, "--output"))


def _stage_done(folder: Path) -> bool:
    return (folder / "summary.json").is_file() and (folder / "model" / "model.safetensors").is_file()


def distill(teacher: str | Path, output: str | Path, run: DistillRunConfig, resume: str = "auto", backbones=None,
            dataset=None, hooks: list[StageHook] = (), restart: bool = False) -> DistillResult:
    """Distil the model folder ``teacher`` into a few-step student in ``output`` (module docstring): PD rounds or
    the flow map's one stage, each resumable; returns the final model folder and its record."""
    from elfreg.fingerprint import move_aside
    from elfreg.train.setup import need_teacher

    if resume not in ("auto", "never"):
        raise ValueError(f"resume must be 'auto' or 'never', got {resume!r}")
    info = init_distributed()
    teacher_model = ElfModel.from_pretrained(teacher)
    output = Path(output)
    d = run.distill
    if info.is_main:
        if restart:
            move_aside([output])
        output.mkdir(parents=True, exist_ok=True)
        if resume == "auto":
            check_same_run(output, run, str(teacher))
        atomic_write_text(output / "distill.yaml", yaml.safe_dump(_run_key(run, str(teacher)), sort_keys=False))
    barrier(info)
    rounds = pd_rounds(d.rounds, d.teacher_grid) if d.method == "pd" else [None]
    stages = d.stages
    start = {k: v.detach().clone() for k, v in teacher_model.student.state_dict().items()}
    trained: list[int] = []
    results: list[TrainResult | None] = []
    record = None
    for i, (n, round_) in enumerate(zip(stages, rounds), start=1):
        folder = output / stage_name(d.method, i, n)
        cfg = stage_config(run, teacher_model.config, i, output)
        record = DistillRecord(teacher=str(teacher), method=d.method, rounds=stages[:i], steps=n,
                               trained_steps=list(trained),
                               sampler={"sampler": "full-span", "grid": "uniform",
                                        "nfe": d.default_nfe if i == len(stages) else n + 1})
        if resume == "auto" and _stage_done(folder):
            summary = json.loads((folder / "summary.json").read_text())
            trained.append(int(summary["steps"]))
            start = ck.load_tensors(folder / "model" / "model.safetensors")
            results.append(None)
            continue
        if backbones is None:
            from elfreg.backbones import Backbones

            backbones = Backbones(cfg.backbones, resolve_device(cfg.train.device, info),
                                  need_teacher=need_teacher(cfg))
        stage_hooks = [lambda step, h=h, i=i: h(i, step) for h in hooks]
        trainer = StageTrainer(cfg, folder, teacher_model, start, run, round_, record, resume, backbones, dataset,
                               stage_hooks)
        record.trained_steps.append(int(trainer.total_steps))
        res = trainer.run()
        if res.step != trainer.total_steps:   # the data ran out: the record says what was trained
            record.trained_steps[-1] = res.step
            if info.is_main and res.model_dir is not None:
                trainer.elf.save_pretrained(res.model_dir, ck.load_tensors(res.model_dir / "model.safetensors"),
                                            training=trainer.card_training(res.step))
        trained.append(res.step)
        results.append(res)
        barrier(info)
        start = ck.load_tensors(folder / "model" / "model.safetensors")
    assert record is not None
    record = dataclasses.replace(record, trained_steps=trained)
    model_dir = output / "model"
    summary = {"teacher": str(teacher), "method": d.method, "record": dataclasses.asdict(record),
               "stages": [{"folder": stage_name(d.method, i, n), "student_steps": n, "optimiser_steps": s,
                           **({"teacher_sub_steps": r.sub_steps} if r is not None else {})}
                          for i, (n, s, r) in enumerate(zip(stages, trained, rounds), start=1)]}
    if info.is_main:
        last = output / stage_name(d.method, len(stages), stages[-1]) / "model"
        _publish(last, model_dir, record)
        merge_metrics(output, [stage_name(d.method, i, n) for i, n in enumerate(stages, start=1)])
        atomic_write_text(output / "summary.json", json.dumps(summary, indent=2))
    barrier(info)
    return DistillResult(output, model_dir, record, results, summary)


def _publish(src: Path, dst: Path, record: DistillRecord) -> None:
    """Copy the last stage's model folder to ``dst`` with the run's final record, whole or not at all."""
    from elfreg.distilled import write_record

    tmp = dst.parent / f".tmp-{dst.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    write_record(tmp, record)
    old = dst.parent / f".old-{dst.name}-{os.getpid()}"
    if dst.exists():
        os.replace(dst, old)
    os.replace(tmp, dst)
    shutil.rmtree(old, ignore_errors=True)


def merge_metrics(output: Path, stages: list[str]) -> Path | None:
    """``output/metrics.jsonl``: every stage's logged steps, numbered on across stages, each with its stage; and
    the learning curve drawn from it."""
    from elfreg.train.metrics import plot_learning_curve, read_metrics

    lines, offset = [], 0
    for name in stages:
        records = read_metrics(output / name / "metrics.jsonl")
        for r in records:
            lines.append(json.dumps({**r, "step": offset + r["step"], "stage_step": r["step"], "stage": name}))
        if records:
            offset += records[-1]["step"]
    atomic_write_text(output / "metrics.jsonl", "".join(line + "\n" for line in lines))
    return plot_learning_curve(output)
