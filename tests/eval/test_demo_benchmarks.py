"""The demo tasks as registered benchmarks: default splits, a run's test.jsonl, bad lines, and the diagnose task."""

from __future__ import annotations

import json

import pytest

from elfreg.tasks import arith
from elfreg.eval.demo_benchmarks import load_demo_arith, load_demo_chain
from elfreg.diagnose.tasks import resolve_task
from elfreg.eval.registry import load_benchmark


def test_registered_and_default_splits():
    bench = load_benchmark("demo-arith")
    assert bench.name == "demo-arith" and load_benchmark("demo-chain").name == "demo-chain"
    test = arith.all_problems()["test"]
    assert len(bench.problems) == len(test)
    assert {p.question for p in bench.problems} == {arith.format_prompt(p) for p in test}
    for p in bench.problems:
        assert bench.answer_extractor(f"1+1=2\n#### {p.answer}") == p.answer
    assert len(load_demo_chain().problems) == 200


def test_reads_a_runs_test_file_and_names_bad_lines(tmp_path):
    f = tmp_path / "test.jsonl"
    f.write_text(json.dumps({"id": "arith/0", "question": "3+4-2=?", "answer": "5"}) + "\n\n")
    bench = load_demo_arith(str(f))
    assert [(p.task_id, p.question, p.answer) for p in bench.problems] == [("arith/0", "3+4-2=?", "5")]
    f.write_text(json.dumps({"id": "arith/0", "question": "3+4-2=?", "answer": "5"}) + "\n{\"id\": 1}\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:2"):
        load_demo_arith(str(f))


def test_diagnose_knows_both_demo_tasks():
    for name in ("demo-arith", "demo-chain"):
        task = resolve_task(name)
        assert task.is_correct("3+4=7,7-2=5\n#### 5", {"answer": "5"})
        assert not task.is_correct("3+4=7,7-2=5\n#### 6", {"answer": "5"})
