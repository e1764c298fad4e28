"""Deterministic, resumable, shuffled example stream over several sources (spec §7).

Order: per epoch the sources are visited in a seeded random order, rows flow through a seeded
shuffle buffer, and rank r of W keeps every W-th example of that global order. The full position
(epoch, source, raw row, buffer contents, RNG state) is in state_dict(), so a restored stream
continues with exactly the examples the original would have produced.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from typing import Any, Iterator, Sequence

from elfreg.data.readers import ReadStats, iter_source
from elfreg.data.sources import SourceSpec

_STATE_VERSION = 1
HOLDOUT_SIDES = ("train", "validation")


def held_out(example: dict[str, Any], fraction: float) -> bool:
    """Whether a row falls in a held-out ``fraction`` of the data: by a hash of its prompt and response, so the split
    is the same whatever the order, seed, shuffle buffer or rank, and a row and its duplicates fall on one side."""
    key = json.dumps([example.get("prompt"), example.get("response")], ensure_ascii=False).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") < fraction * 2 ** 64


class ExampleStream:
    """Iterator of example dicts {"prompt", "response", "answer", "id", "source"}; see module doc."""

    def __init__(self, sources: Sequence[SourceSpec], seed: int = 0, shuffle_buffer: int = 10_000,
                 epochs: int | None = 1, rank: int = 0, world_size: int = 1,
                 holdout: tuple[float, str] | None = None) -> None:
        """``holdout`` (fraction, side): keep only the rows outside (``"train"``) or inside (``"validation"``) the
        held-out fraction (``held_out``)."""
        if not sources:
            raise ValueError("ExampleStream: `sources` is empty")
        if shuffle_buffer < 1:
            raise ValueError(f"ExampleStream.shuffle_buffer must be >= 1, got {shuffle_buffer}")
        if epochs is not None and epochs < 1:
            raise ValueError(f"ExampleStream.epochs must be >= 1 or None, got {epochs}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"ExampleStream: need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"ExampleStream: source names must be unique, got {names}")
        if holdout is not None and (not 0 < holdout[0] < 1 or holdout[1] not in HOLDOUT_SIDES):
            raise ValueError(f"ExampleStream.holdout must be (fraction in (0, 1), one of {HOLDOUT_SIDES}), "
                             f"got {holdout}")
        self.holdout = holdout
        self.sources = list(sources)
        self.seed, self.shuffle_buffer, self.epochs = seed, shuffle_buffer, epochs
        self.rank, self.world_size = rank, world_size
        self.stats = {s.name: ReadStats() for s in self.sources}
        self._start_epoch(0)

    # -- position -------------------------------------------------------------------------------
    def _start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._rng = random.Random(self.seed * 1_000_003 + epoch)
        self._order = list(range(len(self.sources)))
        self._rng.shuffle(self._order)
        self._source_pos = 0  # index into self._order
        self._raw_pos = 0  # next raw row of the current source
        self._buffer: list[dict[str, Any]] = []
        self._emitted = 0  # examples of the global order produced this epoch (all ranks)
        self._reader: Iterator[tuple[int, dict[str, Any] | None]] | None = None

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python snapshot of the position (buffered examples included; size ~ shuffle_buffer rows)."""
        return {
            "version": _STATE_VERSION, "seed": self.seed, "rank": self.rank, "world_size": self.world_size,
            "sources": [s.name for s in self.sources], "epoch": self.epoch, "order": list(self._order),
            "source_pos": self._source_pos, "raw_pos": self._raw_pos, "buffer": copy.deepcopy(self._buffer),
            "emitted": self._emitted, "rng": self._rng.getstate(),
            "stats": {k: v.as_dict() for k, v in self.stats.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a position saved by state_dict(); the stream's sources/seed/rank must match."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"ExampleStream state: unsupported version {state.get('version')!r}")
        for key, mine in (("seed", self.seed), ("rank", self.rank), ("world_size", self.world_size),
                          ("sources", [s.name for s in self.sources])):
            if state[key] != mine:
                raise ValueError(f"ExampleStream state: {key} is {state[key]!r}, this stream has {mine!r}")
        self.epoch, self._order = state["epoch"], list(state["order"])
        self._source_pos, self._raw_pos = state["source_pos"], state["raw_pos"]
        self._buffer, self._emitted = copy.deepcopy(state["buffer"]), state["emitted"]
        self._rng = random.Random()
        rng = state["rng"]
        self._rng.setstate((rng[0], tuple(rng[1]), rng[2]))
        for name, d in state["stats"].items():
            self.stats[name] = ReadStats(**d)
        self._reader = None

    # -- iteration ------------------------------------------------------------------------------
    def _pull(self) -> bool:
        """Append the next kept example to the buffer; False when this epoch's sources are exhausted."""
        while self._source_pos < len(self._order):
            spec = self.sources[self._order[self._source_pos]]
            if self._reader is None:
                self._reader = iter_source(spec, self._raw_pos, self.stats[spec.name])
            for index, example in self._reader:
                self._raw_pos = index + 1
                if example is not None and self._keeps(example):
                    self._buffer.append(example)
                    return True
            self._source_pos, self._raw_pos, self._reader = self._source_pos + 1, 0, None
        return False

    def _keeps(self, example: dict[str, Any]) -> bool:
        if self.holdout is None:
            return True
        return held_out(example, self.holdout[0]) == (self.holdout[1] == "validation")

    def __iter__(self) -> ExampleStream:
        return self

    def __next__(self) -> dict[str, Any]:
        while True:
            while len(self._buffer) < self.shuffle_buffer and self._pull():
                pass
            if not self._buffer:
                if self._emitted == 0:
                    raise ValueError("ExampleStream: the sources produced no examples")
                if self.epochs is not None and self.epoch + 1 >= self.epochs:
                    raise StopIteration
                self._start_epoch(self.epoch + 1)
                continue
            i = self._rng.randrange(len(self._buffer))
            self._buffer[i], self._buffer[-1] = self._buffer[-1], self._buffer[i]
            example = self._buffer.pop()
            k, self._emitted = self._emitted, self._emitted + 1
            if k % self.world_size == self.rank:
                return example
