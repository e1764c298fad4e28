import pytest

from elfreg.tasks.answers import extract_choice, extract_gsm8k, extractor, normalize_number, numbers_equal


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


# Hand-written rationales: (text, the letter it commits to, or None when it commits to none).
RATIONALES = [
    ("(A) is wrong because the moon has no light of its own. The answer is (C).", "C"),
    ("Answer: B", "B"),
    ("**Answer:** D\n\nMitochondria make ATP.", "D"),
    ("Let's think step by step. Paris is the capital.\nFinal answer: **B**", "B"),
    ("Water boils at 100 C at sea level, so the correct answer is option D.", "D"),
    ("The correct option is B because heat flows from hot to cold.", "B"),
    ("Checking each: (A) no, (B) no. Option C is correct.", "C"),
    ("(C) is the correct answer: 7 x 8 = 56.", "C"),
    ("Since x = 2, \\boxed{A}", "A"),
    ("At first the answer is (A) seemed right, but 3 + 4 = 7, so the answer is (C).", "C"),
    ("The gas expands.\n(B)", "B"),
    ("Both premises hold.\nC.", "C"),
    ("the answer is (c)", "C"),
    ("Therefore the answer is D", "D"),
    ("Answer: C) Paris", "C"),
    # committing to nothing: an article, a bare letter inside a sentence, a negation, prose after the options
    ("So the answer is a matter of definition.", None),
    ("I pick D", None),
    ("Answer: Because the sky scatters blue light.", None),
    ("The answer is not (A).", None),
    ("A student might guess B here, but we cannot tell.", None),
    ("Reasoning about the options.\nA student", None),
    ("nothing", None),
]


@pytest.mark.parametrize("text, letter", RATIONALES)
def test_mmlu_letter_of_hand_written_rationales(text, letter):
    assert extract_choice(text) == letter


# The extractors by name (--extract, the task registry): what the adaptive exit compares.
@pytest.mark.parametrize("name, text, want", [
    ("gsm8k", "so 3 + 15 = 18\n#### 18.00", "18"),
    ("gsm8k", "The answer is 1,234.50", "1234.5"),
    ("gsm8k", "no number here", None),
    ("math", "thus \\boxed{\\frac{1}{2}} and \\boxed{3}", "3"),
    ("math", "no box", None),
    ("choice", "The answer is (C).", "C"),
    ("final-line", "3+4=7,7-2=5\n#### 5", "5"),
    ("final-line", "3+4=7,7-2=5", None),
    ("text", "  def f():\n    return 1 \n", "def f():\n    return 1"),
    ("text", "   ", None),
])
def test_extractors(name, text, want):
    assert extractor(name)(text) == want


def test_unknown_extractor_names_the_field():
    with pytest.raises(ValueError, match="^extract: unknown answer extractor 'regex'"):
        extractor("regex")
