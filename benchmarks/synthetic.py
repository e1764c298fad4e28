"""Stand-ins at real shapes for the benchmarks: random-weight Qwen3 backbones saved like checkpoints, a training file
of word rows of chosen lengths, and a real Trainer on them (online features, or the cached ones swapped in).

Throughput needs no trained weights and no hub access: the backbones are transformers Qwen3 models built from their
shape (``flops.QWEN3_SHAPES``) with random weights, cut to the blocks the presets read (the loader keeps no more),
with a word-level tokenizer of the real vocabulary's length.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch

from flops import BackboneShape

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))  # helpers.make_word_tokenizer

# Words the math template and answer line add, so that they are ordinary (non-special) tokens like in a real vocabulary
TEMPLATE_WORDS = ["Question:", "Answer:", "####"]
SPECIAL_WORDS = ["<eos>", "<unk>"]


@functools.lru_cache(maxsize=4)
def vocabulary(size: int) -> tuple[str, ...]:
    """``size`` words: EOS (id 0), UNK, the template's words, then w0, w1, ..."""
    fixed = SPECIAL_WORDS + TEMPLATE_WORDS
    if size < len(fixed) + 2:
        raise ValueError(f"vocabulary: need at least {len(fixed) + 2} words, got {size}")
    return tuple(fixed + [f"w{i}" for i in range(size - len(fixed))])


def word_text(ids: list[int], vocab_size: int) -> list[str]:
    """The words of ``ids`` counted from the first ordinary word (no special or template word)."""
    words = vocabulary(vocab_size)
    first = len(SPECIAL_WORDS) + len(TEMPLATE_WORDS)
    return [words[first + i % (vocab_size - first)] for i in ids]


def write_random_qwen3(folder: Path, shape: BackboneShape, layers: int, tokenizer_len: int,
                       device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0) -> Path:
    """A random-weight transformers Qwen3Model of ``shape`` with its first ``layers`` blocks and a word tokenizer of
    ``tokenizer_len`` ids, saved to ``folder`` like a checkpoint (weights in ``dtype``); returns the folder."""
    from helpers import make_word_tokenizer
    from transformers import Qwen3Config, Qwen3Model

    if tokenizer_len > shape.vocab:
        raise ValueError(f"{shape.name}: tokenizer of {tokenizer_len} ids > {shape.vocab} embedding rows")
    folder = Path(folder)
    make_word_tokenizer(folder, list(vocabulary(tokenizer_len)))
    cfg = Qwen3Config(**{**shape.config_kwargs(), "num_hidden_layers": layers}, eos_token_id=0,
                      tie_word_embeddings=True)
    torch.manual_seed(seed)
    with torch.device(device):  # initialising a 1.7B-shaped model on the GPU takes a fraction of the CPU's time
        model = Qwen3Model(cfg)
    model.to(dtype).save_pretrained(folder)
    del model
    return folder


def write_rows(path: Path, n: int, prompt_tokens: int, row_tokens: int, vocab_size: int, seed: int = 0) -> Path:
    """A jsonl training file of ``n`` math rows whose canvases hold ``prompt_tokens`` prompt tokens (template
    included) and ``row_tokens`` paper-counted tokens (prompt + response + EOS) each, in the word vocabulary."""
    question = prompt_tokens - 2  # "Question:" ... "Answer:"
    solution = row_tokens - prompt_tokens - 3  # + "####" <answer> EOS
    if question < 1 or solution < 1:
        raise ValueError(f"write_rows: {row_tokens} tokens per row cannot hold a {prompt_tokens}-token prompt")
    g = torch.Generator().manual_seed(seed)
    with open(path, "w") as f:
        for _ in range(n):
            text = word_text(torch.randint(0, vocab_size, (question + solution + 1,), generator=g).tolist(), vocab_size)
            row = {"prompt": " ".join(text[:question]), "response": " ".join(text[question:-1]), "answer": text[-1]}
            f.write(json.dumps(row) + "\n")
    return Path(path)


def trainer_overrides(data: Path, encoder: Path, teacher: Path | None, batch: int, extra: dict | None = None
                      ) -> list[str]:
    """key=value overrides that turn a preset config into a benchmark run on the synthetic backbones and rows:
    a fixed number of steps, no warm-up, no epoch checkpoints, few statistics canvases, no progress bar."""
    over = {"backbones.encoder": str(encoder), "backbones.teacher": str(teacher) if teacher else "null",
            "data.sources": f"[{{name: synthetic, task: math, path: '{data}', format: jsonl, "
                            "columns: {prompt: prompt, response: response, answer: answer}}]",
            "data.shuffle_buffer": 64, "data.features": "online", "train.epochs": "null", "train.steps": 10 ** 9,
            "train.warmup_epochs": "null", "train.warmup_steps": 0, "train.keep_epochs": "[]",
            "train.batch_size": batch, "train.stats_canvases": 8, "train.progress": "false", "train.device": "auto",
            "train.save_every": 10 ** 9, "train.log_every": 10 ** 9, **(extra or {})}
    return [f"{k}={v}" for k, v in over.items()]


def use_cached_features(trainer, cache_dir: Path, rows: int) -> None:
    """Switch a Trainer to cached features: the first ``rows`` rows of its data extracted once by its own backbones
    into a feature cache (``data.features: cached`` does the same at start), then batches drawn from it."""
    from elfreg.train import CachedFeatures
    from elfreg.train.batches import CachedBatches
    from elfreg.train.setup import run_stream

    cfg = trainer.cfg
    examples = []
    for ex in run_stream(cfg, 0, 1, epochs=1):
        examples.append(ex)
        if len(examples) == rows:
            break
    data = CachedFeatures.build_or_load(examples, trainer.backbones, cfg.canvas_config(), cache_dir, cfg.data.task,
                                        trainer.need_teacher, progress=False)
    trainer.batches = CachedBatches(data, cfg.train.seed, 0, 1, None, trainer.device)
