"""The MMLU training file (spec §7): auxiliary-train questions + rationales, kept when their letter is the gold one,
decontaminated against the MMLU test set, every drop counted under its reason."""

import json

import pytest

from elfreg.cli import main
from elfreg.data.decontam_choice import ChoiceDecontamConfig, ChoiceItem, ChoiceMatcher, mmlu_test_items
from elfreg.data.mmlu import aux_question, build_mmlu_train, iter_aux_questions
from elfreg.data.sources import BadRowError
from elfreg.tasks.formats import apply_template, format_choice_question, format_choice_response
from elfreg.tasks.testsets import load_benchmark

QUESTIONS = [  # (question, choices, answer) in the source's order: ids aux/0 ... aux/4
    ("Which gas do plants take in for photosynthesis?", ["oxygen", "carbon dioxide", "nitrogen", "helium"], "B"),
    ("What is 7 times 8?", ["54", "56", "58", "64"], "B"),
    ("Which planet is closest to the sun?", ["Venus", "Earth", "Mercury", "Mars"], "C"),
    ("Who wrote Hamlet?", ["Shakespeare", "Dickens", "Austen", "Twain"], "A"),
]


def _rationales():
    """Hand-made rationales: (id, text, the reason it is dropped or None when kept)."""
    return [
        (0, "Plants absorb carbon dioxide and release oxygen.\nThe answer is (B).", None),
        (0, "Photosynthesis fixes CO2 from the air. Answer: B", None),  # a second rationale for the same question
        (0, "Photosynthesis fixes CO2 from the air. Answer: B", "duplicate"),
        (0, "Plants need oxygen to live, so the answer is (A).", "wrong_letter"),
        (1, "7 x 8 = 56, which is option B.", "no_letter"),  # "option B" alone commits to nothing
        (1, "7 x 8 = 56.\nThe answer is (B).", None),
        (2, "Mercury orbits closest. The correct option is C.", None),
        (3, "Shakespeare wrote it. The answer is (A).", "contaminated"),  # aux/3 is an MMLU test question here
        (9, "The answer is (A).", "unknown_question"),
    ]


@pytest.fixture
def files(tmp_path):
    qfile = tmp_path / "aux.jsonl"
    with open(qfile, "w") as f:
        for i, (q, c, a) in enumerate(QUESTIONS):
            row = {"question": q, "choices": c, "answer": "ABCD".index(a), "subject": ""}
            f.write(json.dumps({"train": row} if i % 2 else row) + "\n")  # the hub's nested form on odd rows
    rfile = tmp_path / "rationales.jsonl"
    lines = [json.dumps({"id": i, "rationale": t}) for i, t, _ in _rationales()]
    lines.append(json.dumps({"id": 0, "text": "no rationale field"}))  # malformed: line 10
    lines.append("{not json")  # malformed: line 11
    rfile.write_text("\n".join(lines) + "\n")
    return qfile, rfile


def _matcher():
    # a tiny "test set" holding aux/3's question with the same options, in other case and spacing
    return ChoiceMatcher([ChoiceItem("mmlu", "world_lit/0", "who  WROTE hamlet?", ("Shakespeare", "Dickens",
                                                                                     "Austen", "Twain"))])


def test_builder_keeps_right_rationales_and_counts_every_drop(files):
    qfile, rfile = files
    from elfreg.data.mmlu import iter_rationales

    rows, report = build_mmlu_train(iter_aux_questions(str(qfile)), iter_rationales(str(rfile)), _matcher())
    d = report.as_dict()
    assert d["questions"] == 4 and d["questions_contaminated"] == 1 and d["contaminated_by_rule"] == {"exact": 1}
    assert d["rationales_read"] == 11 and d["rows_kept"] == 4 and d["rows_dropped"] == 7
    assert d["dropped"] == {"malformed": 2, "unknown_question": 1, "ambiguous_question": 0, "contaminated": 1,
                            "no_letter": 1, "wrong_letter": 1, "duplicate": 1}
    assert d["questions_with_rows"] == 3 and d["questions_without_rows"] == 1
    assert [r["id"] for r in rows] == ["aux/0#0", "aux/0#1", "aux/1#0", "aux/2#0"]
    assert all(r["response"].endswith(f"The answer is ({r['answer']}).") for r in rows)
    assert rows[1]["response"] == "Photosynthesis fixes CO2 from the air. Answer: B\nThe answer is (B)."
    assert rows[0]["response"] == "Plants absorb carbon dioxide and release oxygen.\nThe answer is (B)."  # unchanged
    assert rows[3]["prompt"] == format_choice_question(QUESTIONS[2][0], QUESTIONS[2][1])
    assert "rationales.jsonl:11" in d["examples"]["malformed"][1] and d["contaminated"][0]["test_item"] == "world_lit/0"


def test_training_rows_are_what_the_benchmark_asks_and_scores(files):
    """A kept row, put through the training template, is the MMLU prompt body in the model's template, and its
    response scores right on the benchmark's extractor."""
    from elfreg.data.mmlu import iter_rationales
    from elfreg.tasks.answers import extract_choice

    qfile, rfile = files
    rows, _ = build_mmlu_train(iter_aux_questions(str(qfile)), iter_rationales(str(rfile)), None)
    prompt, response = apply_template(rows[0], "choice")
    assert prompt == f"Question: {rows[0]['prompt']}\nAnswer:" and extract_choice(response) == "B"
    bench = load_benchmark("mmlu_dev")
    p = bench.problems[0]
    assert bench.format_prompt(p) == format_choice_question(p.question, p.extra["choices"])
    with pytest.raises(BadRowError, match=r"concludes \(A\) but the answer is \(B\)"):
        format_choice_response("so the answer is (A)", "B", "row 3")
    assert format_choice_response("text", 2) == "text\nThe answer is (C)."


def test_key_question_joins_on_the_question_text(tmp_path):
    qfile = tmp_path / "aux.csv"  # data.tar's layout: question,A,B,C,D,answer; no header
    qfile.write_text("What is 2+2?,3,4,5,6,B\nWhat is 2+2?,4,3,5,6,A\nName a prime.,4,6,7,8,C\n")
    rfile = tmp_path / "r.jsonl"
    rfile.write_text(json.dumps({"question": "what is 2 + 2 ?", "rationale": "The answer is (B)."}) + "\n"
                     + json.dumps({"question": "Name a  prime.", "rationale": "7 is prime. The answer is (C)."}) + "\n")
    from elfreg.data.mmlu import iter_rationales

    rows, report = build_mmlu_train(iter_aux_questions(str(qfile)), iter_rationales(str(rfile)), None, key="question")
    assert [r["question_id"] for r in rows] == ["aux/2"] and rows[0]["subject"] == "aux"
    assert report.as_dict()["dropped"]["ambiguous_question"] == 1  # "2+2" is two questions with other options


def test_bad_question_rows_name_the_row():
    with pytest.raises(BadRowError, match="file:3: expected"):
        aux_question(2, {"question": "q", "choices": ["a", "b"], "answer": 0}, "file:3")
    with pytest.raises(BadRowError, match="file:4"):
        aux_question(3, {"question": "q", "choices": ["a", "b", "c", "d"], "answer": "E"}, "file:4")


def test_matcher_rules_on_the_real_test_set():
    items = mmlu_test_items()
    assert len(items) == 14042
    m = ChoiceMatcher(items, ChoiceDecontamConfig())
    t = items[1000]
    assert m.match(t.question, t.choices).reason == "exact"
    long_q = next(x for x in items if len(x.question.split()) >= 12)
    shuffled = tuple(reversed(long_q.choices))  # the same question with its options in another order
    assert m.match(long_q.question.upper(), shuffled).reason in ("exact", "question")
    assert m.match("Which of the following is true?", ("a cat", "a dog", "a cow", "a hen")) is None
    assert m.match("What colour is a ripe banana on most days?", ("red", "yellow", "blue", "green")) is None


def test_cli_writes_rows_and_report(files, tmp_path, capsys):
    qfile, rfile = files
    out, rep = tmp_path / "train.jsonl", tmp_path / "report.json"
    assert main(["data", "mmlu-train", "--questions", str(qfile), "--rationales", str(rfile), "--output", str(out),
                 "--report", str(rep)]) == 0
    report = json.loads(rep.read_text())
    assert report["rows_kept"] == len(out.read_text().splitlines()) == 5  # nothing of this set is in the real test
    assert report["decontaminated"] and report["questions_contaminated"] == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows_kept"] == 5


def test_offline_hub_questions_fail_fast_naming_the_way_out(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="hub is unreachable .*HF_HUB_OFFLINE.*--questions"):
        next(iter_aux_questions("hub"))
