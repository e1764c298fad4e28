import ast
import gzip
import json

import pytest

from elfreg.data.benchmarks import load_code_benchmarks, load_math_benchmarks
from elfreg.data.decontam import DecontamReport, decontaminate_code, decontaminate_math
from elfreg.data.decontam_code import CodeDecontamConfig, CodeMatcher, ast_hashes, extract_code
from elfreg.data.decontam_math import MathMatcher

from ._shared import shared_dir


def _jsonl(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def data():
    return shared_dir() / "data"


def _row(i, prompt, response="x\n#### 1"):
    return {"id": f"r{i}", "source": "planted", "prompt": prompt, "response": response}


def test_math_planted_duplicates_dropped_clean_rows_kept(data):
    gsm_test = _jsonl(data / "gsm8k" / "test.jsonl")
    q0, q1, q2 = (gsm_test[i]["question"] for i in range(3))
    renamed = q1
    for num in sorted({w for w in q1.replace("$", " ").replace(".", " ").split() if w.isdigit()}, key=len,
                      reverse=True):
        renamed = renamed.replace(num, str(int(num) + 7))
    assert renamed != q1
    words = q2.split()
    words[len(words) // 2] = "banana"  # one-word paraphrase
    planted = {
        "exact": ["  " + q0.upper().replace(" ", "   ") + " "],
        "template": [renamed],
        "ngram": [" ".join(words)],
    }
    group_only = "Compute $\\dbinom{12}{5}$."  # short template: dropped only with its exact-copy group
    planted["exact"].append("Compute  $\\dbinom{31}{28}$ .")  # MATH-500 test/counting_and_probability/116
    clean_train = [r["question"] for r in _jsonl(data / "gsm8k" / "train.jsonl")[:100]]
    clean = clean_train + ["Simplify $\\sqrt{50}$."]  # same short template as a test problem, no exact copy
    rows = [_row(i, q) for i, q in enumerate(clean)]
    n = len(rows)
    for reason, qs in planted.items():
        rows += [_row(n + k, q) | {"planted": reason} for k, q in enumerate(qs)]
        n += len(qs)
    rows.append(_row(n, group_only) | {"planted": "group"})

    matcher = MathMatcher(load_math_benchmarks(str(data)))
    report = DecontamReport(task="math")
    kept = list(decontaminate_math(lambda: iter(rows), matcher, report))
    assert [r["prompt"] for r in kept] == clean
    dropped_reasons = {d["id"]: d["reason"] for d in report.dropped}
    for r in rows:
        if "planted" in r:
            assert dropped_reasons[r["id"]] == r["planted"], r["prompt"]
    assert report.rows_in == len(rows) and report.rows_kept == len(clean)
    assert report.rows_dropped == len(rows) - len(clean) == sum(report.by_reason.values())
    assert set(report.by_benchmark) == {"gsm8k", "math500"}


def test_code_planted_duplicates_dropped_clean_rows_kept(data):
    he = {r["task_id"]: r for r in _jsonl(data / "humaneval" / "HumanEval.jsonl.gz")}
    mbpp = {r["task_id"]: r for r in _jsonl(data / "mbpp" / "mbpp.jsonl")}
    plus_ids = {int(r["task_id"].split("/")[1]) for r in _jsonl(data / "mbpp_plus" / "MbppPlus-v0.2.0.jsonl.gz")}

    prompt0 = he["HumanEval/0"]["prompt"]
    reformatted = ast.unparse(ast.parse(he["HumanEval/2"]["prompt"] + he["HumanEval/2"]["canonical_solution"]))
    reformatted = "# my solution\n" + reformatted.replace("\n", "\n\n").replace("'", '"')
    planted = [
        ("prompt", prompt0.upper().replace("    ", "\t"), ""),
        ("ngram", mbpp[20]["text"] + " Use a loop.", ""),
        ("ast", "Write a function that returns the fractional part of a float.",
         f"Here is the code:\n```python\n{reformatted}\n```\nIt subtracts the integer part."),
    ]
    assert ast_hashes(extract_code(planted[2][2])) & ast_hashes(he["HumanEval/2"]["prompt"]
                                                                 + he["HumanEval/2"]["canonical_solution"])
    free = [mbpp[t] for t in sorted(mbpp) if not 11 <= t <= 510 and t not in plus_ids][:20]
    clean = [(r["text"], "```python\n" + r["code"] + "\n```") for r in free]
    clean.append(("Write a function that reverses the words in a sentence.",
                  "def rev(s):\n    return ' '.join(reversed(s.split()))"))
    rows = [_row(i, p, c) for i, (p, c) in enumerate(clean)]
    rows += [_row(len(rows) + k, p, c) | {"planted": why} for k, (why, p, c) in enumerate(planted)]

    report = DecontamReport(task="code")
    kept = list(decontaminate_code(rows, CodeMatcher(load_code_benchmarks(str(data))), report))
    assert [r["prompt"] for r in kept] == [p for p, _ in clean]
    reasons = {d["id"]: d["reason"] for d in report.dropped}
    for r in rows[len(clean):]:
        assert reasons[r["id"]] == r["planted"]
    assert dict(report.by_reason) == {"prompt": 1, "ngram": 1, "ast": 1}


def test_jaccard_threshold_is_configurable(data):
    items = load_code_benchmarks(str(data))
    mbpp20 = next(i for i in items if i.id == "mbpp/20")
    variant = mbpp20.prompt + " Use a loop and explain the complexity in detail."
    strict = CodeMatcher(items, CodeDecontamConfig(jaccard_threshold=0.99, containment_threshold=None))
    loose = CodeMatcher(items, CodeDecontamConfig(jaccard_threshold=0.3, containment_threshold=None))
    assert strict.match(variant) is None
    assert loose.match(variant).item_id == "mbpp/20"
    with pytest.raises(ValueError, match="jaccard_threshold"):
        CodeDecontamConfig(jaccard_threshold=0)


def test_ast_hash_ignores_format_not_names():
    a = "def f(x):\n    '''doc'''\n    return (x + 1)  # add\n"
    b = 'def f(x): return x+1\n'
    c = "def g(x):\n    return x + 1\n"
    assert ast_hashes(a) == ast_hashes(b)
    assert not ast_hashes(a) & ast_hashes(c)
    assert ast_hashes("def (:") == set()
