"""Watching a path as it is made: every k-th step, each sample's text decoded from its current clean prediction.

A :class:`Watch` asks for a view of its rows at every ``every``-th denoiser call (and at the path's last planned
call); the one sampler loop (``elfreg.sampling.trajectory``) hands each step to :func:`step_hook`, which decodes the
clean prediction d_j of the rows due (one decoder call per step for all of them, counted apart from the NFE: the
answers are bit for bit the ones made without watching) and gives each watch its :class:`StepView` list. A view
holds the response up to the first EOS, its tokens, and per token whether it is the token the row's previous view
held at that position (stable). ``ElfModel.generate(on_step=...)``, ``elfreg generate --show-steps`` and the
server's trajectory stream are its users.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch

from elfreg.bounds import Range
from elfreg.sampling.decode import response_token_ids
from elfreg.sampling.trajectory import Key, PathStep, StepHook

EVERY = Range(1, 1_000_000, integer=True)   # a view every k denoiser calls


@dataclass
class StepView:
    """One sample's text at one step of its path (``step`` of ``steps`` denoiser calls made, at time ``t``)."""

    prompt_index: int
    sample_index: int
    step: int                 # denoiser calls made so far (j + 1)
    steps: int                # denoiser calls the path plans (the adaptive sampler's rows may leave before)
    t: float                  # the time of that call
    text: str                 # the response decoded from the clean prediction, up to its first EOS
    token_ids: list[int]
    tokens: list[str]         # each token's share of the text (token_pieces)
    stable: list[bool]        # each token is the one this sample's previous view showed at its place

    def to_dict(self) -> dict[str, Any]:
        """The view as JSON-ready fields."""
        return asdict(self)


@dataclass(eq=False)   # told apart by identity: rows of one request share one Watch
class Watch:
    """A watcher of some rows: ``callback(views)`` at every ``every``-th denoiser call and at the path's last one."""

    callback: Callable[[list[StepView]], None]
    every: int = 1

    def __post_init__(self) -> None:
        EVERY.check(self.every, "every")

    def due(self, step: int, steps: int) -> bool:
        """Whether the view after ``step`` of ``steps`` denoiser calls is wanted."""
        return step % self.every == 0 or step == steps


def token_pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token's share of the decoded text: what decoding one more token adds (so the pieces join to the text
    wherever decoding a prefix gives a prefix of the text; otherwise the token decoded alone)."""
    pieces, before = [], ""
    for k in range(len(ids)):
        now = tokenizer.decode(list(ids[:k + 1]), skip_special_tokens=True)
        pieces.append(now[len(before):] if now.startswith(before) else
                      tokenizer.decode([ids[k]], skip_special_tokens=True))
        before = now
    return pieces


def step_hook(watches: Watch | Sequence[Watch | None] | None, keys: Sequence[Key], prompt_mask: torch.Tensor,
              tokenizer: Any) -> StepHook | None:
    """The sampler loop's on_step for a batch: ``watches`` one Watch for every row or one (or None) per row; keys
    (prompt_index, sample_index) per row; prompt_mask (B, L) the batch's. None when nobody watches."""
    per_row = [watches] * len(keys) if watches is None or isinstance(watches, Watch) else list(watches)
    if len(per_row) != len(keys):
        raise ValueError(f"watches: one per row: {len(per_row)} for {len(keys)} rows")
    if not any(per_row):
        return None
    mask = prompt_mask.cpu()
    eos = int(tokenizer.eos_token_id)
    last: dict[int, list[int]] = {}   # batch row -> its response at its previous view

    def hook(step: PathStep, view: Callable[[Sequence[int]], torch.Tensor]) -> None:
        n = step.j + 1
        local = [i for i, r in enumerate(step.rows) if per_row[r] is not None and per_row[r].due(n, step.steps)]
        if not local:
            return
        ids = view(local).cpu()
        rows = [step.rows[i] for i in local]
        responses = response_token_ids(ids, mask[rows], eos)
        out: dict[Watch, list[StepView]] = {}
        for i, r, resp in zip(local, rows, responses):
            before = last.get(r, [])
            last[r] = resp
            stable = [k < len(before) and before[k] == tok for k, tok in enumerate(resp)]
            p_idx, s_idx = keys[r]
            out.setdefault(per_row[r], []).append(StepView(
                prompt_index=p_idx, sample_index=s_idx, step=n, steps=step.steps, t=float(step.t[i]),
                text=tokenizer.decode(resp, skip_special_tokens=True), token_ids=resp,
                tokens=token_pieces(tokenizer, resp), stable=stable))
        for watch, views in out.items():
            watch.callback(views)
    return hook
