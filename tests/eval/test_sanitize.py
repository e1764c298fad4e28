"""elfreg's sanitizer (elfreg.eval.sanitize): hand-checked behaviour, and identical output to EvalPlus 0.3.1's."""

import ast
import json
from pathlib import Path

import pytest

import elfreg.eval.sanitize as sanitize_module
from elfreg.tasks.testsets import load_benchmark, manifest, packaged_data_dir
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


def _evalplus_search(text: str) -> str:
    """EvalPlus 0.3.1's documented step 1, spelled out: every span of >= 2 lines, the first with the most non-blank
    lines wins (quadratic in spans; only for the small texts below)."""
    lines, best, pair = text.split("\n"), 0, (0, 0)
    for i in range(len(lines)):
        for j in range(i + 1, len(lines)):
            try:
                ast.parse("\n".join(lines[i:j + 1]))
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                continue
            count = sum(1 for line in lines[i:j + 1] if line.strip())
            if count > best:
                best, pair = count, (i, j)
    return "\n".join(lines[pair[0]:pair[1] + 1])


# Texts for each rule of the bounded search: where a span may stop (prose, fences, a bad indent), ends inside an open
# bracket or string, starts skipped after whole statements, and the parser's own line breaks (a lone \r)
RULES = {
    "prose-after": f"{F}python\ndef f(x):\n    return x\n{F}\nIt returns x.\nIt returns x.\nIt returns x.\n",
    "open-bracket": "x = 1\ny = 2\nz = (\n    1,\n    2,\nw w",
    "open-bracket-closed-later": "a = 1\nb = [\n1,\n2\n]\nc c\nd = 4",
    "open-string": 'x = 1\ny = """\nwords words\nmore words\n',
    "string-holds-junk": 'x = """\n??? $\n```\n"""\ny = 2\n!!',
    "decorators": "@a\n@b\ndef f():\n    return 1\n@c\n@d",
    "try-unfinished": "x = 1\ny = 2\ntry:\n    z = 3\n    w = 4\n",
    "backslash": "x = 1 + \\\n    2\ny = 3 \\\n\nz = 4\n?",
    "semicolons+comments": "x = 1; y = 2\n# note\nz = 3\n\n# end\n??",
    "blank-ties": "a = 1\n\n\n???\nb = 2\nc = 3\n\n\n",
    "indented-first": "    x = 1\n    y = 2\nz = 3\nw = 4\n",
    "lone-cr": "x = 1\ry = (\n2)\rz = 3\nw = 4\n$$\nv = 5\n",
    "cr-in-string": "s = '''a\rb'''\nt = 1\r\nu = 2\n",
    "crlf": "def f():\r\n    return 1\r\n\r\nprint(f())\r\n",
    "form-feed": "\x0cx = 1\ny = 2\x0c\nz = 3\n",
    "nul": "x = 1\ny = 2\x00\nz = 3\nw = 4\nv = 5\n",
    "surrogate": "x = 1\ny = '\ud800'\nz = 3\nw = 4\nv = 5\n",
    "vertical-tab": "x = 1\x0b\ny = 2\nz = 3\n",
    "unicode-breaks": "x = 1\u2028\ny = 2\x85\nz = 3\x1c\nw = 4\nv = '\u2029'\n",
}


@pytest.mark.parametrize("name", list(RULES))
def test_bounded_search_finds_the_span_evalplus_finds(name):
    assert extract_code(RULES[name]) == _evalplus_search(RULES[name])


def _parser_work(monkeypatch, text: str) -> int:
    """Characters the span search hands to the parser for ``text`` (deterministic, unlike a time)."""
    work = [0]
    verdict = sanitize_module.span_verdict

    def counting(code):
        work[0] += len(code)
        return verdict(code)

    monkeypatch.setattr(sanitize_module, "span_verdict", counting)
    extract_code(text)
    return work[0]


PROSE = "This function checks whether any two numbers in the list are closer than the threshold."


def _prose_after_solution(n: int) -> str:
    """HumanEval/0's solution in a fence, then ``n`` identical lines that tokenize but never parse (issue 32)."""
    return f"{F}python\n{load_benchmark('humaneval').problems[0].reference}\n{F}\n" + "\n".join([PROSE] * n)


def _junk_around_solution(n: int, char: str) -> str:
    """The round-2 junk lines around HumanEval/0's solution, with one ``char`` in the junk (issue 36)."""
    junk = [f"??? step {i} $" for i in range(n // 2)]
    junk[len(junk) // 2] = f"??? step{char}{len(junk) // 2} $"  # inside the line: "\r" before "\n" is a line end
    return "\n".join([*junk, load_benchmark("humaneval").problems[0].reference, *junk])


# str.splitlines() breaks at each of these; Python's tokenizer only at \r (and \n)
BREAKS = ["\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.timeout(60)
def test_prose_after_a_fenced_solution_is_searched_in_linear_time(monkeypatch):
    # before: 400 lines took 16.8 s (about n^2.3); here 1,600 lines, and the parser's work grows with the text
    want = load_benchmark("humaneval").problems[0].reference.rstrip("\n")
    assert extract_code(_prose_after_solution(1600)) == want
    small, large = (_parser_work(monkeypatch, _prose_after_solution(n)) for n in (400, 1600))
    assert large < 5 * small, (small, large)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("char", BREAKS, ids=[f"U+{ord(c[0]):04X}" + ("-crlf" if len(c) > 1 else "") for c in BREAKS])
def test_line_break_characters_keep_the_junk_search_linear(monkeypatch, char):
    # before: one lone \r turned the tokenize shortcut off, 600 lines took 140 s
    want = load_benchmark("humaneval").problems[0].reference.rstrip("\n")
    assert extract_code(_junk_around_solution(2400, char)) == want
    small, large = (_parser_work(monkeypatch, _junk_around_solution(n, char)) for n in (600, 2400))
    assert large < 5 * small, (small, large)


@pytest.mark.timeout(60)
def test_the_search_stops_at_its_work_budget(monkeypatch):
    # a try block that never gets its except leaves every span from its first line incomplete, whatever its end:
    # unbounded, the search parses ~1,000 spans of ~10 KB here (cubic in general)
    monkeypatch.setattr(sanitize_module, "WORK_BASE", 100_000)
    text = "try:\n" + "    x = 1\n" * 1000 + "def f():\n    return 1\n"
    work = _parser_work(monkeypatch, text)
    assert work <= sanitize_module.WORK_PER_CHAR * len(text) + 100_000 + 2 * len(text)
    # past the budget the longest span found so far is the answer: none here, so the first line (EvalPlus' answer
    # when nothing parses); the function after the try block is not reached
    assert extract_code(text) == "try:"
