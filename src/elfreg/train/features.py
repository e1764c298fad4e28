"""Frozen features for training: online (backbones run on every batch) or cached on disk (spec §2).

Backbones give raw states; the student sees x and r standardised with the model's statistics (x_stats over the
response positions ``train.stats_positions`` names, reg_stats over REG targets, estimated once from the first K
training canvases) and raw teacher REPA states unless ``backbones.standardize_teacher``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch
from torch import Tensor

from elfreg.atomic import atomic_write, atomic_write_text
from elfreg.data import CanvasBatch, CanvasConfig, CanvasStats, collate
from elfreg.objective import TrainBatch
from elfreg.stats import FeatureStats, RunningStats

CACHE_VERSION = 1


def raw_batch(backbones, cb: CanvasBatch, need_teacher: bool) -> TrainBatch:
    """Raw (unstandardised) features of collated canvases as a TrainBatch on the backbones' device."""
    feats = backbones.canvas_features(cb.input_ids, cb.reg_source_index if need_teacher else None, cb.prompt_len)
    dev = feats.x.device
    return TrainBatch(x=feats.x, tokens=cb.input_ids.to(dev), prompt_mask=cb.prompt_mask.to(dev),
                      content_mask=cb.content_mask.to(dev), teacher=feats.teacher if need_teacher else None,
                      reg=feats.reg, teacher_at_source=feats.teacher_at_source)


def standardize_batch(raw: TrainBatch, x_stats: FeatureStats, reg_stats: FeatureStats | None,
                      teacher_stats: FeatureStats | None = None) -> TrainBatch:
    """x and reg standardised per feature; teacher states too only when teacher_stats is given (spec §2)."""
    ts = (lambda h: h if h is None or teacher_stats is None else teacher_stats.standardize(h))
    return TrainBatch(
        x=x_stats.standardize(raw.x), tokens=raw.tokens, prompt_mask=raw.prompt_mask,
        content_mask=raw.content_mask, teacher=ts(raw.teacher),
        reg=reg_stats.standardize(raw.reg) if raw.reg is not None and reg_stats is not None else
        (raw.reg.float() if raw.reg is not None else None),
        teacher_at_source=ts(raw.teacher_at_source))


STATS_POSITIONS = ("response", "unpadded")


def unpadded_response_mask(tokens: Tensor, prompt_mask: Tensor, eos_id: int) -> Tensor:
    """(B, L) bool: response content plus the response's own EOS (the first EOS after the prompt); no EOS padding.

    These are the positions the paper's token budgets count on the response side (spec §7).
    """
    response = ~prompt_mask
    eos = (tokens == eos_id) & response
    pos = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    first_eos = torch.where(eos, pos, tokens.shape[1]).min(dim=1, keepdim=True).values
    return response & (pos <= first_eos)


def paper_token_mask(tokens: Tensor, prompt_mask: Tensor, eos_id: int) -> Tensor:
    """(B, L) bool: the positions the paper's token budgets count: prompt + response + its EOS (spec §7)."""
    return prompt_mask | unpadded_response_mask(tokens, prompt_mask, eos_id)


@dataclass
class StatsAccumulator:
    """Running statistics of x, reg (REG targets) and optionally teacher (content positions).

    x comes from the positions ``positions`` names: "response" = every response position (content, EOS, EOS
    padding), "unpadded" = response content + its EOS only (needs ``eos_id``). See docs/training.md for the choice.
    """

    x: RunningStats
    reg: RunningStats | None = None
    teacher: RunningStats | None = None
    positions: str = "unpadded"
    eos_id: int | None = None

    def __post_init__(self) -> None:
        if self.positions not in STATS_POSITIONS:
            raise ValueError(f"train.stats_positions: unknown {self.positions!r}; choose from {STATS_POSITIONS}")
        if self.positions == "unpadded" and self.eos_id is None:
            raise ValueError("train.stats_positions 'unpadded' needs the tokenizer's eos_token_id")

    @classmethod
    def for_dims(cls, d: int, d_r: int | None, d_t: int | None, positions: str = "unpadded",
                 eos_id: int | None = None) -> "StatsAccumulator":
        return cls(RunningStats(d), RunningStats(d_r) if d_r else None, RunningStats(d_t) if d_t else None,
                   positions, eos_id)

    def x_mask(self, raw: TrainBatch) -> Tensor:
        """(B, L) bool: the positions whose x enter the statistics."""
        if self.positions == "response":
            return ~raw.prompt_mask
        return unpadded_response_mask(raw.tokens, raw.prompt_mask, self.eos_id)

    def update(self, raw: TrainBatch) -> None:
        self.x.update(raw.x, self.x_mask(raw))
        if self.reg is not None and raw.reg is not None:
            self.reg.update(raw.reg)
        if self.teacher is not None and raw.teacher is not None:
            self.teacher.update(raw.teacher, raw.content_mask)

    def finalize(self) -> tuple[FeatureStats, FeatureStats | None, FeatureStats | None]:
        return (self.x.finalize(), self.reg.finalize() if self.reg and self.reg.count else None,
                self.teacher.finalize() if self.teacher and self.teacher.count else None)


# -- the on-disk cache ----------------------------------------------------------------------------------------
def rows_hash(rows: Iterable[dict]) -> str:
    """SHA-256 of the rows' prompt/response/answer (canonical JSON, in order)."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps([r.get("prompt"), r.get("response"), r.get("answer")], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def cache_key(backbone_cfg, canvas_cfg: CanvasConfig, task: str, data_hash: str, need_teacher: bool) -> str:
    """Hash of (backbone names/files/layers/dtype, canvas config, task, data content hash, teacher on/off)."""
    from elfreg.configtools import to_dict

    backbones = to_dict(backbone_cfg)
    if backbones.get("standardize_teacher"):  # the cache holds raw teacher states either way: one cache for both
        backbones["standardize_teacher"] = False
    payload = dict(version=CACHE_VERSION, backbones=backbones, canvas=to_dict(canvas_cfg), task=task,
                   data=data_hash, teacher=need_teacher)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


class CachedFeatures:
    """A finite data set of raw features (fp16 on disk, fp32 in memory), indexable into TrainBatches."""

    def __init__(self, tensors: dict[str, Tensor], folder: Path | None = None,
                 overflow: CanvasStats | None = None) -> None:
        self.tensors = tensors
        self.folder = folder
        self.overflow = overflow if overflow is not None else CanvasStats(kept=len(self))  # rows skipped at build

    def __len__(self) -> int:
        return int(self.tensors["tokens"].shape[0])

    def batch(self, indices: list[int], device: str | torch.device = "cpu") -> TrainBatch:
        """Raw TrainBatch of the given rows."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        get = lambda k: self.tensors[k][idx].to(device) if k in self.tensors else None  # noqa: E731
        f32 = lambda t: t.float() if t is not None else None  # noqa: E731
        return TrainBatch(x=f32(get("x")), tokens=get("tokens"), prompt_mask=get("prompt_mask"),
                          content_mask=get("content_mask"), teacher=f32(get("teacher")), reg=f32(get("reg")),
                          teacher_at_source=f32(get("teacher_at_source")))

    @classmethod
    def build_or_load(cls, rows: list[dict], backbones, canvas_cfg: CanvasConfig, cache_dir: str | Path,
                      task: str = "math", need_teacher: bool = True, batch_size: int = 16,
                      shard_rows: int = 4096, progress: bool = True) -> "CachedFeatures":
        """Features of ``rows`` ({"prompt", "response", "answer"?}), extracted once into cache_dir/<key>/ and reused.

        Over-long rows follow canvas_cfg.overflow (skipped rows are left out). Shards are safetensors (fp16 features),
        the manifest is written last, so a half-written cache is rebuilt.
        """
        from safetensors.torch import load_file, save_file

        from elfreg.data import build_canvas
        from elfreg.tasks.formats import apply_template

        rows = list(rows)
        folder = Path(cache_dir) / cache_key(backbones.cfg, canvas_cfg, task, rows_hash(rows), need_teacher)
        manifest = folder / "manifest.json"
        if manifest.is_file():
            meta = json.loads(manifest.read_text())
            parts = [load_file(str(folder / name)) for name in meta["shards"]]
            overflow = CanvasStats(*meta["overflow"]) if "overflow" in meta else None
            return cls({k: torch.cat([p[k] for p in parts]) for k in parts[0]}, folder, overflow)
        canvases = []
        overflow = CanvasStats()
        for r in rows:
            prompt, response = apply_template(r, task)
            c = build_canvas(prompt, response, backbones.tokenizer, canvas_cfg, overflow)
            if c is not None:
                canvases.append(c)
        if not canvases:
            raise ValueError("FeatureCache: no row fits the canvas")
        chunks: dict[str, list[Tensor]] = {}
        from tqdm.auto import tqdm

        for i in tqdm(range(0, len(canvases), batch_size), desc="features", unit="batch", disable=not progress):
            raw = raw_batch(backbones, collate(canvases[i:i + batch_size]), need_teacher)
            for k, v in raw.__dict__.items():
                if v is not None:
                    v = v.detach().cpu()
                    chunks.setdefault(k, []).append(v.half() if v.is_floating_point() else v)
        tensors = {k: torch.cat(v).contiguous() for k, v in chunks.items()}
        folder.mkdir(parents=True, exist_ok=True)
        shards = []
        for j, s in enumerate(range(0, len(canvases), shard_rows)):
            name = f"shard-{j:05d}.safetensors"
            part = {k: v[s:s + shard_rows].contiguous() for k, v in tensors.items()}
            atomic_write(folder / name, lambda p, part=part: save_file(part, str(p)))
            shards.append(name)
        atomic_write_text(manifest, json.dumps({"version": CACHE_VERSION, "rows": len(canvases), "shards": shards,
                                                "overflow": [overflow.kept, overflow.prompt_too_long,
                                                             overflow.canvas_too_long]}, indent=2))
        return cls({k: v for k, v in tensors.items()}, folder, overflow)

    def token_counts(self, eos_id: int) -> Tensor:
        """(rows,) prompt + response + EOS tokens of every row: the paper's count, no EOS padding (spec §7)."""
        t = self.tensors
        return paper_token_mask(t["tokens"], t["prompt_mask"], eos_id).sum(1)
