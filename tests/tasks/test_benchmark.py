"""Benchmark records: the scorer kinds a benchmark may have are the task registry's (elfreg.tasks.registry.KINDS)."""

import pytest

from elfreg.tasks.benchmark import Benchmark, Problem
from elfreg.tasks import formats, registry


def _bench(kind):
    return Benchmark("b", kind, [Problem("b/0", "q", "r")], "f", "x", formats.gsm8k_prompt)


def test_the_allowed_kinds_are_the_task_registry_s_own_list():
    import elfreg.tasks.benchmark as benchmark

    assert benchmark.KINDS is registry.KINDS   # one list: a copy here could drift from the tasks' kinds
    for kind in registry.KINDS:
        assert _bench(kind).kind == kind


def test_a_kind_outside_the_registry_is_refused_naming_the_kinds():
    with pytest.raises(ValueError, match="^Benchmark.kind must be one of " + ", ".join(registry.KINDS)
                       + ", got 'essay'$"):
        _bench("essay")
