"""Sampling from prompts encoded once beforehand: the held-out rows a model is scored on again and again (the demo's
test rows and accuracy curve, a training run's validation rows) are encoded once, then every sampler run reads
their features."""

from __future__ import annotations

import torch

from elfreg.precision import Precision
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.pipeline import EncodedPrompts, GenerationPipeline

FP32 = Precision("fp32", "fp32")  # scored in fp32, whatever the training precision


class EncodedRows:
    """Prompt features encoded beforehand (``ElfModel.encode_prompts``), as the generation pipeline's prompt encoder:
    a batch's "prompts" are the labels ``str(i)`` of rows ``i``, which it takes from them, so every run samples from
    the same features and nothing is encoded again. No prompt to check either: the caller encoded only prompts that
    fit the canvas."""

    def __init__(self, x: torch.Tensor, mask: torch.Tensor) -> None:
        self.x, self.mask = x, mask

    def labels(self) -> list[str]:
        """The prompt of each row, in order: what the pipeline generates from."""
        return [str(i) for i in range(self.x.shape[0])]

    def encode_prompts(self, labels: list[str]) -> EncodedPrompts:
        """The rows the labels name, in their order (no prompt token ids: the pipeline reads none)."""
        rows = torch.tensor([int(label) for label in labels], dtype=torch.long)
        return EncodedPrompts(self.x.index_select(0, rows), self.mask.index_select(0, rows), [[] for _ in labels])


def sample_texts_nfe(model, x: torch.Tensor, mask: torch.Tensor, scfg: SamplerConfig,
                     batch_size: int) -> tuple[list[str], list[float], list[int], list[bool | None]]:
    """The response text and exit time of every encoded prompt (row i uses noise key (i, 0)), the NFE each row spent and whether its answer settled (adaptive exit, else None); the
    adaptive exit rule watches the task's final answer. Through the generation pipeline, in fp32 without the batch
    invariance scheme (the numbers are those of its batches). ``model``: an ElfModel with its backbones."""
    encoded = EncodedRows(x, mask)
    pipe = GenerationPipeline(model.student, encoded, model.tokenizer, scfg, batch_size=min(batch_size, x.shape[0]),
                              batch_invariant=False, precision=FP32)
    records = list(pipe.generate(encoded.labels(), samples=1))
    spent = [r["nfe_spent"] for r in records]
    if scfg.sampler != "adaptive" and spent != [scfg.nfe] * len(records):
        raise RuntimeError(f"sampler spent {spent} NFE, expected {scfg.nfe}")
    return ([r["response"] for r in records], [r["exit_time"] for r in records], spent,
            [r.get("settled") for r in records])
