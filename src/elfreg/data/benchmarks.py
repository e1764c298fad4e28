"""Benchmark test problems that training data must not contain (spec §6, §7), read from a benchmark data folder."""

from __future__ import annotations

import os
from dataclasses import dataclass

from elfreg.tasks.testsets import MBPP_TEST_IDS, read_jsonl


@dataclass(frozen=True)
class BenchItem:
    """One benchmark problem: its text and (code benchmarks) its reference solution."""

    benchmark: str
    id: str
    prompt: str
    solution: str = ""
    entry_point: str = ""  # code: the function the solution defines when `solution` also holds given code


def _need(path: str) -> str:
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        return path + ".gz"  # the copies shipped with elfreg are gzip-compressed (elfreg/tasks/benchdata)
    if not os.path.exists(path):
        raise FileNotFoundError(f"benchmark file not found: {path}")
    return path


def load_math_benchmarks(data_dir: str) -> list[BenchItem]:
    """GSM8K test (1,319) and MATH-500 (500) questions from `data_dir` (= shared/data)."""
    items = [BenchItem("gsm8k", f"gsm8k/test/{i}", r["question"], r["answer"])
             for i, r in enumerate(read_jsonl(_need(os.path.join(data_dir, "gsm8k", "test.jsonl"))))]
    items += [BenchItem("math500", r["unique_id"], r["problem"], r["solution"])
              for r in read_jsonl(_need(os.path.join(data_dir, "math500", "test.jsonl")))]
    return items


def load_code_benchmarks(data_dir: str) -> list[BenchItem]:
    """HumanEval (164), MBPP test split (500) and MBPP+ (378) prompts and reference solutions.

    HumanEval+ shares HumanEval's problems, so it is not listed twice. MBPP+ is included because
    154 of its problems lie outside the MBPP test split.
    """
    items = [BenchItem("humaneval", r["task_id"], r["prompt"], r["prompt"] + r["canonical_solution"],
                       r["entry_point"])
             for r in read_jsonl(_need(os.path.join(data_dir, "humaneval", "HumanEval.jsonl.gz")))]
    items += [BenchItem("mbpp", f"mbpp/{r['task_id']}", r["text"], r["code"])
              for r in read_jsonl(_need(os.path.join(data_dir, "mbpp", "mbpp.jsonl")))
              if r["task_id"] in MBPP_TEST_IDS]
    items += [BenchItem("mbpp_plus", r["task_id"], r["prompt"], r["canonical_solution"])
              for r in read_jsonl(_need(os.path.join(data_dir, "mbpp_plus", "MbppPlus-v0.2.0.jsonl.gz")))]
    return items
