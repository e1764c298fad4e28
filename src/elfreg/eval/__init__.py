"""Evaluation (spec §6): benchmarks, answer scoring, sandboxed code tests, pass@k and reports."""

from elfreg.tasks.benchmark import Benchmark, BenchmarkRegistry, Problem

from .completions import Completion, CompletionsError, read_completions
from .metrics import pass_at_k, summarize
from .protocol import (PROTOCOLS, ProtocolEntry, ProtocolRun, paper_refs, protocol_entry, resolve_runs,
                       resolve_settings)
from .registry import default_registry, load_benchmark
from .report import markdown_table, write_reports
from ..sandbox import Sandbox, SandboxConfig
from .scoring import ScoreOptions, score_completions

__all__ = ["Benchmark", "BenchmarkRegistry", "Problem", "Completion", "CompletionsError", "read_completions",
           "default_registry", "load_benchmark", "pass_at_k", "summarize", "markdown_table", "write_reports",
           "Sandbox", "SandboxConfig", "ScoreOptions", "score_completions", "PROTOCOLS", "ProtocolEntry",
           "ProtocolRun", "paper_refs", "protocol_entry", "resolve_runs", "resolve_settings"]
