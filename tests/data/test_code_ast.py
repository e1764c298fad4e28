"""Normalised solution ASTs (spec §7): what a copy may change, and what it may not."""

from elfreg.data.code_ast import fingerprints


def digests(code, **kw):
    return {fp.digest for fp in fingerprints(code, **kw)}


def test_format_comments_docstring_annotations_and_name_are_normalised():
    a = "def f(x):\n    '''doc'''\n    y = (x + 1)  # add\n    return y\n"
    b = "def g(x: int) -> int: y: int = x+1; return y\n"
    c = 'import math\n\nCONST = 3\n\nclass K:\n    """k"""\n\nasync def h(x):\n    y = x + 1\n    return y\n'
    assert digests(a) == digests(b)
    assert digests(a) <= digests(c)  # one function among an import, a constant, a class and another name


def test_recursive_calls_to_the_functions_own_name_are_normalised():
    a = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
    b = "def fibonacci(n: int) -> int:\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
    c = "def fibonacci(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"  # calls another function
    assert digests(a) == digests(b)
    assert not digests(a) & digests(c)


def test_what_an_exact_ast_match_still_distinguishes():
    base = digests("def f(x):\n    y = x + 1\n    return y\n")
    for other in ("def f(z):\n    y = z + 1\n    return y\n",      # another parameter name
                  "def f(x):\n    y = x + 2\n    return y\n",      # another constant
                  "def f(x):\n    return x + 1\n"):                # another statement structure
        assert not base & digests(other), other


def test_bare_annotation_dropped_and_only_emptied_docstring_body_is_pass():
    plain = digests("def f(x):\n    y = x\n    return y\n")
    assert digests("def f(x):\n    y: int\n    y = x\n    return y\n") == plain
    assert digests('def f():\n    """only a docstring"""\n') == digests("def f():\n    pass\n")


def test_only_selects_the_entry_point_and_its_nested_functions():
    code = ("def given(s):\n    return s[::-1]\n\n"
            "def solve(s):\n    def inner(t):\n        return t * 2\n    return inner(given(s))\n")
    names = [fp.name for fp in fingerprints(code, only="solve")]
    assert names == ["solve", "inner"]
    assert fingerprints(code, only="missing") == []
    assert [fp.name for fp in fingerprints(code)] == ["given", "solve", "inner"]


def test_methods_can_be_skipped_and_function_free_code_is_one_module():
    code = "class Node:\n    def __init__(self, d):\n        self.d = d\n\ndef size(n):\n    return 1 if n else 0\n"
    assert [fp.name for fp in fingerprints(code)] == ["__init__", "size"]
    assert [fp.name for fp in fingerprints(code, methods=False)] == ["size"]
    assert [fp.name for fp in fingerprints("x = [1, 2]\nprint(sum(x))\n")] == ["<module>"]
    assert fingerprints("def (:") == [] and fingerprints("") == []


def test_small_bodies_key_on_the_name_too():
    a, b = fingerprints("def add(x, y):\n    return x + y\n")[0], fingerprints("def plus(x, y):\n    return x + y\n")[0]
    assert a.nodes == 7 and a.digest == b.digest and a.named != b.named
    assert a.match_key(8) != b.match_key(8) and a.match_key(7) == b.match_key(7)
