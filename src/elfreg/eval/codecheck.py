"""Run a program against a problem's tests in the sandbox (spec §6).

* original tests (HumanEval ``check``, MBPP asserts), scored differentially so that no verdict rests on
  the tested process: once per task the tests run against the reference solution with every call to the
  program's functions recorded (:class:`ReplaySpec`, ``record`` mode); a tested program then only answers
  those calls (``calls`` mode; it never sees the tests or the expected values), and the original tests
  are replayed against its outputs, decoded to builtin values only, in a separate checker process that
  runs no program code (``check`` mode). Outputs identical to the reference's pass without the replay
  (the reference's replay passed on exactly those values). Wall limit max(min_time_s, factor x the
  reference's time), capped per sample, as the asserts had.
* differential tests (HumanEval+, MBPP+): per-input limit max(min_time_s, factor x reference time of
  that input) (EvalPlus' rule), outputs compared by the harness with :func:`oracle.outputs_match`;
  the run stops at the first mismatch; total time is capped per sample.
"""

from __future__ import annotations

import ast
import functools
import builtins
import gzip
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ._child import encode_text
from .benchmark import Benchmark, Problem
from .oracle import outputs_match
from .sandbox import Sandbox

CACHE_FORMAT = "v3"  # bump when the cached record layout changes
DATASET_OF = {"humaneval_plus": "humaneval", "mbpp_plus": "mbpp"}


@dataclass
class TimeRule:
    """EvalPlus time rule: limit = max(min_time_s, factor * reference time); total capped at sample_cap_s."""

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
    """Outcome of one program on one test set: ``status`` is pass/fail/timeout/error."""

    status: str
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def _last_record(res) -> dict:
    return res.records[-1] if res.records else {}


def _passed(last: dict) -> bool:
    """The runner's closing record says pass and carries the run's token (an early exit or a crash never does)."""
    return last.get("status") == "pass" and bool(last.get("token_ok"))


def run_asserts(sandbox: Sandbox, program: str, tests: str, time_limit_s: float) -> CheckResult:
    """Assert-style tests, the program and the tests in one namespace (the sandbox's probe and the tests'
    yardstick; scoring never uses it: a program sharing a process with its tests can forge a pass)."""
    res = sandbox.run({"mode": "asserts", "program": program, "tests": tests}, deadline_s=time_limit_s)
    last = _last_record(res)
    if _passed(last):
        return CheckResult("pass")
    if res.timed_out:
        return CheckResult("timeout", f"exceeded {time_limit_s:.1f}s")
    if res.overflow:
        return CheckResult("fail", "result channel overflow")
    if last.get("status") == "fail":
        return CheckResult("fail", f"{last.get('error')}: {last.get('msg', '')}"[:300])
    return CheckResult("fail", f"no verdict (exit code {res.returncode})")


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
    def from_problem(cls, p: Problem) -> "ReplaySpec":
        """HumanEval style (the tests define ``check``): all of it runs in the checker, on the prompt;
        MBPP style (top-level asserts): non-assert statements are setup, names called by the asserts are
        the program's."""
        return _replay_spec(p.tests or "", p.entry_point or "", p.extra.get("preamble", ""))

    def payload(self, mode: str) -> dict:
        return {"mode": mode, "preamble": self.preamble, "body": self.body, "setup": self.setup,
                "proxies": list(self.proxies), "refs": list(self.refs)}

    def calls_payload(self, program: str, calls: list, time_limit_s: float) -> dict:
        """The tested side: ``program`` (then ``setup``) answers the recorded ``calls``."""
        return {"mode": "calls", "program": program, "setup": self.setup, "calls": encode_calls(calls),
                "time_limits": [time_limit_s] * len(calls)}


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


def _same_output(out: dict, exp: dict) -> bool:
    """Identical canonical encodings (or digests) of one call's output."""
    if "error" in out or "error" in exp:
        return False
    return all(out.get(k) == exp.get(k) for k in ("v", "sha", "n"))


def run_tests(sandbox: Sandbox, program: str, spec: ReplaySpec, exp: dict, rule: TimeRule) -> CheckResult:
    """The original tests, differentially: ``exp`` = ``{"calls", "outputs", "ref_time", "check_time"}``
    from :class:`ExpectedOutputs`."""
    calls, outputs = exp["calls"], exp["outputs"]
    limit = min(rule.limit(exp["ref_time"]), rule.sample_cap_s)
    res = sandbox.run(spec.calls_payload(program, calls, limit), deadline_s=limit)
    got: dict[int, dict] = {}
    for rec in res.records:
        i = rec.get("i")
        if isinstance(i, int) and 0 <= i < len(calls) and i not in got:
            # Keep only plain fields of the expected types: the checker gets nothing else from the program.
            got[i] = {k: rec[k] for k, typ in (("v", str), ("sha", str), ("n", int), ("error", str))
                      if isinstance(rec.get(k), typ)}
    last = _last_record(res)
    if len(got) < len(calls):
        if res.timed_out:
            return CheckResult("timeout", f"exceeded {limit:.1f}s after {len(got)} of {len(calls)} calls")
        if last.get("status") == "fail":
            return CheckResult("fail", f"{last.get('error')}: {last.get('msg', '')}"[:300])
        return CheckResult("fail", f"no output for call {len(got)} (exit code {res.returncode})")
    if all(_same_output(got[i], outputs[i]) for i in range(len(calls))):
        return CheckResult("pass")  # the replay of exactly these values passed for the reference
    chk = dict(spec.payload("check"), program="", calls=calls, outputs=[got[i] for i in range(len(calls))])
    budget = max(30.0, rule.factor * exp.get("check_time", 0.0))
    r = sandbox.run(chk, deadline_s=budget)
    last = _last_record(r)
    if _passed(last):
        return CheckResult("pass")
    if last.get("status") == "fail":
        return CheckResult("fail", f"{last.get('error')}: {last.get('msg', '')}"[:300])
    return CheckResult("fail", "checker gave no verdict" + (" (timeout)" if r.timed_out else ""))


def run_io(sandbox: Sandbox, program: str, problem: Problem, dataset: str, inputs: list, expected: list,
           rule: TimeRule) -> CheckResult:
    """Differential tests: ``expected[i] = {"v"|"sha"..., "t": reference seconds}``."""
    if not inputs:
        return CheckResult("pass")
    limits = [rule.limit(e["t"]) for e in expected]
    # The wait per record also covers encoding the output (huge for a few MBPP+ tasks): the reference's
    # call+encode wall time "w" scaled by the same factor.
    waits = [max(lim, rule.factor * e.get("w", e["t"])) for lim, e in zip(limits, expected)]
    cap = min(max(rule.sample_cap_s, rule.factor * sum(e.get("w", e["t"]) for e in expected)), sum(waits)) + 2.0
    verdict: dict = {}

    def stop(rec: dict) -> bool:
        i = rec.get("i")
        if not isinstance(i, int) or not 0 <= i < len(inputs):
            verdict["bad"] = f"unexpected record {str(rec)[:100]}"
            return True
        if rec.get("t", 0.0) > limits[i]:
            verdict["bad"] = f"timeout on input {i}"
            return True
        if not outputs_match(dataset, problem.entry_point or "", inputs[i], rec, expected[i], problem.atol):
            verdict["bad"] = f"wrong output on input {i}" + (f" ({rec['error']})" if "error" in rec else "")
            return True
        verdict.setdefault("seen", set()).add(i)
        return False

    payload = {"mode": "io", "program": program, "entry_point": problem.entry_point,
               "inputs": encode_text([list(a) for a in inputs]), "time_limits": limits}
    res = sandbox.run(payload, deadline_s=cap, record_deadlines=waits, stop=stop)
    if "bad" in verdict:
        return CheckResult("timeout" if verdict["bad"].startswith("timeout") else "fail", verdict["bad"])
    last = _last_record(res)
    if last.get("status") == "done" and last.get("token_ok") and len(verdict.get("seen", ())) == len(inputs):
        return CheckResult("pass")
    if res.timed_out:
        return CheckResult("timeout", f"no result within the limit after {len(verdict.get('seen', ()))} inputs")
    if last.get("status") == "fail":
        return CheckResult("fail", f"{last.get('error')}: {last.get('msg', '')}"[:300])
    return CheckResult("fail", f"incomplete run (exit code {res.returncode})")


def encode_calls(calls: list) -> str:
    """``[[name, args_text, kwargs_text], ...]`` as the ``calls`` payload text (arguments re-embedded)."""
    return "[" + ",".join("[%s,%s,%s]" % (json.dumps(f), a, k) for f, a, k in calls) + "]"


class ExpectedOutputs:
    """Reference outputs and times, computed by running the canonical solution in the sandbox.

    Cached as gzip JSONL under ``cache_dir``, keyed by the dataset file's sha256, so repeated runs are fast.
    """

    def __init__(self, benchmark: Benchmark, sandbox: Sandbox, cache_dir: str | Path | None = None,
                 workers: int = 2) -> None:
        self.benchmark, self.sandbox, self.workers = benchmark, sandbox, workers
        root = Path(cache_dir or os.environ.get("ELFREG_CACHE_DIR") or Path.home() / ".cache" / "elfreg" / "eval")
        self.path = root / f"{benchmark.name}-{benchmark.source_sha256[:16]}-expected-{CACHE_FORMAT}.jsonl.gz"
        self.table: dict[str, dict] = {}
        self._lock = threading.Lock()

    def load_or_compute(self, progress: bool = True, only: set[str] | None = None) -> "ExpectedOutputs":
        """Fill :attr:`table` (``task_id -> {"base": [...], "plus": [...]}`` for differential tests,
        ``{"calls", "outputs", "ref_time", "check_time"}`` for original tests) for ``only``
        (default: every problem); newly computed rows are merged into the cache file."""
        if self.path.exists():
            with gzip.open(self.path, "rt", encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    self.table[row.pop("task_id")] = row
        todo = [p for p in self.benchmark.problems if p.task_id not in self.table
                and (only is None or p.task_id in only)]
        if todo:
            from concurrent.futures import ThreadPoolExecutor

            from tqdm import tqdm

            with ThreadPoolExecutor(self.workers) as ex:
                rows = list(tqdm(ex.map(self._compute, todo), total=len(todo), disable=not progress,
                                 desc=f"expected outputs {self.benchmark.name}"))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for p, row in zip(todo, rows):
                self.table[p.task_id] = row
            tmp = self.path.with_suffix(".tmp")
            with gzip.open(tmp, "wt", encoding="utf-8") as f:
                for tid, row in self.table.items():
                    f.write(json.dumps({"task_id": tid, **row}) + "\n")
            os.replace(tmp, self.path)  # atomic: a crash never leaves a half cache
        return self

    def _compute(self, p: Problem) -> dict:
        row: dict = {}
        if p.tests is not None:
            row.update(self._record(p))
        for split, inputs in (("base", p.base_inputs), ("plus", p.plus_inputs)):
            if inputs is None:
                continue
            row[split] = self._reference_outputs(p, inputs) if inputs else []
        return row

    def _record(self, p: Problem) -> dict:
        """Record the original tests' calls on the reference, answer them as a tested program would, and
        check that the replay of those outputs passes (so identical outputs may pass without a replay)."""
        spec = ReplaySpec.from_problem(p)
        fail = f"{self.benchmark.name} {p.task_id}: reference solution"
        res = self.sandbox.run(dict(spec.payload("record"), program=p.reference), deadline_s=300.0)
        last = _last_record(res)
        if not _passed(last):
            raise RuntimeError(f"{fail} fails its tests: {last.get('error')}: {last.get('msg', '')} "
                               f"(timed out: {res.timed_out})")
        calls = [[r["f"], r["a"], r["k"]] for r in res.records if "f" in r]
        t0 = time.monotonic()
        out = self.sandbox.run(spec.calls_payload(p.reference, calls, 300.0), deadline_s=300.0)
        ref_time = time.monotonic() - t0
        outputs = [{k: r[k] for k in ("v", "sha", "n", "error") if k in r} for r in out.records if "i" in r]
        if len(outputs) != len(calls) or any("error" in o for o in outputs):
            raise RuntimeError(f"{fail} fails when its recorded calls are replayed: {out.records[-1:]}")
        t0 = time.monotonic()
        chk = self.sandbox.run(dict(spec.payload("check"), program="", calls=calls, outputs=outputs),
                               deadline_s=300.0)
        last = _last_record(chk)
        if not (_passed(last) and last.get("calls") == len(calls)):
            raise RuntimeError(f"{fail}: the replayed tests fail on its own outputs: {last}")
        return {"calls": calls, "outputs": outputs, "ref_time": ref_time,
                "check_time": time.monotonic() - t0}

    def _reference_outputs(self, p: Problem, inputs: list) -> list:
        payload = {"mode": "io", "program": p.reference, "entry_point": p.entry_point,
                   "inputs": encode_text([list(a) for a in inputs]), "time_limits": [300.0] * len(inputs)}
        res = self.sandbox.run(payload, deadline_s=1800.0, record_deadlines=[300.0] * len(inputs))
        recs = [r for r in res.records if "i" in r]
        bad = [r for r in recs if "error" in r]
        if len(recs) != len(inputs) or bad:
            raise RuntimeError(f"{self.benchmark.name} {p.task_id}: reference solution failed on an input "
                               f"({len(recs)}/{len(inputs)} ran, errors {bad[:1]}, last {res.records[-1:]})")
        return [{k: r[k] for k in ("v", "sha", "n", "t", "w") if k in r} for r in recs]
