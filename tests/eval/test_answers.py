from elfreg.eval.answers import extract_choice, extract_gsm8k, normalize_number, numbers_equal


def test_gsm8k_marker_wins_over_later_numbers():
    assert extract_gsm8k("So 3+4=7.\n#### 7\nThen 12 more") == "7"


def test_gsm8k_boxed_answer_is_the_box_content():
    assert extract_gsm8k("We get 5 apples and \\boxed{1,234} total, checked 9") == "1234"


def test_gsm8k_the_answer_is_with_dollar_and_period():
    assert extract_gsm8k("Cost 3 each. The answer is $1,050.") == "1050"


def test_gsm8k_falls_back_to_last_number():
    assert extract_gsm8k("first 3 then -12.50.") == "-12.50"
    assert extract_gsm8k("no digits here") is None


def test_numbers_compare_numerically():
    assert numbers_equal("18.00", "18")
    assert not numbers_equal("18.01", "18")
    assert not numbers_equal(None, "18")
    assert normalize_number("$ 2,000.") == "2000"


def test_mmlu_letter():
    assert extract_choice("(A) is wrong because... The answer is (C).") == "C"
    assert extract_choice("Answer: B") == "B"
    assert extract_choice("I pick D") == "D"
    assert extract_choice("nothing") is None
