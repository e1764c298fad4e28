"""Locate the shared folder (benchmark data) and build a tiny real tokenizer for tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def shared_dir() -> Path:
    """ELFREG_SHARED, else <repo root>/../shared; skip the test when absent."""
    env = os.environ.get("ELFREG_SHARED")
    path = Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared"
    if not (path / "data").is_dir():
        pytest.skip(f"shared benchmark data not found at {path} (set ELFREG_SHARED)")
    return path


def tiny_tokenizer(folder: Path, texts: list[str]):
    """A WordLevel tokenizer over the words of `texts`, saved and reloaded with AutoTokenizer (<eos> = id 0)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {"<eos>": 0, "<unk>": 1}
    for text in texts:
        for word in text.replace("\n", " ").split():
            vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>")
    fast.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)
