import pytest

from elfreg.diagnose.tasks import AnswerTask, extract_final_number, gold_answer, resolve_task


@pytest.mark.parametrize("text, want", [
    ("so 3 + 4 = 7\n#### 7", "7"),
    ("#### 1,234.50", "1234.5"),
    ("#### $18.00.", "18"),
    ("#### -3", "-3"),
    ("first #### 2 then #### 5", "5"),
    ("the answer is 7", "7"),  # the harness's fallbacks: "The answer is", then the last number
    ("#### seven", None),
    ("####0", "0"),
])
def test_extract_final_number(text, want):
    assert extract_final_number(text) == want


def test_gsm8k_scoring_against_a_full_reference_solution():
    task = resolve_task("gsm8k")
    problem = {"prompt": "q", "answer": "Natalia sold 48/2 = 24 clips.\n#### 72"}
    assert gold_answer(problem) == "72" and gold_answer({"answer": 72}) == "72" and gold_answer({}) is None
    assert task.is_correct("... #### 72.0", problem)
    assert not task.is_correct("... #### 71", problem) and task.is_correct("72", problem)
    assert not task.is_correct("#### 72", {"prompt": "q"})


def test_lookup_comes_first_then_builtin_then_error():
    custom = AnswerTask("mine", lambda t: t[:1] or None, lambda t, p: t == p["answer"])
    assert resolve_task("mine", lambda n: custom if n == "mine" else None) is custom
    assert resolve_task("GSM8K").name == "gsm8k"
    assert resolve_task("exact").is_correct(" a b ", {"answer": "a b"})
    with pytest.raises(ValueError, match="--task: unknown task 'nope'"):
        resolve_task("nope")
