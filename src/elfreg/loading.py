"""What generation needs from a model folder, loaded once: the student, its frozen encoder, tokenizer, prompt limit,
training sigma and prompt template (:func:`load_elf_model`), and the device generation runs on.

The model layer's loader for every command that generates (generate, eval run, diagnose, serve); tests hand the
commands a loader of their own with the same signature.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch



# How a prompt reaches the encoder: inside the model's saved template (a bare question), or as given (raw).
PROMPT_FORMATS = ("template", "raw")


@dataclass
class LoadedModel:
    """What generation needs from a model folder."""

    network: Any
    encoder: Any
    tokenizer: Any
    max_prompt_len: int | None = None
    sigma: float | None = None   # the training noise scale, used when --sigma is not given
    prompt_template: str | None = None  # the template the encoder puts each prompt in; None: prompts used as given


def load_elf_model(model_dir: str, device: torch.device, prompt_format: str = "template") -> LoadedModel:
    """Load an ElfModel folder (src/elfreg/hub.py): student, frozen encoder, tokenizer, prompt cap, sigma, template."""
    from elfreg.hub import ElfModel

    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format: expected one of {', '.join(PROMPT_FORMATS)}, got {prompt_format!r}")
    model = ElfModel.from_pretrained(model_dir, device=device)
    raw = prompt_format == "raw"
    return LoadedModel(network=model.student, encoder=model.prompt_encoder(raw), tokenizer=model.tokenizer,
                       max_prompt_len=model.config.model.max_prompt_len, sigma=model.config.objective.sigma,
                       prompt_template=None if raw else model.prompt_template)


def generation_device(device: str | None = None) -> torch.device:
    """The device generation runs on: ``device`` (``--device``), else cuda:LOCAL_RANK when CUDA is there, else the
    CPU."""
    if device:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")
