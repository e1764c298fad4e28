"""Shared builders for pipeline / run / CLI tests: a stand-in model bundle with a real tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.pipeline import GenerationPipeline

from ._standin import StandInConfig, StandInEncoder, StandInStudent, tiny_tokenizer

PROMPTS = ["one plus two is", "two plus two is", "three plus one is", "four", "one plus one plus one is"]
TIMING = ("encoder_seconds", "sampler_seconds", "batch_size")


def bundle(max_len: int = 12, max_prompt_len: int = 6):
    tok = tiny_tokenizer()
    mcfg = StandInConfig(feature_dim=8, reg_dim=4, max_len=max_len, vocab_size=len(tok))
    net = StandInStudent(mcfg, seed=1)
    enc = StandInEncoder(tok, max_len=max_len, feature_dim=8, max_prompt_len=max_prompt_len)
    return net, enc, tok, max_prompt_len


def pipeline(cfg: SamplerConfig, batch_size: int = 4) -> GenerationPipeline:
    net, enc, tok, mpl = bundle()
    return GenerationPipeline(net, enc, tok, cfg, batch_size=batch_size, max_prompt_len=mpl)


def write_prompts(path: Path, prompts=PROMPTS) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "id": f"q{i}"}) + "\n" for i, p in enumerate(prompts)))
    return path


def strip_timing(records):
    return sorted(({k: v for k, v in r.items() if k not in TIMING} for r in records),
                  key=lambda r: (r["prompt_index"], r["sample_index"]))
