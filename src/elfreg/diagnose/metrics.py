"""Token-level trajectory metrics (spec §9): responses, stable tokens, agreement, paired flips."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class Response:
    """A decoded response: its tokens up to the first EOS, whether an EOS was produced, and its canvas span.

    span: number of response positions the response occupies, its first EOS included (all response
    positions when there is no EOS).
    """

    tokens: tuple[int, ...]
    has_eos: bool
    span: int

    @property
    def length(self) -> int:
        return len(self.tokens)


def response_of(ids: Sequence[int], prompt_mask: Sequence[bool], eos_id: int) -> Response:
    """The response of one decoded canvas row: ids (L,), prompt_mask (L,) (spec §5 final decode)."""
    resp = [int(t) for t, is_prompt in zip(ids, prompt_mask) if not is_prompt]
    for k, tok in enumerate(resp):
        if tok == eos_id:
            return Response(tuple(resp[:k]), True, k + 1)
    return Response(tuple(resp), False, len(resp))


def response_agrees(a: Response, b: Response) -> bool:
    """Full-response agreement (spec §9): same tokens, same EOS state and same length."""
    return a.tokens == b.tokens and a.has_eos == b.has_eos and a.length == b.length


def answer_agrees(a: str | None, b: str | None) -> bool:
    """Answer agreement: both responses yield an answer and the answers are equal (None never agrees)."""
    return a is not None and b is not None and a == b


def stable_fractions(readouts: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """(R,) fraction of positions whose token equals the end token at read-out k and at every later one (spec §9).

    readouts (R, P) token ids at R read-outs in trajectory order, end (P,) the end tokens on the same P
    positions (the caller picks them: the end response's span). With P = 0 every fraction is 1.
    """
    if readouts.dim() != 2 or end.shape != readouts.shape[1:]:
        raise ValueError(f"readouts must be (R, P) and end (P,), got {tuple(readouts.shape)} and {tuple(end.shape)}")
    if readouts.shape[1] == 0:
        return torch.ones(readouts.shape[0], dtype=torch.float64)
    equal = (readouts == end.unsqueeze(0)).to(torch.int64)
    # stable at k = equal at k and at every k' > k: a reverse cumulative AND over the read-outs
    stable = equal.flip(0).cumprod(0).flip(0)
    return stable.double().mean(1)


@dataclass(frozen=True)
class Flips:
    """Paired outcome changes from an early read-out to the end (spec §9, Table 11)."""

    up: int      # wrong early, right at the end
    down: int    # right early, wrong at the end
    n: int       # paired samples

    @property
    def net(self) -> float | None:
        """Net accuracy change from continuing, (up - down) / n, from the counts (not rounded accuracies)."""
        return (self.up - self.down) / self.n if self.n else None

    def to_dict(self) -> dict:
        return {**asdict(self), "net": self.net}


def paired_flips(early_correct: Sequence[bool], end_correct: Sequence[bool]) -> Flips:
    """Count wrong->right and right->wrong changes between paired early and end outcomes."""
    if len(early_correct) != len(end_correct):
        raise ValueError(f"paired outcomes differ in length: {len(early_correct)} early, {len(end_correct)} end")
    up = sum(1 for e, f in zip(early_correct, end_correct) if not e and f)
    down = sum(1 for e, f in zip(early_correct, end_correct) if e and not f)
    return Flips(up=up, down=down, n=len(early_correct))
