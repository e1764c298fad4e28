import ast
import gzip
import json
import warnings

import pytest

from elfreg.data.benchmarks import load_code_benchmarks, load_math_benchmarks
from elfreg.data.decontam import DecontamReport, decontaminate_code, decontaminate_math
from elfreg.data.code_ast import fingerprints
from elfreg.data.decontam_code import (CodeDecontamConfig, CodeMatcher, extract_code, response_fingerprints,
                                       solution_fingerprints)
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
        # Mbpp/604's reference body under another name (this row passed as clean before bodies were compared)
        ("ast", "Write a function that reverses the words in a sentence.",
         "def rev(s):\n    return ' '.join(reversed(s.split()))"),
    ]
    he2 = next(i for i in load_code_benchmarks(str(data)) if i.id == "HumanEval/2")
    assert {f.named for f in response_fingerprints(planted[2][2])} & {f.named for f in solution_fingerprints(he2)}
    free = [mbpp[t] for t in sorted(mbpp) if not 11 <= t <= 510 and t not in plus_ids][:20]
    clean = [(r["text"], "```python\n" + r["code"] + "\n```") for r in free]
    clean.append(("Write a function that reverses the words in a sentence.",  # Mbpp/604's task, solved otherwise
                  "def rev(sentence):\n    words = sentence.split()\n    words.reverse()\n    return ' '.join(words)"))
    rows = [_row(i, p, c) for i, (p, c) in enumerate(clean)]
    rows += [_row(len(rows) + k, p, c) | {"planted": why} for k, (why, p, c) in enumerate(planted)]

    report = DecontamReport(task="code")
    kept = list(decontaminate_code(rows, CodeMatcher(load_code_benchmarks(str(data))), report))
    assert [r["prompt"] for r in kept] == [p for p, _ in clean]
    reasons = {d["id"]: d["reason"] for d in report.dropped}
    for r in rows[len(clean):]:
        assert reasons[r["id"]] == r["planted"]
    assert dict(report.by_reason) == {"prompt": 1, "ngram": 1, "ast": 2}


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


HE3_REWRITTEN = '''Sure! Here is a solution.

```python
import sys

LIMIT = 10


def has_negative_balance(operations):
    balance = 0

    for op in operations:
        balance += op
        if balance < 0:
            return True

    return False


if __name__ == "__main__":
    print(has_negative_balance([int(a) for a in sys.argv[1:]]))
```

It keeps a running balance.'''

HE3_DIFFERENT = '''```python
from itertools import accumulate


def has_negative_balance(operations):
    return any(b < 0 for b in accumulate(operations))
```'''

HE55_REWRITTEN = '''```python
def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number."""
    if n == 0:
        return 0
    if n == 1:
        return 1
    return fibonacci(n - 1) + fibonacci(n - 2)
```'''

MBPP296_REWRITTEN = '''Count inversions with two loops:

```python
from typing import List


class Counter:
    """Unrelated helper class."""

    def __init__(self) -> None:
        self.calls: int = 0


def count_inversions(arr: List[int], n: int) -> int:
    """Number of pairs i < j with arr[i] > arr[j]."""
    inv_count: int = 0
    for i in range(n):
        for j in range(i + 1, n):
            if arr[i] > arr[j]:
                inv_count += 1
    return inv_count
```

Example:

```
>>> count_inversions([3, 1, 2], 3)
2
```'''

MBPP296_DIFFERENT = '''```python
def count_inversions(arr, n):
    return sum(1 for i in range(n) for j in range(i + 1, n) if arr[i] > arr[j])
```'''


@pytest.fixture(scope="module")
def code_matcher(data):
    return CodeMatcher(load_code_benchmarks(str(data)))


@pytest.mark.parametrize("prompt, response, item_id", [
    ("Given a list of deposits (positive) and withdrawals (negative) on an account that starts empty, report "
     "whether the running balance ever drops under zero.", HE3_REWRITTEN, "HumanEval/3"),
    ("Compute the n-th number of the Fibonacci sequence recursively.", HE55_REWRITTEN, "HumanEval/55"),
    ("How many pairs of positions in a list hold a larger number before a smaller one?", MBPP296_REWRITTEN,
     "mbpp/296"),
])
def test_rewritten_benchmark_solution_is_dropped(code_matcher, prompt, response, item_id):
    # another name, no (or other) hints and docstring, reworded prompt, among imports/constants/classes/helpers
    assert code_matcher.match(prompt) is None  # the prompt alone passes every text rule
    m = code_matcher.match(prompt, response)
    assert (m.reason, m.item_id) == ("ast", item_id)


@pytest.mark.parametrize("prompt, response", [
    ("Given a list of deposits and withdrawals, report whether the balance ever drops under zero.", HE3_DIFFERENT),
    ("How many pairs of positions in a list hold a larger number before a smaller one?", MBPP296_DIFFERENT),
])
def test_genuinely_different_solution_is_kept(code_matcher, prompt, response):
    assert code_matcher.match(prompt, response) is None


def test_short_bodies_match_only_under_the_same_name(code_matcher):
    prompt = "Return the length of a string."  # HumanEval/23's body is `return len(string)` (6 AST nodes)
    exact = "def strlen(string: str) -> int:\n    return len(string)\n"
    assert code_matcher.match(prompt, exact).item_id == "HumanEval/23"
    assert code_matcher.match(prompt, "def length(string):\n    return len(string)\n") is None
    loose = CodeMatcher(code_matcher.items, CodeDecontamConfig(ast_min_nodes=0))
    assert loose.match(prompt, "def length(string):\n    return len(string)\n").item_id == "HumanEval/23"
    with pytest.raises(ValueError, match="ast_min_nodes"):
        CodeDecontamConfig(ast_min_nodes=-1)


class _Disguise(ast.NodeTransformer):
    """Rename functions (and every reference), annotate every parameter and return, replace docstrings."""

    def __init__(self, names):
        self.names = names

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.name = self.names.get(node.name, node.name)
        for a in node.args.args:
            a.annotation = ast.Name("object", ast.Load())
        node.returns = ast.Name("object", ast.Load())
        doc = ast.Expr(ast.Constant("Rewritten for the training set."))
        has_doc = isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None), ast.Constant)
        node.body = [doc] + node.body[1 if has_doc else 0:]
        return node

    def visit_Name(self, node):
        node.id = self.names.get(node.id, node.id)
        return node


def test_every_benchmark_solution_rewritten_is_dropped(data, code_matcher):
    """Each HumanEval / MBPP / MBPP+ solution, renamed, annotated, re-documented and wrapped among an import and
    a helper, is dropped by the AST rule when it has a body that identifies it (>= ast_min_nodes nodes and no
    call to a renamed sibling)."""
    min_nodes = CodeDecontamConfig().ast_min_nodes
    checked = missed = 0
    for item in code_matcher.items:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # invalid escapes in the benchmark's own code
            tree = ast.parse(item.solution)
        mine = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        targets = [f for f in mine if not item.entry_point or f.name == item.entry_point]
        names = {f.name: f"{f.name}_renamed" for f in targets}
        identifying = [f for f in solution_fingerprints(item) if f.nodes >= min_nodes]
        calls_sibling = {f.name for f in targets if {n.id for n in ast.walk(f) if isinstance(n, ast.Name)}
                         & (set(names) - {f.name})}
        if not any(fp.name in names and fp.name not in calls_sibling for fp in identifying):
            continue
        code = ast.unparse(_Disguise(names).visit(tree))
        response = f"Solution:\n```python\nimport os\n\n\ndef unrelated_helper(z):\n    return z\n\n\n{code}\n```\n"
        m = code_matcher.match("Solve the task.", response)
        checked += 1
        if m is None or m.reason != "ast":
            missed += 1
            continue
        matched = next(i for i in code_matcher.items if i.id == m.item_id and i.benchmark == m.benchmark)
        assert {f.digest for f in solution_fingerprints(matched)} & {f.digest for f in response_fingerprints(response)}
    print(f"rewritten solutions checked: {checked} of {len(code_matcher.items)}")
    assert missed == 0 and checked > 0.9 * len(code_matcher.items), (checked, missed, len(code_matcher.items))


def test_training_data_reads_the_test_sets_without_evaluation():
    """No module of elfreg.data, decontamination included, names elfreg.eval, not even inside a function: the test
    sets are read through elfreg.tasks.testsets, the loaders evaluation uses."""
    from helpers import imports_of

    assert [n for n in imports_of("elfreg.data") if n == "elfreg.eval" or n.startswith("elfreg.eval.")] == []
