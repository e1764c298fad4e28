"""task.styles: a second, shorter response per training problem (the final line alone)."""

import pytest

from elfreg.configtools import ConfigError
from elfreg.demo import arith
from elfreg.demo.answers import extract_answer
from elfreg.demo.config import DemoTask
from elfreg.demo.run import task_rows


def test_two_styles_give_each_problem_a_worked_and_a_direct_response():
    problems = arith.make_split(5, 0, "train")
    one, two = task_rows(problems, arith), task_rows(problems, arith, styles=2)
    assert two[:5] == one and len(two) == 10
    for worked, direct, p in zip(two[:5], two[5:], problems):
        assert direct["prompt"] == worked["prompt"] and direct["response"] == f"#### {p.answer}"
        assert extract_answer(direct["response"]) == extract_answer(worked["response"]) == p.answer


def test_styles_is_checked():
    with pytest.raises(ConfigError, match="task.styles"):
        DemoTask(styles=3)
