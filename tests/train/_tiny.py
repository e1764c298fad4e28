"""Tiny training data for tests: single-digit sums in the tiny word tokenizer's vocabulary."""

from __future__ import annotations

import json
import random
from pathlib import Path


def sum_rows(n: int | None = None, seed: int = 0) -> list[dict]:
    """Rows {"prompt": "what is a plus b ?", "response": "a plus b is c", "answer": c} with a + b < 10."""
    rows = [{"prompt": f"what is {a} plus {b} ?", "response": f"{a} plus {b} is {a + b}", "answer": str(a + b)}
            for a in range(10) for b in range(10) if a + b < 10]
    random.Random(seed).shuffle(rows)
    return rows[:n] if n else rows


def write_sum_jsonl(path: Path, n: int | None = None) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in sum_rows(n)))
    return path


def tiny_overrides(lm_dir: Path, data: Path, **extra) -> list[str]:
    """key=value overrides turning configs/tiny-smoke.yaml into a run on the tiny Qwen3 and the sums file."""
    out = [f"backbones.encoder={lm_dir}", f"backbones.teacher={lm_dir}",
           f"data.sources=[{{name: sums, task: math, path: '{data}', format: jsonl, "
           f"columns: {{prompt: prompt, response: response, answer: answer}}}}]", "train.progress=false"]
    return out + [f"{k}={v}" for k, v in extra.items()]
