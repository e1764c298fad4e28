"""Final decode (spec §5): decoder mode at t = 1 with zero self-conditioning, argmax, cut at the first EOS; the
adaptive exit rule's answers read from the decoded responses (spec §11)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

if TYPE_CHECKING:
    from elfreg.sampling.exit import AnswerFn
    from elfreg.tasks.answers import Extractor


def decode_token_ids(network: Any, z: torch.Tensor, reg: torch.Tensor | None, w: torch.Tensor) -> torch.Tensor:
    """(B, L) tokenizer ids: argmax of the decoder-mode logits on state z (B, L, d) at t = 1, q = 0 (spec §5).

    z must already hold the clean prompt features at prompt positions; reg is the REG state (B, d_r) to
    decode or None (no REG token / REG dropped).
    """
    b = z.shape[0]
    q = torch.zeros_like(z)  # zero self-conditioning everywhere, prompt slots included (reference §4)
    reg_q = None if reg is None else torch.zeros_like(reg)
    t = torch.ones(b, dtype=z.dtype, device=z.device)
    out = network(z, q, t, w, reg=reg, reg_q=reg_q, decoder=True)
    if out.logits is None:
        raise RuntimeError("network returned no logits in decoder mode")
    idx = out.logits.argmax(dim=-1)
    return network.head_to_token_ids(idx)


def response_token_ids(token_ids: torch.Tensor, prompt_mask: torch.Tensor, eos_id: int) -> list[list[int]]:
    """Per row: the token ids at response positions (after the prompt) up to, not including, the first EOS."""
    if token_ids.shape != prompt_mask.shape:
        raise ValueError(f"token_ids {tuple(token_ids.shape)} and prompt_mask {tuple(prompt_mask.shape)} differ")
    rows: list[list[int]] = []
    for ids, mask in zip(token_ids.tolist(), prompt_mask.tolist()):
        answer: list[int] = []
        for tok, is_prompt in zip(ids, mask):
            if is_prompt:
                continue
            if tok == eos_id:
                break
            answer.append(tok)
        rows.append(answer)
    return rows


def detokenize(tokenizer: Any, rows: Sequence[Sequence[int]]) -> list[str]:
    """Text of each row of token ids, special tokens skipped."""
    return [tokenizer.decode(list(r), skip_special_tokens=True) for r in rows]


def text_answers(tokenizer: Any, prompt_mask: torch.Tensor, extract: Extractor,
                 finish: Callable[[int, list[int]], str] | None = None) -> AnswerFn:
    """The adaptive rule's answer function on decoded token ids: each row's response up to its first EOS, as text
    (special tokens skipped) or as ``finish(batch row, response ids)`` makes it (e.g. lm-eval's token cap and stop
    strings), then ``extract``. prompt_mask (B, L) is the batch's, indexed by the rows the rule asks about.
    """
    mask = prompt_mask.cpu()
    eos = int(tokenizer.eos_token_id)

    def answer_of(ids, rows):
        responses = response_token_ids(ids.cpu(), mask[list(rows)], eos)
        if finish is None:
            texts = detokenize(tokenizer, responses)
        else:
            texts = [finish(r, resp) for r, resp in zip(rows, responses)]
        return [extract(t) for t in texts]
    return answer_of
