"""Loading a model folder for the commands that generate (generate, eval run, diagnose, serve):
:func:`load_elf_model` builds an :class:`elfreg.pretrained.ElfModel` and hands generation what it needs, a
:class:`LoadedModel`; tests hand the commands a loader of their own with the same signature.

``LoadedModel``, ``PROMPT_FORMATS`` and ``generation_device`` are generation's own (:mod:`elfreg.sampling.generate`,
below the model layer); they are importable from here too, the very same objects.
"""

from __future__ import annotations

import torch

from elfreg.sampling.generate import PROMPT_FORMATS, LoadedModel, generation_device

__all__ = ["PROMPT_FORMATS", "LoadedModel", "generation_device", "load_elf_model"]


def load_elf_model(model_dir: str, device: torch.device, prompt_format: str = "template") -> LoadedModel:
    """Load an ElfModel folder (src/elfreg/pretrained.py): student, frozen encoder, tokenizer, prompt cap, sigma,
    template."""
    from elfreg.pretrained import ElfModel

    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format: expected one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    model = ElfModel.from_pretrained(model_dir, device=device)
    raw = prompt_format == "raw"
    return LoadedModel(network=model.student, encoder=model.prompt_encoder(raw), tokenizer=model.tokenizer,
                       max_prompt_len=model.config.model.max_prompt_len, sigma=model.config.objective.sigma,
                       prompt_template=None if raw else model.prompt_template)
