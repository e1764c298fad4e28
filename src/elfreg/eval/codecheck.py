"""Run a program against a problem's tests in the sandbox (spec §6).

* assert tests (HumanEval, MBPP-500): pass iff the runner reports success with the run's secret token;
  wall limit max(min_time_s, factor x the reference program's time), capped per sample.
* differential tests (HumanEval+, MBPP+): per-input limit max(min_time_s, factor x reference time of
  that input) (EvalPlus' rule), outputs compared by the harness with :func:`oracle.outputs_match`;
  the run stops at the first mismatch; total time is capped per sample.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ._child import encode_text
from .benchmark import Benchmark, Problem
from .oracle import outputs_match
from .sandbox import Sandbox

CACHE_FORMAT = "v2"  # bump when the cached record layout changes
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


def run_asserts(sandbox: Sandbox, program: str, tests: str, time_limit_s: float) -> CheckResult:
    """Assert-style tests: the program and the tests in one namespace."""
    res = sandbox.run({"mode": "asserts", "program": program, "tests": tests}, deadline_s=time_limit_s)
    last = res.records[-1] if res.records else {}
    if last.get("status") == "pass" and last.get("token_ok"):
        return CheckResult("pass")
    if res.timed_out:
        return CheckResult("timeout", f"exceeded {time_limit_s:.1f}s")
    if res.overflow:
        return CheckResult("fail", "result channel overflow")
    if last.get("status") == "fail":
        return CheckResult("fail", f"{last.get('error')}: {last.get('msg', '')}"[:300])
    return CheckResult("fail", f"no verdict (exit code {res.returncode})")


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
    last = res.records[-1] if res.records else {}
    if last.get("status") == "done" and last.get("token_ok") and len(verdict.get("seen", ())) == len(inputs):
        return CheckResult("pass")
    if res.timed_out:
        return CheckResult("timeout", f"no result within the limit after {len(verdict.get('seen', ()))} inputs")
    if last.get("status") == "fail":
        return CheckResult("fail", f"{last.get('error')}: {last.get('msg', '')}"[:300])
    return CheckResult("fail", f"incomplete run (exit code {res.returncode})")


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
        """Fill :attr:`table` (``task_id -> {"base": [...], "plus": [...], "ref_time": s}``) for ``only``
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
        if p.tests is not None:  # assert tests: time the reference program
            import time

            t0 = time.monotonic()
            r = run_asserts(self.sandbox, p.reference, p.tests, 300.0)
            if not r.passed:
                raise RuntimeError(f"{self.benchmark.name} {p.task_id}: reference solution fails its tests: {r.detail}")
            row["ref_time"] = time.monotonic() - t0
        for split, inputs in (("base", p.base_inputs), ("plus", p.plus_inputs)):
            if inputs is None:
                continue
            row[split] = self._reference_outputs(p, inputs) if inputs else []
        return row

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
