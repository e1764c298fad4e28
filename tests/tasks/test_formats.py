import pytest

from elfreg.data.sources import BadRowError
from elfreg.tasks.formats import (MATH_PROMPT, apply_template, extract_final_answer, format_math_response,
                                   format_prompt, last_boxed, prompt_template, validate_template)


def test_prompt_template_of_each_task_and_format_prompt():
    assert prompt_template("math") == prompt_template("code") == MATH_PROMPT == "Question: {question}\nAnswer:"
    assert format_prompt(MATH_PROMPT, "  5-0+3=?\n") == "Question: 5-0+3=?\nAnswer:"
    assert apply_template({"prompt": "5-0+3=?", "response": "#### 8"}, "math")[0] == format_prompt(MATH_PROMPT, "5-0+3=?")
    assert format_prompt("{{literal}} {question}", "q") == "{literal} q"
    with pytest.raises(ValueError, match="unknown task 'chat'"):
        prompt_template("chat")
    assert validate_template("Q: {question}") == "Q: {question}"
    for bad in ("Q:", "{question}{question}", "{0} {question}", "{question!r}x{y}"):
        with pytest.raises(ValueError, match="exactly one field"):
            validate_template(bad)


def test_gsm8k_answer_loses_calculator_notes_and_keeps_hash_line():
    sol = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert format_math_response(sol) == "Natalia sold 48/2 = 24 clips in May.\n#### 72"


def test_metamath_answer_line_becomes_hash_line():
    sol = "She has 3 + 4 = 7 apples.\nThe answer is: 7"
    assert format_math_response(sol) == "She has 3 + 4 = 7 apples.\n#### 7"


def test_expected_answer_wins_and_boxed_stays():
    sol = "So $x = \\boxed{\\frac{1}{2}}$."
    assert format_math_response(sol, "\\frac{1}{2}") == "So $x = \\boxed{\\frac{1}{2}}$.\n#### \\frac{1}{2}"
    assert last_boxed("a \\boxed{1} b \\boxed{x^{2}}") == "x^{2}"
    assert extract_final_answer(sol) == "\\frac{1}{2}"


def test_math_row_without_answer_is_a_bad_row():
    with pytest.raises(BadRowError, match="row-9: math response has no final answer"):
        format_math_response("I think it is big.", None, where="row-9")


def test_apply_template_math_and_code():
    p, r = apply_template({"prompt": " What is 2+2? ", "response": "2+2=4\n#### 4", "id": "x"}, "math")
    assert p == "Question: What is 2+2?\nAnswer:" and r == "2+2=4\n#### 4"
    p, r = apply_template({"prompt": "Add.", "response": "```python\ndef f(): pass\n```\n"}, "code")
    assert p == "Question: Add.\nAnswer:" and r == "```python\ndef f(): pass\n```"
    with pytest.raises(ValueError, match="unknown task"):
        apply_template({"prompt": "a", "response": "b"}, "art")
