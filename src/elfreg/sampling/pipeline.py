"""Generation pipeline (spec §5): prompts -> encoder -> sampler -> decoded responses, batched, several samples each."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence

import torch

from elfreg.config import ModelConfig
from elfreg.precision import Precision, resolve, student_workload
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.decode import detokenize, response_token_ids, text_answers
from elfreg.sampling.network import NFECounter, StudentLike
from elfreg.sampling.samplers import sample
from elfreg.sampling.watch import Watch, step_hook
from elfreg.tasks.answers import extractor

Key = tuple[int, int]  # (prompt_index, sample_index)


@dataclass
class EncodedPrompts:
    """Frozen-encoder output: x_prompt (B, L, d) standardised, prompt_mask (B, L) bool, prompt token ids."""

    x_prompt: torch.Tensor
    prompt_mask: torch.Tensor
    token_ids: list[list[int]]

    @classmethod
    def of(cls, value: Any) -> "EncodedPrompts":
        """Accept an EncodedPrompts or an (x_prompt, prompt_mask, token_ids) tuple."""
        if isinstance(value, cls):
            return value
        x, mask, ids = value
        return cls(x_prompt=x, prompt_mask=mask.bool(), token_ids=[list(map(int, r)) for r in ids])


class PromptEncoder(Protocol):
    """The frozen prompt encoder: tokenises (cheap) and encodes (the expensive, non-NFE part)."""

    def prompt_token_ids(self, prompts: list[str]) -> list[list[int]]: ...

    def encode_prompts(self, prompts: list[str]) -> Any: ...


def check_sampling_fits(network: StudentLike, cfg: SamplerConfig, batch_size: int, device: torch.device,
                        scheme: str | None = None) -> None:
    """DoesNotFit (a ValueError naming the settings) when sampling ``batch_size`` rows cannot fit in memory: the
    master grids, and for an ElfStudent its states and forward pass in the batch-invariance ``scheme`` (None: the
    device's default; elfreg.resources; the student is loaded)."""
    from elfreg.config import ModelConfig
    from elfreg.resources import check_fits, inference_need, sampler_grid_need
    from elfreg.sampling.invariance import pass_rows, scheme_for

    needs = [sampler_grid_need(cfg, batch_size)]
    config = getattr(network, "config", None)
    if isinstance(config, ModelConfig):
        scheme = scheme_for(True, device) if scheme is None else scheme
        needs.append(inference_need(config, batch_size, str(device), pass_rows=pass_rows(scheme, batch_size)))
    check_fits(*needs)


def prompt_limit(canvas_len: int, max_prompt_len: int | None) -> int:
    """The most prompt tokens a canvas takes: ``max_prompt_len``, and at least one response position."""
    return canvas_len - 1 if max_prompt_len is None else min(max_prompt_len, canvas_len - 1)


def validate_prompts(prompts: Sequence[str], encoder: PromptEncoder, canvas_len: int, max_prompt_len: int | None,
                     source: str = "prompts", line_numbers: Sequence[int] | None = None) -> None:
    """Raise ValueError (naming source and line) for no prompts, an empty prompt, or a prompt too long for the canvas."""
    if len(prompts) == 0:
        raise ValueError(f"{source}: no prompts to generate from")
    lines = list(line_numbers) if line_numbers is not None else list(range(1, len(prompts) + 1))
    limit = prompt_limit(canvas_len, max_prompt_len)
    for i, p in enumerate(prompts):
        if not isinstance(p, str) or not p.strip():
            raise ValueError(f"{source}:{lines[i]}: empty prompt")
    for i, ids in enumerate(encoder.prompt_token_ids(list(prompts))):
        if len(ids) > limit:
            raise ValueError(f"{source}:{lines[i]}: prompt has {len(ids)} tokens; the canvas of {canvas_len} allows at "
                             f"most {limit} prompt tokens (max_prompt_len={max_prompt_len}, and at least one "
                             f"response position)")


class GenerationPipeline:
    """Model + frozen encoder + tokenizer + sampler settings -> response records (spec §5)."""

    def __init__(self, network: StudentLike, encoder: PromptEncoder, tokenizer: Any, cfg: SamplerConfig,
                 batch_size: int = 16, max_prompt_len: int | None = None,
                 record_extra: dict[str, Any] | None = None, batch_invariant: bool = True,
                 precision: str | Precision = "auto") -> None:
        """batch_invariant: put a network that has the switches (ElfStudent) in its device's invariance scheme
        (elfreg.sampling.invariance), so a sample does not depend on the batch size or the number of processes
        (docs/sampling.md, "Batch invariance"); False batches rows into one plain pass (faster; outputs then
        depend on the batch).
        precision: the network calls' arithmetic, auto / bf16 / fp32 (elfreg.precision: auto measures bf16 against
        fp32 at the calls' shapes on a CPU), or a resolved Precision; recorded in every record."""
        from elfreg.sampling.invariance import apply_scheme, pass_rows, scheme_for

        if batch_size < 1:
            raise ValueError(f"batch_size: need >= 1, got {batch_size}")
        if tokenizer.eos_token_id is None:
            raise ValueError("tokenizer has no eos_token_id; the first EOS ends an answer")
        self.device = next((p.device for p in getattr(network, "parameters", lambda: iter(()))()),
                           torch.device("cpu"))
        self.invariance = scheme_for(batch_invariant, self.device)
        apply_scheme(network, self.invariance)
        self.counter = NFECounter(network)
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.batch_size = batch_size
        self.max_prompt_len = max_prompt_len
        self.record_extra = dict(record_extra or {})  # recorded beside the sampler settings (e.g. the prompt template)
        self.canvas_len = int(network.config.max_len)
        check_sampling_fits(network, cfg, batch_size, self.device, self.invariance)
        if not isinstance(precision, Precision):
            config = getattr(network, "config", None)
            # rows per GEMM: one where the scheme runs them row by row (``rows``, ``layers``)
            rows = 1 if self.invariance in ("rows", "layers") else pass_rows(self.invariance, batch_size)
            workload = student_workload(config, rows, backward=False) if isinstance(config, ModelConfig) else None
            precision = resolve(precision, self.device, workload, "--precision")
        self.precision = precision
        self.record_extra.update(precision.record())

    def validate(self, prompts: Sequence[str], source: str = "prompts",
                 line_numbers: Sequence[int] | None = None) -> None:
        """Check every prompt before any generation work (see validate_prompts)."""
        validate_prompts(prompts, self.encoder, self.canvas_len, self.max_prompt_len, source, line_numbers)

    def jobs(self, prompt_indices: Sequence[int], samples: int, done: set[Key] | None = None) -> list[Key]:
        """All (prompt_index, sample_index) keys still to generate, in order."""
        if samples < 1:
            raise ValueError(f"samples: need >= 1 sample per prompt, got {samples}")
        done = done or set()
        return [(p, s) for p in prompt_indices for s in range(samples) if (p, s) not in done]

    def run_batch(self, prompts: Sequence[str], keys: Sequence[Key], watch: Watch | None = None
                  ) -> list[dict[str, Any]]:
        """Generate one batch; prompts is the full prompt list indexed by the keys' prompt_index."""
        return self.run_rows([prompts[p] for p, _ in keys], keys, watch=watch)

    def run_rows(self, texts: Sequence[str], keys: Sequence[Key],
                 finish: Callable[[int, list[int]], str] | None = None,
                 watch: Watch | Sequence[Watch | None] | None = None) -> list[dict[str, Any]]:
        """Generate one batch whose row i is the prompt texts[i] under the noise key keys[i].

        finish(i, response token ids) -> the text the task reads from row i (e.g. lm-eval's token cap and stop
        strings): the adaptive exit rule extracts its answer from that (default: the whole response text).
        watch: who sees the rows' texts while they are made (one Watch for all rows, or one or None per row;
        ``elfreg.sampling.watch``); the records are the same with and without it, ``view_calls`` apart.
        """
        if len(texts) != len(keys):
            raise ValueError(f"run_rows: {len(texts)} prompts for {len(keys)} keys")
        unique = list(dict.fromkeys(texts))   # each distinct prompt is encoded once, in order of first use
        t0 = time.perf_counter()
        enc = EncodedPrompts.of(self.encoder.encode_prompts(unique))
        pos = {text: i for i, text in enumerate(unique)}
        rows = torch.tensor([pos[text] for text in texts], dtype=torch.long)
        x_prompt = enc.x_prompt.index_select(0, rows.to(enc.x_prompt.device)).to(self.device)
        prompt_mask = enc.prompt_mask.index_select(0, rows.to(enc.prompt_mask.device)).to(self.device)
        if x_prompt.shape[1] != self.canvas_len:
            raise ValueError(f"encoder returned a canvas of {x_prompt.shape[1]}, the network expects {self.canvas_len}")
        t1 = time.perf_counter()
        answer_of = None
        if self.cfg.sampler == "adaptive":
            answer_of = text_answers(self.tokenizer, prompt_mask, extractor(self.cfg.extract), finish)
        with self.precision.autocast(self.device.type):
            out = sample(self.counter, x_prompt, prompt_mask, self.cfg, keys, answer_of,
                         step_hook(watch, keys, prompt_mask, self.tokenizer))
        answers = response_token_ids(out.token_ids, prompt_mask.cpu(), int(self.tokenizer.eos_token_id))
        texts = detokenize(self.tokenizer, answers)
        t2 = time.perf_counter()
        settings = self.cfg.to_dict()
        count = out.count
        records = []
        for i, (p, s) in enumerate(keys):
            rec = {
                "prompt_index": p, "sample_index": s, "response": texts[i], "response_token_ids": answers[i],
                **settings, **self.record_extra, "batch_invariance": self.invariance,
                "exit_time": float(out.exit_time[i]),
                # this row's network calls (spec §5: NFE = denoiser + decoder calls; adaptive: check decodes too)
                "nfe_spent": count.row_nfe[i], "denoiser_calls": count.row_denoiser[i],
                "decoder_calls": count.row_decoder[i],
                # wall seconds of the whole batch this sample was generated in (shared by batch_size rows)
                "encoder_seconds": t1 - t0, "sampler_seconds": t2 - t1, "batch_size": len(keys),
            }
            if watch is not None:   # decoder calls made only to show the path: not part of nfe_spent
                rec["view_calls"] = count.row_view[i]
            if out.settled is not None:
                rec["settled"] = out.settled[i]   # adaptive: the answer settled (False: stopped at the budget)
            records.append(rec)
        return records

    def generate(self, prompts: Sequence[str], samples: int, prompt_indices: Sequence[int] | None = None,
                 done: set[Key] | None = None, on_batch: Callable[[list[dict]], None] | None = None,
                 watch: Watch | None = None) -> Iterator[dict[str, Any]]:
        """Yield one record per missing (prompt_index, sample_index), batch by batch; on_batch sees each batch,
        ``watch`` each batch's path (``run_rows``)."""
        indices = range(len(prompts)) if prompt_indices is None else prompt_indices
        todo = self.jobs(indices, samples, done)
        for start in range(0, len(todo), self.batch_size):
            records = (self.run_batch(prompts, todo[start:start + self.batch_size]) if watch is None else
                       self.run_batch(prompts, todo[start:start + self.batch_size], watch))
            if on_batch is not None:
                on_batch(records)
            yield from records
