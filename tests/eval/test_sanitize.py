"""elfreg's sanitizer (elfreg.eval.sanitize): hand-checked behaviour, and identical output to EvalPlus 0.3.1's."""

import json
from pathlib import Path

import pytest

from elfreg.eval.datasets import load_benchmark, manifest, packaged_data_dir
from elfreg.eval.sanitize import extract_code, sanitize

RECORDED = Path(__file__).parent / "data" / "recorded_completions.jsonl"
F = "```"
# benchmark solutions hold regexes such as "\." in plain strings: ast.parse warns, as it does under EvalPlus
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::SyntaxWarning")


def test_extracts_the_longest_parsable_block_from_markdown_and_prose():
    text = f"Sure!\n{F}python\ndef f(x):\n    return x\n{F}\nIt returns x.\n"
    assert extract_code(text) == "def f(x):\n    return x"
    two = f"{F}python\ndef a():\n    return 1\n{F}\nlonger:\n{F}python\ndef b():\n    y = 2\n    return y\n{F}"
    assert extract_code(two) == "def b():\n    y = 2\n    return y"


def test_extraction_ties_go_to_the_earliest_span_and_single_lines_never_count():
    # both blocks hold two lines: the first one wins; spans need at least two lines
    assert extract_code("x = 1\ny = 2\n???\nz = 3\nw = 4") == "x = 1\ny = 2"
    assert extract_code("only one line") == "only one line"
    assert extract_code("a = 1\n\n\n???") == "a = 1\n"  # the earliest end among equal non-blank counts


def test_selection_keeps_imports_returning_functions_classes_and_assignments_only():
    text = ("from __future__ import annotations\nimport math\nfrom os import path\nK = 3\nx += 1\nprint(K)\n"
            "class C:\n    pass\n@dec\ndef decorated():\n    return 1\ndef no_return():\n    pass\n"
            "def f():\n    return math.pi * K\nif __name__ == '__main__':\n    f()\n")
    assert sanitize(text) == ("import math\nfrom os import path\nK = 3\nclass C:\n    pass\n"
                              "def f():\n    return math.pi * K")


def test_entry_point_keeps_only_what_it_reaches_and_first_definitions_win():
    text = ("import re\nA = 1\nB = A + 1\ndef g():\n    return B\ndef h():\n    return 0\n"
            "def f():\n    return g()\ndef f():\n    return 99\n")
    assert sanitize(text, "f") == "import re\nA = 1\nB = A + 1\ndef g():\n    return B\ndef f():\n    return g()"
    # no definition reached: only the imports remain
    assert sanitize(text, "missing") == "import re"


def test_empty_selection_falls_back_to_the_extracted_code():
    assert sanitize("for i in range(3):\n    print(i)\n", "f") == "for i in range(3):\n    print(i)"


def test_shipped_files_are_all_in_the_manifest():
    shipped = {str(p.relative_to(packaged_data_dir())) for p in packaged_data_dir().rglob("*.jsonl.gz")}
    assert shipped == {e["file"] for e in manifest().values()}


def _recorded():
    return [json.loads(line) for line in RECORDED.read_text().splitlines()]


def _corpus(full: bool) -> list[tuple[str, str | None]]:
    """(text, entry point) pairs: recorded model-style completions, then benchmark solutions in both formats."""
    prompts = {p.task_id: p.extra["code_prompt"] for p in load_benchmark("humaneval").problems}
    out = []
    for r in _recorded():
        out += [(r["text"], r["entry_point"]), (r["text"], None)]
        if r["task_id"] in prompts:  # the same text read as a continuation of the HumanEval prompt
            out.append((prompts[r["task_id"]] + r["text"], r["entry_point"]))
    step = 1 if full else 16
    for name in ("humaneval", "mbpp", "mbpp_plus"):
        for p in load_benchmark(name).problems[::step]:
            body = p.reference[len(p.extra["code_prompt"]):] if name == "humaneval" else p.reference
            out += [(p.reference, p.entry_point), (p.reference, None), (p.extra["code_prompt"] + body, p.entry_point)]
            if full:  # the solution dressed the way chat models answer
                out += [(f"Here you go:\n{F}python\n{p.reference}\n{F}\nHope this helps!", p.entry_point),
                        (f"{p.reference}\n\n# tests\nprint({p.entry_point}.__name__)\nassert True\n", p.entry_point),
                        (f"{p.reference}\nif __name__ == '__main__':\n    print('ok')\n", None)]
    return out


def _evalplus_sanitize():
    mod = pytest.importorskip("evalplus.sanitize",
                              reason="evalplus (test-only: `make setup`, or pip install elfreg[evalplus]) is not "
                                     "installed; it is only needed to compare the two sanitizers")
    return mod.sanitize


@pytest.mark.parametrize("full", [pytest.param(False, id="recorded+sample"),
                                  pytest.param(True, id="all-solutions", marks=pytest.mark.slow)])
def test_same_output_as_evalplus(full):
    theirs = _evalplus_sanitize()
    corpus = _corpus(full)
    diffs = [(text[:80], ep) for text, ep in corpus if sanitize(text, ep) != theirs(text, ep)]
    assert not diffs, f"{len(diffs)} of {len(corpus)} differ, e.g. {diffs[:3]}"
    assert len(corpus) > (4000 if full else 150)


def test_recorded_completions_cover_the_styles_asked_for():
    styles = {r["style"] for r in _recorded()}
    for needed in ("fence+prose", "fence+tests-bottom", "main-block", "helpers", "class-helper", "syntax-error-tail",
                   "garbage-unbalanced", "mbpp-wrong-name-import"):
        assert needed in styles
