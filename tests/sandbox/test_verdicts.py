"""Verdicts are reached outside the tested program on every benchmark (issue 13): programs that forge a
pass (an object whose ``__eq__`` always answers True, an ``int`` subclass doing the same, walking the
runner's frames to emit a pass record with the run's token, and their kin) score 0 on humaneval,
humaneval_plus, mbpp and mbpp_plus; honest programs get the verdicts the original asserts give them."""

import pytest

from elfreg.sandbox.codecheck import ReplaySpec, TimeRule, run_asserts
from elfreg.sandbox.expected import ExpectedOutputs
from elfreg.tasks.testsets import load_benchmark
from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig
from elfreg.eval.scoring import score_program


# A few tasks per benchmark: float tolerance (HumanEval/2), the find_zero special case (/32), unseeded random
# inputs (/53), a dict argument whose order matters (/95), MBPP test setup objects (Mbpp/367), sets (Mbpp/2).
TASKS = {
    "humaneval": ["HumanEval/0", "HumanEval/2", "HumanEval/32", "HumanEval/53", "HumanEval/95"],
    "humaneval_plus": ["HumanEval/0", "HumanEval/2", "HumanEval/32"],
    "mbpp": ["Mbpp/11", "Mbpp/17", "Mbpp/367"],
    "mbpp_plus": ["Mbpp/2", "Mbpp/3", "Mbpp/4"],
}
RULE = TimeRule(min_time_s=4.0, sample_cap_s=20.0)

FORGERS = {
    "eq_always_true": """
class _Yes:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __gt__(self, other): return True
    def __hash__(self): return 0
    def __bool__(self): return True
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __abs__(self): return 0.0
    def __sub__(self, other): return 0.0
    __rsub__ = __sub__
def {ep}(*args, **kwargs):
    return _Yes()
""",
    "int_subclass": """
class _Int(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
def {ep}(*args, **kwargs):
    return _Int(7)
""",
    "str_list_float_subclasses": """
class _S(str):
    def __eq__(self, other): return True
    __hash__ = str.__hash__
class _L(list):
    def __eq__(self, other): return True
class _F(float):
    def __eq__(self, other): return True
    def __sub__(self, other): return 0.0
    __hash__ = float.__hash__
_n = [0]
def {ep}(*args, **kwargs):
    _n[0] += 1
    return (_S("x"), _L([1]), _F(1.5))[_n[0] % 3]
""",
    "frame_walker_token": """
import sys
def {ep}(*args, **kwargs):
    f = sys._getframe(1)
    while f is not None:
        loc = f.f_locals
        if "token" in loc and "emit" in loc:
            for status in ("pass", "done"):
                loc["emit"]({{"status": status, "token": loc["token"], "token_ok": True}})
        f = f.f_back
    return None
""",
    "frame_walker_outputs": """
import os, sys
def {ep}(*args, **kwargs):
    f = sys._getframe(1)
    while f is not None:
        loc = f.f_locals
        if "emit" in loc and "token" in loc:
            # claim an answer for every call the runner will make, then a clean end
            for i in range(200):
                loc["emit"]({{"i": i, "t": 0.0, "v": "true", "w": 0.0}})
            loc["emit"]({{"status": "done", "token": loc["token"]}})
            loc["emit"]({{"status": "pass", "token": loc["token"]}})
            os._exit(0)
        f = f.f_back
""",
    "monkeypatch_and_exit": """
import builtins, math, os, sys
builtins.AssertionError = type("AssertionError", (Exception,), {{}})
math.fabs = lambda x: 0.0
builtins.abs = lambda x: 0.0
def {ep}(*args, **kwargs):
    os._exit(0)
""",
    "generator_in_place_of_value": """
def {ep}(*args, **kwargs):
    yield from ()
""",
}


@pytest.fixture(scope="module")
def sandbox():
    try:
        box = Sandbox(SandboxConfig(memory_bytes=1 << 30))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
    with box:
        yield box


@pytest.fixture(scope="module")
def benches(sandbox, tmp_path_factory):
    cache = tmp_path_factory.mktemp("elfreg-verdict-cache")
    out = {}
    for name, ids in TASKS.items():
        bench = load_benchmark(name)
        exp = ExpectedOutputs(bench, sandbox, cache).load_or_compute(progress=False, only=set(ids))
        out[name] = (bench, exp)
    return out


def _program(bench, p, body: str) -> str:
    head = p.extra.get("preamble", "")
    return f"{head}\n\n{body}\n" if head else body


@pytest.mark.parametrize("forger", sorted(FORGERS))
@pytest.mark.parametrize("name", sorted(TASKS))
def test_forging_programs_score_zero(sandbox, benches, name, forger):
    bench, exp = benches[name]
    for tid in TASKS[name]:
        p = bench.by_id[tid]
        program = _program(bench, p, FORGERS[forger].format(ep=p.entry_point))
        res = score_program(bench, p, program, sandbox, exp, RULE)
        assert res["base"] != "pass" and res.get("plus") != "pass", (tid, res)


def test_forgers_did_pass_the_in_process_asserts(sandbox, benches):
    # The forging programs are real threats: with the tests run inside the tested process (the asserts)
    # the first two pass HumanEval; the differential verdicts above give them 0.
    bench, _ = benches["humaneval"]
    p = bench.by_id["HumanEval/0"]
    for forger in ("eq_always_true", "int_subclass"):
        program = _program(bench, p, FORGERS[forger].format(ep=p.entry_point))
        assert run_asserts(sandbox, program, p.tests, 5.0).passed, forger


# (task, program body, expected verdict): right ones that differ from the reference's outputs (so the replay
# in the checker decides, with the original tolerance and special cases), and plausible wrong ones.
HONEST = [
    ("humaneval", "HumanEval/2", "def truncate_number(number):\n    return round(number - int(number), 9)", True),
    ("humaneval", "HumanEval/2", "def truncate_number(number):\n    return round(number % 1, 1)", False),
    ("humaneval", "HumanEval/32", "def find_zero(xs):\n    lo, hi = -1.0, 1.0\n"
     "    while poly(xs, lo) * poly(xs, hi) > 0:\n        lo, hi = 2 * lo, 2 * hi\n"
     "    for _ in range(200):\n        mid = (lo + hi) / 2\n"
     "        if poly(xs, lo) * poly(xs, mid) <= 0:\n            hi = mid\n        else:\n            lo = mid\n"
     "    return lo", True),
    ("humaneval", "HumanEval/32", "def find_zero(xs):\n    return 0.0", False),
    ("humaneval", "HumanEval/53", "def add(x, y):\n    return x + y if x < 900 else 0", False),
    ("humaneval", "HumanEval/53", "def add(x: int, y: int):\n    return sum((x, y))", True),
    ("humaneval", "HumanEval/95", "def check_dict_case(dict):\n    ks = list(dict)\n"
     "    return bool(ks) and all(isinstance(k, str) for k in ks) and "
     "(all(k.islower() for k in ks) or all(k.isupper() for k in ks))", True),
    ("humaneval", "HumanEval/95", "def check_dict_case(dict):\n    return len(dict) > 0", False),
    ("humaneval", "HumanEval/0", "def has_close_elements(numbers, threshold):\n    return (x for x in [True])",
     False),
    ("mbpp", "Mbpp/367", "class Node:\n    def __init__(self, data):\n        self.data, self.left, self.right = "
     "data, None, None\ndef is_tree_balanced(root):\n    def h(n):\n        if n is None:\n            return 0\n"
     "        a, b = h(n.left), h(n.right)\n        return -1 if a < 0 or b < 0 or abs(a - b) > 1 else 1 + max(a, b)\n"
     "    return h(root) >= 0", True),
    ("mbpp", "Mbpp/367", "class Node:\n    def __init__(self, data):\n        self.data, self.left, self.right = "
     "data, None, None\ndef is_tree_balanced(root):\n    return True", False),
    ("mbpp", "Mbpp/11", "def remove_Occ(s, ch):\n    i, j = s.find(ch), s.rfind(ch)\n"
     "    return s if i < 0 else s[:i] + s[i + 1:j] + s[j + 1:] if i != j else s[:i] + s[i + 1:]", True),
    ("mbpp", "Mbpp/11", "def remove_Occ(s, ch):\n    return s[1:]", False),
    ("mbpp", "Mbpp/17", "def square_perimeter(a):\n    return 4.0 * a", True),  # 40.0 == 40: the replay decides
    ("mbpp", "Mbpp/17", "def square_perimeter(a):\n    return [4 * a]", False),
]


@pytest.mark.parametrize("name,tid,body,right", HONEST)
def test_honest_programs_get_the_original_asserts_verdict(sandbox, benches, name, tid, body, right):
    bench, exp = benches[name]
    p = bench.by_id[tid]
    program = _program(bench, p, body)
    diff = score_program(bench, p, program, sandbox, exp, RULE)
    asserts = run_asserts(sandbox, program, p.tests, 10.0)
    assert asserts.passed == right, asserts  # the hand label agrees with the original tests...
    assert (diff["base"] == "pass") == right, diff  # ...and so does the differential verdict


def test_test_split_keeps_program_out_of_the_checker(benches):
    he, _ = benches["humaneval"]
    spec = ReplaySpec.from_problem(he.by_id["HumanEval/32"])
    # HumanEval: check() and the prompt's helpers (poly) run in the checker; only the entry point is a call
    assert spec.proxies == ("find_zero",) and "def poly" in spec.preamble and spec.setup == ""
    mb, _ = benches["mbpp"]
    spec = ReplaySpec.from_problem(mb.by_id["Mbpp/367"])
    # MBPP setup code builds trees from the program's own Node class: it runs in the tested process
    assert spec.proxies == ("is_tree_balanced",) and spec.refs == ("root", "root1", "root2")
    assert "Node(1)" in spec.setup and "Node" not in spec.body
