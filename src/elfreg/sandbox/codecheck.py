"""Run a program against a problem's tests in the sandbox; every verdict is reached outside it (spec §6).

* original tests (HumanEval ``check``, MBPP asserts), scored differentially: once per task the tests run
  against the reference solution with every call to the program's functions recorded (:class:`ReplaySpec`,
  ``record`` mode, :mod:`.expected`); a tested program then only answers those calls (``calls`` mode: it never
  sees the tests or the expected values), and the original tests are replayed against its outputs, decoded to
  builtin values only, in a separate checker process that runs no program code (``check`` mode). Outputs
  identical to the reference's pass without the replay (the reference's replay passed on exactly those values).
  Wall limit max(min_time_s, factor x the reference's time), capped per sample, as the asserts had.
* differential tests (HumanEval+, MBPP+): per-input limit max(min_time_s, factor x the reference's time for
  that input) (EvalPlus' rule), outputs compared by the harness with :func:`.oracle.outputs_match`; the run stops
  at the first mismatch; each test set's time is capped per sample. A program's test sets (base, then plus) run
  in one process, as one stream of inputs. Loading (until ``ready``) has a limit of its own by the same rule,
  from the reference's load time: a program cannot compute every answer before ``ready``, out of the clocks of
  the inputs.

Time is the harness's: a limit runs from the arrival of the previous record (the program's ``ready``, then each
output) on the harness's clock, and the harness kills the run when it passes; nothing the program reports about
time is read. A program whose processes the kernel killed for want of memory (its memory cgroup, :mod:`.memcg`)
fails with that reason, whatever it wrote before. Verdicts: ``pass``, ``fail``, ``timeout``, and ``error`` when the
program broke the record protocol (:mod:`.records`), with a plain-language detail.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import marshal
from dataclasses import dataclass

from .inside.codec import decode_text, encode_text
from .oracle import SPECIAL_ORACLES, outputs_match
from .records import RecordStream, one_line
from .sandbox import Sandbox


@dataclass
class TimeRule:
    """EvalPlus time rule: limit = max(min_time_s, factor * reference time); each test set capped at sample_cap_s."""

    min_time_s: float = 4.0
    factor: float = 4.0
    sample_cap_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("min_time_s", "factor", "sample_cap_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TimeRule.{name} must be positive, got {getattr(self, name)!r}")

    def limit(self, ref_s: float) -> float:
        return max(self.min_time_s, self.factor * ref_s)


@dataclass
class CheckResult:
    """Outcome of one program on one test set: ``status`` is pass/fail/timeout/error (or skipped)."""

    status: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def _error(stream: RecordStream) -> CheckResult:
    return CheckResult("error", f"the program broke the result protocol: {stream.violation}")


def run_asserts(sandbox: Sandbox, program: str, tests: str, time_limit_s: float) -> CheckResult:
    """Assert-style tests, the program and the tests in one namespace (the sandbox's probe and the tests'
    yardstick; scoring never uses it: a program sharing a process with its tests can forge a pass)."""
    res = sandbox.run({"mode": "asserts", "program": program, "tests": tests}, deadline_s=time_limit_s)
    if res.killed:
        return CheckResult("fail", res.killed)
    if res.stream.passed():
        return CheckResult("pass")
    if res.stream.violation:
        return _error(res.stream)
    if res.timed_out:
        return CheckResult("timeout", f"exceeded {time_limit_s:.1f}s")
    if res.stream.last.get("status") == "fail":
        return CheckResult("fail", res.stream.failure())
    return CheckResult("fail", f"no verdict (exit code {res.returncode})")


class OutputStream(RecordStream):
    """The records of a ``calls``/``io`` run: ``ready``, then call i's output for i = 0, 1, ... in order.

    ``tails[i]`` is the reference's output record for call i after its ``{"i":i,`` (or None): an identical line
    is taken without parsing. ``limits[i]`` (optional) is call i's time limit from the previous record's arrival;
    ``load_limit`` (optional) the time from the run's start to ``ready``. :meth:`output` judges each output as it
    comes."""

    def __init__(self, tails: list, limits: list[float] | None = None, load_limit: float | None = None) -> None:
        super().__init__("")
        self.tails, self.limits, self.load_limit = tails, limits, load_limit
        self.n = len(tails)
        self.got: list[dict] = []  # call i's output fields (v/sha/n/error), in order
        self.same: list[bool] = []  # call i's output is the reference's
        self.clock: float | None = None  # arrival of the last record (the clock of the next call starts there)
        self.stopped = ""  # why the stream stopped early, if it did

    def due(self) -> float | None:
        if self.clock is None:
            return None if self.load_limit is None or self.started is None else self.started + self.load_limit
        if self.limits is None or len(self.got) >= self.n:
            return None
        return self.clock + self.limits[len(self.got)]

    def feed(self, line: bytes, now: float) -> bool:
        i = len(self.got)
        t = self.tails[i] if self.clock is not None and i < self.n else None
        if t is not None and line.endswith(t):
            head = b'{"i":%d,' % i
            if len(line) == len(head) + len(t) and line.startswith(head):
                self.got.append({})
                self.same.append(True)
                self.clock = now
                return self.output(i, None, now)
        return super().feed(line, now)

    def accept(self, rec: dict, now: float) -> bool:
        i = len(self.got)
        status = rec.get("status")
        if status == "ready":
            if self.clock is not None:
                return self.violate("the program reported 'ready' twice")
            self.clock = now
            return False
        if status == "fail" and self.clock is None:
            return True  # the program failed to load: its own report is the detail
        if status is not None:
            return self.violate(f"the program reported {status!r} after {i} of {self.n} outputs")
        if self.clock is None:
            return self.violate("the program wrote an output before 'ready'")
        if rec["i"] != i:
            return self.violate(f"the program wrote output {rec['i']} where output {i} was due")
        if i >= self.n:
            return self.violate(f"the program wrote more than the {self.n} outputs asked for")
        self.got.append({k: rec[k] for k in ("v", "sha", "n", "error") if k in rec})
        self.same.append(False)
        self.clock = now
        return self.output(i, self.got[i], now)

    def output(self, i: int, rec: dict | None, now: float) -> bool:
        """Output ``i`` arrived (``rec`` None: identical to the reference's); True ends the run."""
        if rec is not None and "error" in rec:
            self.stopped = f"call {i} raised {one_line(rec['error'], 100)}"
            return True
        return i + 1 == self.n


def tail(exp: dict) -> bytes | None:
    """The runner's record of an output equal to the expected record ``exp``, after its ``{"i":N,``."""
    if "v" in exp:
        return b'"v":%s}' % json.dumps(exp["v"]).encode()
    if "sha" in exp:
        return b'"sha":"%s","n":%d}' % (exp["sha"].encode(), exp["n"])
    return None


@dataclass(frozen=True)
class ReplaySpec:
    """How a problem's original tests split between the checker and the tested process.

    ``preamble`` (HumanEval: the prompt, with the helpers such as ``poly`` the tests use) and ``body``
    run in the checker; ``setup`` (MBPP ``test_setup_code`` statements) runs in the tested process after
    the program; ``refs`` are the names ``setup`` binds (passed to calls by name); ``proxies`` are the
    program's functions the tests call (HumanEval: the entry point, handed to ``check``).
    """

    preamble: str
    body: str
    setup: str
    proxies: tuple[str, ...]
    refs: tuple[str, ...]

    @classmethod
    def from_problem(cls, p) -> "ReplaySpec":
        """HumanEval style (the tests define ``check``): all of it runs in the checker, on the prompt;
        MBPP style (top-level asserts): non-assert statements are setup, names called by the asserts are
        the program's."""
        return _replay_spec(p.tests or "", p.entry_point or "", p.extra.get("preamble", ""))

    def payload(self, mode: str) -> dict:
        return {"mode": mode, "preamble": self.preamble, "body": self.body, "setup": self.setup,
                "proxies": list(self.proxies), "refs": list(self.refs)}

    def calls_payload(self, program: str, calls_text: str) -> dict:
        """The tested side: ``program`` (then ``setup``) answers the recorded calls (:func:`encode_calls`)."""
        return {"mode": "calls", "program": program, "setup": self.setup, "calls": calls_text}


@functools.lru_cache(maxsize=None)
def _replay_spec(tests: str, entry: str, preamble: str) -> ReplaySpec:
    # Cached: every scored program of a task needs the same split, and parsing the tests is not free.
    mod = ast.parse(tests)
    if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for s in mod.body):
        return ReplaySpec(preamble, tests, "", (entry,), ())
    seg = lambda s: ast.get_source_segment(tests, s)  # noqa: E731
    imports = [s for s in mod.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    setup = [s for s in mod.body if not isinstance(s, (ast.Assert, ast.Import, ast.ImportFrom))]
    asserts = [s for s in mod.body if isinstance(s, ast.Assert)]
    refs = sorted({t.id for s in setup for t in ast.walk(s) if isinstance(t, ast.Name)
                   and isinstance(t.ctx, ast.Store)})
    called = {n.func.id for s in asserts for n in ast.walk(s)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    bound = set(refs) | {(a.asname or a.name).split(".")[0] for s in imports for a in s.names}
    proxies = [entry] + sorted(called - bound - set(dir(builtins)) - {entry})
    return ReplaySpec(preamble + "\n" + "\n".join(map(seg, imports)),
                      "\n".join(map(seg, asserts)) + "\n", "\n".join(map(seg, setup)) + "\n", tuple(proxies),
                      tuple(refs))


def encode_calls(calls: list) -> str:
    """``[[name, args_text, kwargs_text], ...]`` as the ``calls`` payload text (arguments re-embedded)."""
    return "[" + ",".join("[%s,%s,%s]" % (json.dumps(f), a, k) for f, a, k in calls) + "]"


def run_tests(sandbox: Sandbox, program: str, tests, rule: TimeRule) -> CheckResult:
    """The original tests, differentially: ``tests`` is the task's :class:`.expected.OriginalTests`."""
    n = len(tests.calls)
    limit = min(rule.limit(tests.ref_time), rule.sample_cap_s)
    stream = OutputStream(tests.tails)
    res = sandbox.run(tests.spec.calls_payload(program, tests.calls_text), deadline_s=limit, stream=stream)
    if res.killed:
        return CheckResult("fail", res.killed)
    if stream.violation:
        return _error(stream)
    if stream.stopped:
        return CheckResult("fail", stream.stopped)
    if len(stream.got) < n:
        if res.timed_out:
            return CheckResult("timeout", f"exceeded {limit:.1f}s after {len(stream.got)} of {n} calls")
        if stream.last.get("status") == "fail":
            return CheckResult("fail", stream.failure())
        return CheckResult("fail", f"the program stopped after {len(stream.got)} of {n} calls "
                                   f"(exit code {res.returncode})")
    if all(stream.same):
        return CheckResult("pass")  # the replay of exactly these values passed for the reference
    got = [tests.outputs[i] if same else g for i, (same, g) in enumerate(zip(stream.same, stream.got))]
    chk = dict(tests.spec.payload("check"), program="", calls=tests.calls, outputs=got)
    r = sandbox.run(chk, deadline_s=max(30.0, rule.factor * tests.check_time))
    if r.stream.passed():
        return CheckResult("pass")
    if r.stream.last.get("status") == "fail":
        return CheckResult("fail", r.stream.failure())
    if r.stream.violation:  # the checker runs no program code: this would be a sandbox failure
        return CheckResult("error", f"the checker broke the result protocol: {r.stream.violation}")
    return CheckResult("fail", "the checker gave no verdict" + (" (timeout)" if r.timed_out else ""))


TO_COMPUTE = object()  # IOTests.build: compute this part


@dataclass(frozen=True)
class IOTests:
    """One differential test set of a task, prepared once: inputs (values and payload text), expected records."""

    name: str  # "base" or "plus"
    inputs: list  # the argument lists (the oracle's special cases read them)
    inputs_text: str  # their encoding, without the outer brackets
    expected: list  # per input {"v"|"sha"+"n", "t": the reference's seconds on the harness's clock}
    tails: list  # per input the identical output's record tail (:func:`tail`), or None where the oracle decides
    load: float = 0.0  # the reference's seconds from its run's start to ``ready`` (start, program, these inputs)
    inputs_marshal: bytes | None = None  # :func:`marshal_inputs` of the text

    @classmethod
    def build(cls, name: str, inputs: list, inputs_text: str, expected: list, entry_point: str,
              load: float = 0.0, inputs_marshal: bytes | None | object = TO_COMPUTE) -> "IOTests":
        """``inputs_text``: :func:`encode_inputs` of ``inputs``; ``inputs_marshal``: :func:`marshal_inputs` of it,
        where already computed (the expected-output cache keeps it)."""
        special = entry_point in SPECIAL_ORACLES
        tails = [None if special or _needs_oracle(e) else tail(e) for e in expected]
        data = marshal_inputs(inputs_text) if inputs_marshal is TO_COMPUTE else inputs_marshal
        return cls(name, inputs, inputs_text[1:-1], expected, tails, load, data)


def encode_inputs(inputs: list) -> str:
    """A test set's argument lists as payload text."""
    return encode_text([list(a) for a in inputs])


def marshal_inputs(text: str) -> bytes | None:
    """A test set's payload text (:func:`encode_inputs`) decoded here once and written as ``marshal`` data, which
    the sandboxed runner reads about five times faster than it decodes the text (every run reads its inputs anew);
    None where the runner must decode the text itself: a set (marshal would write its elements in this process's
    iteration order, and a program may iterate a set built in another order differently), a numpy value, or
    anything marshal cannot write."""
    if '"$s"' in text or '"$np"' in text or '"$nd"' in text:  # may match inside a string: then the text, as before
        return None
    try:
        return marshal.dumps(decode_text(text), 4)
    except ValueError:  # an object marshal refuses (a value the codec could not carry), or nesting too deep
        return None


def io_inputs(sets: list[tuple[str, bytes | None]]) -> dict:
    """The ``io`` payload's inputs for test sets given as (text without its brackets, :func:`marshal_inputs`), in
    order: their marshal parts when every set has one, else the text of them all."""
    sets = [(text, data) for text, data in sets if text]
    if all(data is not None for _, data in sets):
        return {"inputs_marshal": [data for _, data in sets]}
    return {"inputs": "[" + ",".join(text for text, _ in sets) + "]"}


def _needs_oracle(exp: dict) -> bool:
    """Identical text is not enough where == is not reflexive: NaN, and values the codec cannot carry."""
    v = exp.get("v", "")
    return '"$f":"nan"' in v or '"$o":' in v


class _IOStream(OutputStream):
    """Outputs of one program over its test sets in order; stops at the first wrong output."""

    def __init__(self, tests: list[IOTests], limits: list[float], dataset: str, problem, load_limit: float) -> None:
        super().__init__([t for s in tests for t in s.tails], limits, load_limit)
        self.expected = [e for s in tests for e in s.expected]
        self.inputs = [a for s in tests for a in s.inputs]
        self.dataset, self.problem = dataset, problem
        self.wrong: int | None = None

    def output(self, i: int, rec: dict | None, now: float) -> bool:
        if rec is not None and not outputs_match(self.dataset, self.problem.entry_point or "", list(self.inputs[i]),
                                                 rec, self.expected[i], self.problem.atol):
            self.wrong = i
            return True
        return i + 1 == self.n


def run_io(sandbox: Sandbox, program: str, problem, dataset: str, tests: list[IOTests],
           rule: TimeRule) -> dict[str, CheckResult]:
    """Differential tests: the test sets ``tests`` (base, then plus) as one run; a verdict per set. A set after a
    failing one is ``skipped``; a protocol violation makes every set ``error``."""
    limits = [rule.limit(e["t"]) for s in tests for e in s.expected]
    sizes = [len(s.expected) for s in tests]
    starts = [sum(sizes[:k]) for k in range(len(tests))]
    if not limits:
        return {s.name: CheckResult("pass") for s in tests}
    # Loading (start, program, decoding the inputs) gets the time rule's limit on the reference's loads of these
    # sets: answers computed before `ready` (the inputs are in the runner's frames) would escape the inputs' limits.
    load_limit = rule.limit(sum(s.load for s in tests))
    stream = _IOStream(tests, limits, dataset, problem, load_limit)
    # Each test set at most max(sample_cap, factor x its total reference time) (EvalPlus: 60 s; the second term
    # keeps a huge reference within reach on a slow machine), and never more than its inputs' limits added up;
    # +1 s for loading the program.
    ref = [e["t"] for s in tests for e in s.expected]
    cap = sum(min(max(rule.sample_cap_s, rule.factor * sum(ref[o:o + k])), sum(limits[o:o + k]))
              for o, k in zip(starts, sizes)) + 1.0
    payload = {"mode": "io", "program": program, "entry_point": problem.entry_point,
               **io_inputs([(s.inputs_text, s.inputs_marshal) for s in tests])}
    res = sandbox.run(payload, deadline_s=cap, stream=stream)
    if res.killed:
        return {s.name: CheckResult("fail", res.killed) if k == 0 else CheckResult("skipped")
                for k, s in enumerate(tests)}
    if stream.violation:
        return {s.name: _error(stream) for s in tests}
    i = stream.wrong if stream.wrong is not None else len(stream.got)  # the first input not passed
    if i >= stream.n:
        return {s.name: CheckResult("pass") for s in tests}
    bad = max(k for k, o in enumerate(starts) if o <= i)
    j = i - starts[bad]
    if stream.wrong is not None:
        err = stream.got[i].get("error")
        verdict = CheckResult("fail", f"wrong output on input {j}" + (f" (it raised {one_line(err, 100)})" if err else ""))
    elif res.timed_out and stream.clock is None:
        verdict = CheckResult("timeout", f"loading the program took longer than its limit, {load_limit:.1f}s")
    elif res.timed_out:
        verdict = CheckResult("timeout", f"no output for input {j} within its limit")
    elif stream.last.get("status") == "fail":
        verdict = CheckResult("fail", stream.failure())
    else:
        verdict = CheckResult("fail", f"the program stopped after {j} inputs (exit code {res.returncode})")
    return {s.name: CheckResult("pass") if k < bad else verdict if k == bad else CheckResult("skipped")
            for k, s in enumerate(tests)}
