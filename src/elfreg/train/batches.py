"""Per-rank micro-batches with the (epoch, global example index) of every example, resumable (spec §7).

Rank r of W receives the examples with global index ≡ r (mod W) of each epoch's global order, so the union of
the ranks' micro-batches of one step is the single-process batch of the same global size.
"""

from __future__ import annotations

from typing import Any

import torch

from elfreg.data import BadRowError, CanvasConfig, CanvasStats, ExampleStream, build_canvas, collate
from elfreg.tasks.formats import apply_template
from elfreg.objective import TrainBatch
from elfreg.train.features import CachedFeatures, raw_batch
from elfreg.train.rng import example_seed


class StreamBatches:
    """Online mode: examples from an ExampleStream -> canvases -> raw features by the frozen backbones."""

    def __init__(self, stream: ExampleStream, task: str, backbones, canvas_cfg: CanvasConfig, need_teacher: bool,
                 on_bad_row: str = "error") -> None:
        self.stream, self.task, self.backbones = stream, task, backbones
        self.canvas_cfg, self.need_teacher, self.on_bad_row = canvas_cfg, need_teacher, on_bad_row
        self.epoch, self.count = stream.epoch, 0  # examples this rank has taken in this epoch
        self.overflow = CanvasStats()  # this rank's rows kept / skipped for overflow so far (resumed with the data)

    def _next_canvas(self):
        while True:
            example = next(self.stream)  # StopIteration ends the data
            if self.stream.epoch != self.epoch:
                self.epoch, self.count = self.stream.epoch, 0
            key = (self.epoch, self.count * self.stream.world_size + self.stream.rank)
            self.count += 1
            try:
                prompt, response = apply_template(example, self.task)
            except BadRowError:
                if self.on_bad_row == "error":
                    raise
                continue
            canvas = build_canvas(prompt, response, self.backbones.tokenizer, self.canvas_cfg, self.overflow)
            if canvas is not None:
                return key, canvas

    def next_batch(self, size: int) -> tuple[TrainBatch, list[tuple[int, int]]] | None:
        """(raw features, keys) of the next ``size`` examples, or None when the data ran out."""
        items = []
        try:
            while len(items) < size:
                items.append(self._next_canvas())
        except StopIteration:
            return None
        keys = [k for k, _ in items]
        return raw_batch(self.backbones, collate([c for _, c in items]), self.need_teacher), keys

    def state_dict(self) -> dict[str, Any]:
        o = self.overflow
        return {"stream": self.stream.state_dict(), "epoch": self.epoch, "count": self.count,
                "overflow": [o.kept, o.prompt_too_long, o.canvas_too_long]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["stream"])
        self.epoch, self.count = state["epoch"], state["count"]
        self.overflow = CanvasStats(*state.get("overflow", (0, 0, 0)))


class CachedBatches:
    """Cached mode: a finite CachedFeatures set in a seeded per-epoch order (same order for every world size)."""

    def __init__(self, data: CachedFeatures, seed: int, rank: int = 0, world_size: int = 1,
                 epochs: int | None = None, device: str | torch.device = "cpu") -> None:
        self.data, self.seed, self.rank, self.world_size = data, seed, rank, world_size
        self.epochs, self.device = epochs, device
        self.epoch, self.pos = 0, rank  # next global position of this rank in the epoch's order
        self._order = self._perm(0)

    def _perm(self, epoch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(example_seed(self.seed, epoch, -1))
        return torch.randperm(len(self.data), generator=g)

    def next_batch(self, size: int) -> tuple[TrainBatch, list[tuple[int, int]]] | None:
        keys, rows = [], []
        while len(rows) < size:
            if self.pos >= len(self.data):
                if self.epochs is not None and self.epoch + 1 >= self.epochs:
                    return None
                self.epoch, self.pos = self.epoch + 1, self.rank
                self._order = self._perm(self.epoch)
            keys.append((self.epoch, self.pos))
            rows.append(int(self._order[self.pos]))
            self.pos += self.world_size
        return self.data.batch(rows, self.device), keys

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos, "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["rank"], state["world_size"]) != (self.rank, self.world_size):
            raise ValueError(f"data state is for rank {state['rank']}/{state['world_size']}, "
                             f"this run is rank {self.rank}/{self.world_size}")
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._perm(self.epoch)
