"""The token ids a vocabulary head restricted to a data set keeps (``train.head_vocab: responses``, the demo).

A student that only ever writes the answers of one task needs no 49k-way softmax: restricting the head to the
tokens its training responses use (and EOS, which pads every canvas) makes the head a few hundred columns wide, so
a small student learns the task in far fewer steps, and decoding can never emit a token outside that set. The
prompt is read by the frozen encoder, never through the head, so a prompt may hold any token.
"""

from __future__ import annotations

from collections.abc import Iterable

from elfreg.tasks.formats import apply_template

PARTS = ("prompt", "response")


def head_token_ids(tokenizer, rows: Iterable[dict], task: str = "math",
                   parts: tuple[str, ...] = ("response",)) -> list[int]:
    """Sorted token ids of the rows' templated ``parts`` (tokenised as the canvas does: apart, no special tokens),
    plus EOS."""
    if not parts or any(p not in PARTS for p in parts):
        raise ValueError(f"head_token_ids: parts must be a non-empty subset of {PARTS}, got {parts}")
    ids = {tokenizer.eos_token_id}
    for r in rows:
        prompt, response = apply_template(r, task)
        for text in (prompt if "prompt" in parts else None, response if "response" in parts else None):
            if text is not None:
                ids.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    return sorted(ids)


def span_token_ids(tokenizer, text: str, start: int, end: int) -> list[int] | None:
    """The ids of ``text``'s tokens (tokenised as the canvas does: apart, no special tokens) that overlap its
    characters [start, end); None for a tokenizer that gives no character offsets (a slow one)."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return [i for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True) if a < end and b > start]
