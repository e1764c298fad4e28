"""The benchmarks evaluation knows: the shipped test sets (:mod:`elfreg.tasks.testsets`) and the demo's synthetic
tasks (:mod:`.demo_benchmarks`), by name, for `elfreg eval score` and `elfreg eval run`."""

from __future__ import annotations

from elfreg.tasks import testsets
from elfreg.tasks.benchmark import Benchmark, BenchmarkRegistry

from .demo_benchmarks import load_demo_arith, load_demo_chain


def default_registry() -> BenchmarkRegistry:
    """A fresh registry with every shipped test set and the demo's two tasks (callers may register more)."""
    reg = testsets.default_registry()
    reg.register("demo-arith", load_demo_arith)
    reg.register("demo-chain", load_demo_chain)
    return reg


def load_benchmark(name: str, path: str | None = None, registry: BenchmarkRegistry | None = None) -> Benchmark:
    """Load benchmark ``name`` (a shipped test set or a demo task) from ``path`` (default: its shipped copy or
    default split)."""
    return testsets.load_benchmark(name, path, registry or default_registry())
