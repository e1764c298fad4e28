from elfreg.eval.codeprep import prepare_code


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
    ns: dict = {}
    exec(on, ns)
    assert ns["add_one"](1) == 2


def test_alias_rule_needs_exactly_one_function():
    text = "def f(x):\n    return x\n\ndef g(x):\n    return 2 * x\n"
    code, aliased = prepare_code(text, "h", alias=True)
    assert not aliased and "h =" not in code


def test_helper_without_return_is_kept_when_the_entry_point_needs_it():
    # evalplus' sanitizer drops functions with no `return` (generators); the entry point would then fail
    text = "def gen(n):\n    for i in range(n):\n        yield i\n\ndef f(n):\n    return list(gen(n))\n"
    code, _ = prepare_code(text, "f", alias=False)
    ns: dict = {}
    exec(code, ns)
    assert ns["f"](3) == [0, 1, 2]
