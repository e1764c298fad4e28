"""The fixed-length canvas of spec §2: prompt tokens + response tokens + EOS + EOS padding.

Layout of one row of length L = canvas_len:

    [ prompt (P <= prompt_cap) | response content (C) | EOS | EOS ... EOS ]
      prompt_mask               response_mask (everything after the prompt, supervised)
                                content_mask (content positions that are not special tokens)

An over-long row is an error or a counted skip (CanvasConfig.overflow) — never truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

OVERFLOW_POLICIES = ("error", "skip")
# spec §2 gives math and code; choice (MMLU) is chosen: its auxiliary-train questions are mostly RACE reading
# passages (the paper's own figures give 1.259B / 30 epochs / 96,112 rows = 437 tokens per row), so the code cap
PROMPT_CAPS = {"math": 256, "code": 512, "choice": 512}


class CanvasOverflowError(ValueError):
    """A row does not fit the canvas (prompt over its cap, or prompt + response + EOS over canvas_len)."""


@dataclass(frozen=True)
class CanvasConfig:
    """Canvas geometry and policies (spec §2). Use CanvasConfig.for_task(task) for the prompt caps."""

    canvas_len: int = 1024
    prompt_cap: int = 256
    overflow: str = "error"
    add_special_tokens: bool = False  # SmolLM2/Qwen add no BOS; True lets the tokenizer add its own

    def __post_init__(self) -> None:
        if self.canvas_len < 2:
            raise ValueError(f"CanvasConfig.canvas_len must be >= 2, got {self.canvas_len}")
        if not 1 <= self.prompt_cap < self.canvas_len:
            raise ValueError(f"CanvasConfig.prompt_cap must be in [1, canvas_len), got {self.prompt_cap}")
        if self.overflow not in OVERFLOW_POLICIES:
            raise ValueError(f"CanvasConfig.overflow must be one of {OVERFLOW_POLICIES}, got {self.overflow!r}")

    @classmethod
    def for_task(cls, task: str, **overrides: Any) -> CanvasConfig:
        """Paper defaults: canvas 1024, prompt cap 256 (math) / 512 (code); choice (MMLU): 512, chosen."""
        if task not in PROMPT_CAPS:
            raise ValueError(f"unknown task {task!r}; expected one of {sorted(PROMPT_CAPS)}")
        return cls(**{"prompt_cap": PROMPT_CAPS[task], **overrides})


@dataclass
class CanvasStats:
    """Counts over built rows: kept, skipped for each overflow reason."""

    kept: int = 0
    prompt_too_long: int = 0
    canvas_too_long: int = 0

    @property
    def skipped(self) -> int:
        return self.prompt_too_long + self.canvas_too_long


@dataclass(frozen=True)
class Canvas:
    """One canvas row. input_ids (L,) int64; all index fields are positions in it."""

    input_ids: torch.Tensor
    prompt_len: int
    content_len: int  # response tokens before the appended EOS
    reg_source_index: int  # last non-special content token of prompt+response (spec §2, REG target)
    is_special: torch.Tensor = field(repr=False)  # (L,) bool: position holds a special token id

    @property
    def canvas_len(self) -> int:
        return int(self.input_ids.shape[0])

    def prompt_mask(self) -> torch.Tensor:
        """(L,) bool: prompt positions (clean, never noised, never a loss target)."""
        return torch.arange(self.canvas_len) < self.prompt_len

    def response_mask(self) -> torch.Tensor:
        """(L,) bool: every position after the prompt — content, EOS and EOS padding (generated, supervised)."""
        return ~self.prompt_mask()

    def content_mask(self) -> torch.Tensor:
        """(L,) bool: response content positions that are not special tokens."""
        pos = torch.arange(self.canvas_len)
        return (pos >= self.prompt_len) & (pos < self.prompt_len + self.content_len) & ~self.is_special


def special_ids(tokenizer: Any) -> set[int]:
    """Ids of the tokenizer's special tokens (EOS, BOS, pad, added control tokens)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for name in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            ids.add(value)
    return ids


def canvas_from_ids(prompt_ids: Sequence[int], response_ids: Sequence[int], eos_id: int,
                    cfg: CanvasConfig, special: set[int] | frozenset[int] = frozenset()) -> Canvas:
    """Lay out token ids on the canvas (spec §2). Raises CanvasOverflowError if they do not fit."""
    p, c, L = len(prompt_ids), len(response_ids), cfg.canvas_len
    if p == 0:
        raise ValueError("canvas: empty prompt")
    if p > cfg.prompt_cap:
        raise CanvasOverflowError(f"prompt has {p} tokens > prompt_cap {cfg.prompt_cap}")
    if p + c + 1 > L:
        raise CanvasOverflowError(f"prompt {p} + response {c} + EOS = {p + c + 1} tokens > canvas_len {L}")
    ids = torch.full((L,), eos_id, dtype=torch.long)
    ids[:p] = torch.as_tensor(list(prompt_ids), dtype=torch.long)
    if c:
        ids[p:p + c] = torch.as_tensor(list(response_ids), dtype=torch.long)
    special_all = set(special) | {eos_id}
    is_special = torch.tensor([int(t) in special_all for t in ids.tolist()], dtype=torch.bool)
    # REG source: last non-special token among prompt+response content (falls back into the prompt).
    candidates = (~is_special[:p + c]).nonzero()
    if candidates.numel() == 0:
        raise ValueError("canvas: prompt and response hold only special tokens; no REG source position")
    return Canvas(ids, p, c, int(candidates[-1]), is_special)


def build_canvas(prompt: str, response: str, tokenizer: Any, cfg: CanvasConfig,
                 stats: CanvasStats | None = None) -> Canvas | None:
    """Tokenise prompt and response separately and lay them out (spec §2).

    Returns None for an over-long row when cfg.overflow == 'skip' (counted in `stats`);
    raises CanvasOverflowError when cfg.overflow == 'error'.
    """
    eos_id = getattr(tokenizer, "eos_token_id", None)
    if eos_id is None:
        raise ValueError("canvas: the tokenizer has no eos_token_id")
    # Prompt and response are tokenised apart so the response starts on a token boundary at inference too.
    prompt_ids = tokenizer(prompt, add_special_tokens=cfg.add_special_tokens)["input_ids"]
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    try:
        canvas = canvas_from_ids(prompt_ids, response_ids, eos_id, cfg, special_ids(tokenizer))
    except CanvasOverflowError:
        if cfg.overflow == "error":
            raise
        if stats is not None:
            if len(prompt_ids) > cfg.prompt_cap:
                stats.prompt_too_long += 1
            else:
                stats.canvas_too_long += 1
        return None
    if stats is not None:
        stats.kept += 1
    return canvas


@dataclass(frozen=True)
class CanvasBatch:
    """Collated canvases. input_ids/masks (B, L); prompt_len, content_len, reg_source_index (B,)."""

    input_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_mask: torch.Tensor
    content_mask: torch.Tensor
    prompt_len: torch.Tensor
    content_len: torch.Tensor
    reg_source_index: torch.Tensor


def collate(canvases: Sequence[Canvas]) -> CanvasBatch:
    """Stack canvases of equal length into (B, L) tensors."""
    if not canvases:
        raise ValueError("collate: no canvases")
    lengths = {c.canvas_len for c in canvases}
    if len(lengths) != 1:
        raise ValueError(f"collate: canvases have different lengths {sorted(lengths)}")
    return CanvasBatch(
        input_ids=torch.stack([c.input_ids for c in canvases]),
        prompt_mask=torch.stack([c.prompt_mask() for c in canvases]),
        response_mask=torch.stack([c.response_mask() for c in canvases]),
        content_mask=torch.stack([c.content_mask() for c in canvases]),
        prompt_len=torch.tensor([c.prompt_len for c in canvases], dtype=torch.long),
        content_len=torch.tensor([c.content_len for c in canvases], dtype=torch.long),
        reg_source_index=torch.tensor([c.reg_source_index for c in canvases], dtype=torch.long),
    )


def iter_canvases(examples: Any, task: str, tokenizer: Any, cfg: CanvasConfig,
                  stats: CanvasStats | None = None, on_bad_row: str = "error") -> Any:
    """Examples → (example, Canvas) through the task template; over-long rows follow cfg.overflow,
    rows the template rejects (math without a final answer) follow `on_bad_row` ('error'|'skip')."""
    from elfreg.data.sources import BadRowError
    from elfreg.tasks.formats import apply_template

    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"iter_canvases.on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
    for example in examples:
        try:
            prompt, response = apply_template(example, task)
        except BadRowError:
            if on_bad_row == "error":
                raise
            continue
        canvas = build_canvas(prompt, response, tokenizer, cfg, stats)
        if canvas is not None:
            yield example, canvas
