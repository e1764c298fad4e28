"""The task registry: one record per task, and the tables every command reads from it."""

import pytest

from elfreg.tasks import registry
from elfreg.tasks.registry import extract_for


def test_which_answer_a_task_or_benchmark_implies():
    assert [extract_for(t) for t in ("gsm8k", "GSM8K", "math", "math500", "mmlu", "demo-arith", "code", None)] == \
        ["gsm8k", "gsm8k", "math", "math", "choice", "final-line", "text", "text"]
    assert extract_for("humaneval", "code") == "text" and extract_for("my-bench", "gsm8k") == "gsm8k"
    assert extract_for("my-bench", "exact") == "text"




def test_every_table_reads_the_registry():
    from elfreg.diagnose.tasks import BUILTIN_TASKS
    from elfreg.eval.run_model import W_TASK
    from elfreg.sampling.config import W_PRESETS
    from elfreg.sampling.text import TASKS

    # spec §5: w = 3 for GSM8K, 2 for MATH and code; MMLU 2 (elfreg's choice, docs/evaluation.md)
    assert W_PRESETS == {"gsm8k": 3.0, "math": 2.0, "math500": 2.0, "code": 2.0, "humaneval": 2.0, "mbpp": 2.0,
                         "mmlu": 2.0} == registry.w_presets()
    assert TASKS == registry.task_names() == ("choice", "code", "demo-arith", "demo-chain", "gsm8k", "humaneval",
                                              "math", "math500", "mbpp", "mmlu")
    assert W_TASK is registry.KIND_TASKS and all(k in registry.KINDS for k in W_TASK)
    assert set(BUILTIN_TASKS) == {t.name for t in registry.TASKS if t.kind != "code"}


def test_every_benchmark_has_its_task_record():
    from elfreg.eval.registry import default_registry

    benchmarks = default_registry()
    for name in benchmarks.names():
        spec = registry.task(name)
        bench = benchmarks.load(name) if name not in ("mmlu", "mbpp_plus", "humaneval_plus") else None
        if bench is not None:
            assert (bench.kind, bench.prompt_formatter) == (spec.kind, spec.prompt), name
        assert spec.prompt is not None and spec.task_id, name


def test_a_bad_record_names_its_field():
    with pytest.raises(ValueError, match="kind must be one of"):
        registry.Task("x", "essay", "text")
    with pytest.raises(ValueError, match="extract must be one of"):
        registry.Task("x", "exact", "regex")
    with pytest.raises(ValueError, match="^task: unknown task 'nope'"):
        registry.task("nope")


@pytest.mark.parametrize("name, text, problem, right", [
    ("gsm8k", "so #### 72.0", {"answer": "48/2 = 24\n#### 72"}, True),
    ("gsm8k", "#### 71", {"answer": 72}, False),
    ("exact", " a b ", {"answer": "a b"}, True),
    ("demo-arith", "3+4=7\n#### 7", {"answer": "7"}, True),
    ("demo-chain", "a=3\n#### 3", {"answer": "4"}, False),
    ("mmlu", "so the answer is (B).", {"answer": "B"}, True),
    ("math500", "thus $\\boxed{\\frac{1}{2}}$", {"answer": "0.5"}, True),
    ("gsm8k", "#### 72", {}, False),
])
def test_judge_is_the_scorers_verdict(name, text, problem, right):
    assert registry.judge(registry.task(name), text, problem) is right


def test_code_is_not_judged_by_its_text():
    with pytest.raises(ValueError, match="running its tests"):
        registry.judge(registry.task("humaneval"), "def f(): pass", {"answer": "x"})


def test_the_tasks_package_imports_no_torch():
    from helpers import imports_of, modules_after, within

    named = {n for n in imports_of("elfreg.tasks") if n.startswith("elfreg.")}
    assert within(named, ("elfreg.tasks",)) == sorted(named)  # nothing of elfreg outside tasks, lazy imports too
    loaded = modules_after("import elfreg.tasks.registry, elfreg.tasks.arith, elfreg.tasks.chain, "
                           "elfreg.tasks.synthetic, elfreg.tasks.benchmark, elfreg.tasks.testsets, "
                           "elfreg.tasks.mbpp_inputs\nelfreg.tasks.testsets.load_benchmark('humaneval')")
    assert within(loaded, ("torch",)) == []
    assert [m for m in within(loaded, ("elfreg",)) if m != "elfreg"] == within(loaded, ("elfreg.tasks",))
