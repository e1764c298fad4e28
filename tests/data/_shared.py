"""Locate the shared folder (benchmark data) and build a tiny real tokenizer for tests."""

from __future__ import annotations

from pathlib import Path

from helpers import need_shared


def shared_dir() -> Path:
    """The shared folder (ELFREG_SHARED, else <repo root>/../shared); skip the test when absent."""
    return need_shared()


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
