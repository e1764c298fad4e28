"""A user's file as a benchmark: the rules a --task picks, and a named benchmark's unpinned --data marked custom."""

import json

import pytest

from elfreg.eval.custom import custom_record, load_for_eval, rules_for
from elfreg.eval.registry import default_registry
from elfreg.tasks.testsets import packaged_data_dir


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_math_reads_gsm8k_or_math500_format(tmp_path):
    gsm = _jsonl(tmp_path / "g.jsonl", [{"question": "1 plus 2?", "answer": "1 plus 2 is 3\n#### 3"}])
    m5 = _jsonl(tmp_path / "m.jsonl", [{"problem": "x?", "answer": "\\frac{1}{2}", "solution": "s",
                                        "unique_id": "a/1"}])
    assert rules_for("math", gsm) == "gsm8k" and rules_for("math", m5) == "math500"
    assert rules_for("code", gsm) == "humaneval" and rules_for("choice", gsm) == "mmlu"
    with pytest.raises(ValueError, match="--task"):
        rules_for("poetry", gsm)


def test_custom_and_unpinned_files_are_recorded_by_name_and_sha256(tmp_path):
    reg = default_registry()
    path = _jsonl(tmp_path / "mine.jsonl", [{"question": "1 plus 2?", "answer": "#### 3"},
                                            {"question": "2 plus 2?", "answer": "#### 4"}])
    for bench in (load_for_eval(reg, "custom", path, "math"), load_for_eval(reg, "gsm8k", path)):
        rec = custom_record(bench)
        assert rec["benchmark"] == "custom" and rec["rules"] == "gsm8k"
        assert rec["data"]["name"] == "mine.jsonl" and rec["data"]["sha256"] == bench.source_sha256
        assert [p.answer for p in bench.problems] == ["3", "4"]
    with pytest.raises(ValueError, match="--task"):
        load_for_eval(reg, "custom", path)
    with pytest.raises(ValueError, match="--data"):
        load_for_eval(reg, "custom", None, "math")
    for task, field in (("code", "task_id"), ("math500", "unique_id")):   # a file of another format: one line
        with pytest.raises(ValueError, match=f"mine.jsonl: not in the format --task {task} reads.*{field}"):
            load_for_eval(reg, "custom", path, task)


def test_the_pinned_copy_given_as_data_stays_the_public_benchmark():
    reg = default_registry()
    pinned = next(packaged_data_dir().glob("gsm8k*/*.jsonl*"), None) or next(packaged_data_dir().rglob("*gsm8k*"))
    bench = load_for_eval(reg, "gsm8k", str(pinned))
    assert bench.data_version is not None and custom_record(bench) == {}
    assert custom_record(load_for_eval(reg, "gsm8k", None)) == {}
