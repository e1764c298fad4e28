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


def test_word_answers_are_compared_as_the_final_lines_text(tmp_path):
    """A user's GSM8K-format file whose answers are words: each is judged by the final `#### X` line's text (it was
    judged by a number read elsewhere in the response, so always wrong); numbers stay numbers; the pinned GSM8K has
    only numbers, so its scoring never takes the text rule; the folder's fingerprint says the rule."""
    from elfreg.eval.completions import Completion
    from elfreg.eval.run_model import _verdict_settings
    from elfreg.eval.scoring import ScoreOptions, score_completions
    from elfreg.tasks.answers import is_number

    reg = default_registry()
    path = _jsonl(tmp_path / "letters.jsonl", [
        {"question": "What is letter number 1 of the word 'jdw'?", "answer": "Letter 1 is j.\n#### j"},
        {"question": "How many times does 'o' appear in 'oto'?", "answer": "It appears 2 times.\n#### 2"}])
    bench = load_for_eval(reg, "custom", path, "math")
    assert [p.answer for p in bench.problems] == ["j", "2"]
    ids = [p.task_id for p in bench.problems]
    texts = {(ids[0], 0): "Letter 1 is j.\n#### j", (ids[0], 1): "Letter 1 is k.\n#### k",
             (ids[0], 2): "Letter 1 is j.", (ids[1], 0): "It appears 2 times.\n#### 2",
             (ids[1], 1): "It appears 1 times.\n#### 1"}
    completions = [Completion(t, s, c, i + 1) for i, ((t, s), c) in enumerate(texts.items())]
    score_completions(bench, completions, tmp_path / "results.jsonl", ScoreOptions(workers=1))
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    got = {(r["task_id"], r["sample"]): r["correct"] for r in rows}
    assert got == {(ids[0], 0): True, (ids[0], 1): False, (ids[0], 2): False, (ids[1], 0): True, (ids[1], 1): False}
    args = type("A", (), {"text_limit": 30.0, "max_completion_bytes": 1 << 22})()
    assert _verdict_settings(args, bench)["word_answers"] == "final-line text"
    gsm8k = load_for_eval(reg, "gsm8k", None)
    assert all(is_number(p.answer) for p in gsm8k.problems) and "word_answers" not in _verdict_settings(args, gsm8k)
