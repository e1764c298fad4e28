"""A user's own test file as a benchmark: ``eval run --benchmark custom --task TASK --data FILE``, and any named
benchmark whose ``--data`` is not its pinned copy (checked by sha256). Either is scored by the rules of the task's
benchmark and recorded as ``custom``, by the file's name and sha256: never as the public benchmark's result."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from elfreg.tasks.benchmark import Benchmark, BenchmarkRegistry

CUSTOM = "custom"
# --task -> the benchmark whose file format and scoring rules a custom file follows (docs/evaluation.md, "Your own
# test file"); "math" reads either GSM8K's format (an answer ending in "#### x") or MATH-500's (problem, answer)
RULES = {"gsm8k": "gsm8k", "math500": "math500", "code": "humaneval", "humaneval": "humaneval", "mbpp": "mbpp",
         "choice": "mmlu", "mmlu": "mmlu", "demo-arith": "demo-arith", "demo-chain": "demo-chain"}
TASK_CHOICES = ("math", *RULES)
# the rows each set of rules reads (docs/evaluation.md, "Your own test file")
FORMATS = {"gsm8k": '{"question", "answer": "... #### x"}', "math500": '{"problem", "answer", "unique_id"}',
           "humaneval": '{"task_id", "prompt", "entry_point", "test", "canonical_solution"}',
           "mbpp": '{"task_id": 11-510, "text", "code", "test_list"}',
           "mmlu": '{"subject", "question", "choices", "answer"}', "demo-arith": '{"id", "question", "answer"}',
           "demo-chain": '{"id", "question", "answer"}'}
log = logging.getLogger(__name__)


def _first_row(path: str) -> dict:
    """The first JSON row of a JSONL file ({} when it has none or is not JSONL)."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    return row if isinstance(row, dict) else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return {}


def rules_for(task: str, path: str) -> str:
    """The benchmark whose rules score a custom file of ``task`` (``math``: GSM8K's when the first row's answer
    ends in ``#### x``, else MATH-500's); ValueError naming ``--task`` on an unknown one."""
    if task == "math":
        row = _first_row(path)
        return "gsm8k" if "####" in str(row.get("answer", "")) else "math500"
    if task not in RULES:
        raise ValueError(f"--task: --benchmark custom needs one of {', '.join(TASK_CHOICES)}, got {task!r}")
    return RULES[task]


class _NotPinnedFilter(logging.Filter):
    """Drops the loaders' "not the pinned copy" warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is not the pinned" not in record.getMessage()


def load_for_eval(registry: BenchmarkRegistry, name: str, data: str | None, task: str | None = None) -> Benchmark:
    """The benchmark ``eval`` scores: ``custom`` (``task`` and ``data`` required) is ``data`` read and scored by
    the rules of the task's benchmark; a named public benchmark whose ``data`` is not its pinned copy is the same,
    custom. Both are marked ``custom`` (recorded by file name and sha256)."""
    if name == CUSTOM:
        if not task:
            raise ValueError(f"--task: --benchmark custom needs --task ({', '.join(TASK_CHOICES)}): the rules "
                             "that score your file")
        if not data:
            raise ValueError("--data: --benchmark custom needs --data FILE (your test file)")
        rules = rules_for(task, data)
        quiet = _NotPinnedFilter()   # a custom file is not meant to be the pinned copy: no warning that it is not
        testsets_log = logging.getLogger("elfreg.tasks.testsets")
        testsets_log.addFilter(quiet)
        try:
            bench = registry.load(rules, data)
        except (KeyError, TypeError, AttributeError) as exc:   # a row without a field the rules read
            raise ValueError(f"{data}: not in the format --task {task} reads ({rules}'s: {FORMATS[rules]}); "
                             f"a row lacks or mistypes {exc}") from None
        finally:
            testsets_log.removeFilter(quiet)
        bench.custom = True
        return bench
    bench = registry.load(name, data)
    if data and bench.data_version is None:
        log.warning("%s is not the pinned %s copy: scored by %s's rules and recorded as custom (%s, sha256 %s), "
                    "not as %s", data, name, name, Path(data).name, bench.source_sha256[:16], name)
        bench.custom = True
    return bench


def custom_record(bench: Benchmark) -> dict:
    """What a summary records of a custom benchmark: "custom", the rules that scored it, the file by name and
    sha256 ({} for a benchmark that is not custom)."""
    if not bench.custom:
        return {}
    return {"benchmark": CUSTOM, "rules": bench.name,
            "data": {"name": Path(bench.source).name, "sha256": bench.source_sha256}}
