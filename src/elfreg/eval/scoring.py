"""Score completions against a benchmark; per-problem rows appended as they finish (resumable, spec §6)."""

from __future__ import annotations

import json
import logging
import os
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from queue import SimpleQueue

from tqdm import tqdm

from ..bounds import DAY_S, Range, check_ranges
from ..fingerprint import folder_key, row_ok, sign_row
from ..jsontext import dumps
from ..resources import usable_cpus
from ..sandbox import Sandbox, SandboxError
from ..sandbox.codecheck import TimeRule, run_io, run_tests
from ..sandbox.expected import ExpectedOutputs, revoke_isolated_key
from ..sandbox.oracle import dataset_of
from ..tasks.answers import verdict
from ..tasks.benchmark import Benchmark, Problem
from .codeprep import ALIAS_MODES, ALIAS_RULE, looks_like_solution, prepare_code
from .completions import MAX_COMPLETION_BYTES, Completion, check_max_completion_bytes, unknown_task_id
from .workers import KillablePool, Outcome

log = logging.getLogger(__name__)

# Seconds of text work per sample (answer extraction, math-verify, code preparation): MATH-500's slowest gold answer
# takes 0.3 s of a 2-core machine's time, and 1.7 s when it is loaded 8 times over (benchmarks/bench_gold_text_time.py),
# so under 1 s correct answers fail on timing alone; past a day a limit is a hang, not a limit.
TEXT_LIMIT = Range(1, DAY_S, unit="s")
# The code time rule (elfreg.sandbox.codecheck.TimeRule): limit = max(min_time, factor x the reference solution's
# time), each test set capped. A floor under 0.1 s is within a busy scheduler's time slices; a factor under 1 times
# out the reference solution itself.
TIME_RULE_RANGES = {"min_time_s": Range(0.1, DAY_S, unit="s"), "factor": Range(1, 1000),
                    "sample_cap_s": Range(0.1, DAY_S, unit="s")}


def workers_range() -> Range:
    """Scoring workers: at most one per CPU this process may use (at least 2, the default); more only share the
    CPUs, and the tested programs' limits are wall-clock."""
    return Range(1, max(2, usable_cpus()), integer=True, why="one per usable CPU")


_LEAST_TEXT_MEMORY = 64 << 20  # below this a worker fails on ordinary samples (math-verify parses need tens of MB)
# what the workers' warm-up runs (textpool.py): a benign sample, so math-verify, the sanitizer's parser and the
# compiled expressions are loaded once, before any worker is forked
_WARM_TEXT, _WARM_GOLD, _WARM_CODE = "The answer is $\\boxed{1}$.", "1", "def f():\n    return 1\n"


@dataclass
class ScoreOptions:
    """Settings recorded in every report."""

    workers: int = 2
    time_rule: TimeRule = field(default_factory=TimeRule)
    cache_dir: str | None = None
    allow_subset: bool = False
    math_timeout_s: int = 5
    # per sample, wall clock: answer extraction, math-verify (its own three timeouts fit inside), code preparation
    text_limit_s: float = 30.0
    progress: bool = True
    ks: tuple[int, ...] | None = None  # reported pass@k; None = the paper's ks that fit the samples (protocol.py)
    alias_helpers: bool = False  # code: also score elfreg's helper-tolerant alias reading, in its own column
    # UTF-8 bytes of the largest sample scored: a larger one is wrong (code: fail) with no text work, saying why
    max_completion_bytes: int = MAX_COMPLETION_BYTES
    # what each text worker may allocate beyond what it inherits (RLIMIT_DATA, textpool.py); a sample past it is
    # wrong, saying why. 1 GiB: a real sample needs a few MB; None: no limit
    text_memory_bytes: int | None = 1 << 30

    @property
    def code_modes(self) -> tuple[str, ...]:
        """The code scoring modes of a row (codeprep.ALIAS_MODES): no alias, the paper's rule, [helper-tolerant]."""
        return tuple(m for m in ALIAS_MODES if m != "alias_helpers" or self.alias_helpers)

    def __post_init__(self) -> None:
        workers_range().check(self.workers, "ScoreOptions.workers")
        TEXT_LIMIT.check(self.text_limit_s, "ScoreOptions.text_limit_s")
        Range(1, DAY_S, integer=True, unit="s").check(self.math_timeout_s, "ScoreOptions.math_timeout_s")
        rule = self.time_rule
        check_ranges(rule, TIME_RULE_RANGES, "ScoreOptions.time_rule.")
        if rule.sample_cap_s < rule.min_time_s:
            raise ValueError(f"ScoreOptions.time_rule.sample_cap_s: {rule.sample_cap_s:g} s is below min_time_s "
                             f"{rule.min_time_s:g} s: every test set would be cut before its own floor")
        check_max_completion_bytes(self.max_completion_bytes)
        if self.text_memory_bytes is not None and not self.text_memory_bytes >= _LEAST_TEXT_MEMORY:
            raise ValueError(f"ScoreOptions.text_memory_bytes must be >= {_LEAST_TEXT_MEMORY:,} (64 MiB) or None, "
                             f"got {self.text_memory_bytes}")
        if self.ks is not None:
            from .protocol import validate_ks

            validate_ks(self.ks, None, "ScoreOptions.ks")


class ResultsFile:
    """Per-problem results JSONL: one line per (task_id, sample), each appended with one write() and signed with the
    output folder's key (elfreg.fingerprint).

    On reading, a row that fails its check (a verdict edited by hand, a row from another run's file) is not reused:
    it is scored again, and the new row supersedes it. A torn last line (a kill mid-write) is cut off with a warning
    and redone; any other line that is not a results row is an error naming file:line, which loses nothing.
    """

    def __init__(self, path: str | Path | None, key: str | None = None) -> None:
        self.path = Path(path) if path else None
        self.rows: dict[tuple[str, int], dict] = {}
        self.key = key
        self._fd = None
        if self.path:
            self.key = key or folder_key(self.path.parent)
            if self.path.exists():
                self._read()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _read(self) -> None:
        # here, not at the top: the sampling package loads torch, which scoring never needs (seconds per command)
        from ..sampling.results_io import repair_truncated_tail

        repair_truncated_tail(self.path, "scored again")
        failed: dict[tuple[str, int], int] = {}
        for n, line in enumerate(self.path.read_bytes().split(b"\n")[:-1], start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                k = (row["task_id"], row["sample"])
                hash(k)
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                raise ValueError(f"{self.path}:{n}: not a results row ({type(exc).__name__}); delete that line to "
                                 "score its sample again, or pass --restart") from None
            if row_ok(row, self.key):
                self.rows[k] = row
                failed.pop(k, None)
            elif k not in self.rows:
                failed[k] = n
        if failed:
            lines = ", ".join(map(str, sorted(failed.values())[:5]))
            warnings.warn(f"{self.path}: {len(failed)} rows fail their integrity check (line {lines}"
                          f"{', ...' if len(failed) > 5 else ''}: edited by hand, or from another run); "
                          "they are scored again", stacklevel=3)

    def add(self, row: dict) -> None:
        if self.key is not None:
            row = sign_row(row, self.key)
        self.rows[(row["task_id"], row["sample"])] = row
        if self._fd is not None:
            os.write(self._fd, (dumps(row) + "\n").encode("utf-8"))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _text_row(bench: Benchmark, c: Completion, out: Outcome) -> dict:
    """The results row of a text sample; a sample whose work failed or overran is wrong, and says why."""
    row = {"task_id": c.task_id, "sample": c.sample, "gold": bench.by_id[c.task_id].answer}
    if out.error is not None:
        return {**row, **({} if bench.kind == "math" else {"pred": None}), "correct": False, "detail": out.error}
    return {**row, **out.value}


def _prepare(modes: tuple[str, ...], sample: str, entry_point: str, keep_all: bool, preamble: str, fmt: str,
             prompt: str) -> dict:
    """Each mode's ``(program, aliased)`` (or why the sanitizer gave none) and ``looks_like_solution``'s reason;
    runs in a text pool worker (textpool.py)."""
    programs: dict[str, tuple[str, bool] | str] = {}
    for mode in modes:
        try:
            programs[mode] = prepare_code(sample, entry_point, alias=mode != "noalias", keep_all=keep_all,
                                          preamble=preamble, fmt=fmt, prompt=prompt, helpers=mode == "alias_helpers")
        except Exception as e:  # noqa: BLE001 - the sanitizer choking on garbage is a failed sample
            programs[mode] = f"sanitizer: {type(e).__name__}"
    why = looks_like_solution(sample, entry_point) if fmt == "completion" else None
    return {"programs": programs, "looks_like_solution": why}


def _prepare_task(c: Completion, p: Problem) -> tuple[Completion, str, str, tuple]:
    """The text pool task (key, step, function, arguments) that prepares ``c``'s programs."""
    return (c, "code preparation", "prepare", (c.completion, p.entry_point or "", bool(p.extra.get("keep_all")),
                                               p.extra.get("preamble", ""), c.format, p.extra.get("code_prompt", "")))


def score_program(bench: Benchmark, p: Problem, program: str, sandbox: Sandbox, expected: ExpectedOutputs,
                  rule: TimeRule) -> dict:
    """Verdicts of one prepared program on ``p``'s test sets: ``{"base", ["plus"], "detail"}``.

    ``expected`` holds ``p``'s reference outputs. Every verdict is reached outside the tested process."""
    if p.tests is not None:
        r = run_tests(sandbox, program, expected.original(p), rule)
        return {"base": r.status, "detail": r.detail}
    splits = ("base", "plus") if "plus" in bench.code_tests else ("base",)
    # plus = base and plus inputs (EvalPlus); plus is skipped when base fails
    res = run_io(sandbox, program, p, dataset_of(bench.name), expected.io(p, splits), rule)
    return {**{s: r.status for s, r in res.items()},
            "detail": next((r.detail for r in res.values() if r.detail), "")}


def _score_code(bench: Benchmark, p: Problem, c: Completion, prepared: Outcome, sandbox: Sandbox,
                expected: ExpectedOutputs, rule: TimeRule, modes: tuple[str, ...] = ("noalias", "alias")) -> dict:
    """The results row of a code sample from its :func:`_prepare` outcome: each mode's program run on the tests."""
    if prepared.error is not None:  # preparing it failed or overran: every mode fails, saying why
        return _failed_code_row(c, prepared.error, modes)
    row: dict = {"task_id": c.task_id, "sample": c.sample, "alias_rule": ALIAS_RULE}
    cache: dict[str, dict] = {}
    for mode in modes:
        got = prepared.value["programs"][mode]
        if isinstance(got, str):
            row[mode] = {"base": "fail", "detail": got}
            continue
        program, aliased = got
        if mode != "noalias":
            row["aliased" if mode == "alias" else "aliased_helpers"] = aliased
        if program in cache:
            row[mode] = cache[program]
            continue
        try:
            res = score_program(bench, p, program, sandbox, expected, rule)
        except SandboxError as e:  # the sandbox failed, not the program: this sample only, the run goes on
            res = {"base": "error", "detail": f"the sandbox failed: {e}"}
        except Exception:  # noqa: BLE001 - a harness bug must not stop the run or block its resume
            log.exception("scoring %s sample %s failed", c.task_id, c.sample)
            res = {"base": "error", "detail": "the harness failed on this sample (the log has the traceback)"}
        cache[program] = res
        row[mode] = res
    why = prepared.value["looks_like_solution"]
    if why:  # a whole answer saved as a continuation of the prompt: say so where the verdict is read
        row["looks_like_solution"] = why
        note = (f"this `completion` looks like a self-contained `solution` ({why}); it was scored as prompt + "
                "completion: save whole programs in the `solution` field")
        for mode in modes:
            if row[mode].get("base") != "pass" or row[mode].get("plus") not in (None, "pass"):
                row[mode] = dict(row[mode], detail=f"{note}; {row[mode].get('detail', '')}".rstrip("; "))
    return row


def _failed_code_row(c: Completion, why: str, modes: tuple[str, ...]) -> dict:
    """The results row of a code sample that was not tested: every mode fails, saying ``why``."""
    return {"task_id": c.task_id, "sample": c.sample, "alias_rule": ALIAS_RULE,
            **{mode: {"base": "fail", "detail": why} for mode in modes}}


def _over_size(c: Completion, limit: int) -> str | None:
    """Why ``c`` is not read at all (its UTF-8 size is over ``limit``), or None."""
    size = len(c.completion.encode("utf-8", "surrogatepass"))  # JSON may hold lone surrogates
    return f"not scored: the sample is {size:,} bytes, over --max-completion-bytes {limit:,}" if size > limit \
        else None


def _reusable(row: dict, modes: tuple[str, ...]) -> bool:
    """A code row from an earlier run counts only if scored under today's alias rule in every wanted mode."""
    return row.get("alias_rule") == ALIAS_RULE and all(m in row for m in modes)


_STEPS = {"math": "math-verify", "gsm8k": "answer extraction", "choice": "answer extraction",
          "exact": "answer extraction"}  # how a text benchmark's per-sample work is named in time-limit details


def _score_text_rows(bench: Benchmark, todo: list[Completion], opts: ScoreOptions, results: ResultsFile,
                     bar: tqdm) -> None:
    """Each text sample's verdict in the text pool, each row written as it finishes."""
    if not todo:  # a resumed run with nothing left: no workers, no warm-up
        return
    tasks = ((c, _STEPS[bench.kind], "verdict", (c.completion, bench.by_id[c.task_id].answer or "")) for c in todo)
    work = {"verdict": partial(verdict, bench.kind, bench.answer_extractor, opts.math_timeout_s)}
    warm = partial(work["verdict"], _WARM_TEXT, _WARM_GOLD)
    with KillablePool(work, opts.workers, opts.text_limit_s, opts.text_memory_bytes, warm) as pool:
        for c, out in pool.run(tasks):
            results.add(_text_row(bench, c, out))
            bar.update()


def longest_first(todo: list[Completion], expected: ExpectedOutputs) -> list[Completion]:
    """``todo`` with the samples of the slowest reference solutions first (otherwise in order): the workers then
    end together, rather than one running a long sample that came last while the others wait."""
    return sorted(todo, key=lambda c: -expected.reference_seconds(c.task_id))


def _score_code_rows(bench: Benchmark, todo: list[Completion], sandbox: Sandbox, expected: ExpectedOutputs,
                     opts: ScoreOptions, results: ResultsFile, isolation: str | None, bar: tqdm) -> None:
    """Prepare each sample in the text pool, test its programs in ``opts.workers`` threads; write each row as it
    finishes, so a slow sample holds back no other."""
    if not todo:
        return
    # Finished rows come back through a queue (each future's callback puts it there), so the loop does no work per
    # sample still running: polling every running future after each submission was quadratic in the samples
    # (656 HumanEval+ samples: about a second of the harness's CPU beside the two workers).
    finished: SimpleQueue[Future] = SimpleQueue()
    pending = 0

    def write(f: Future) -> None:
        results.add(dict(f.result(), isolation=isolation))  # each row says how it ran
        bar.update()

    work = {"prepare": partial(_prepare, opts.code_modes)}
    warm = partial(work["prepare"], _WARM_CODE, "f", False, "", "solution", "")
    with KillablePool(work, opts.workers, opts.text_limit_s, opts.text_memory_bytes, warm) as pool, \
            ThreadPoolExecutor(opts.workers) as ex:
        for c, prepared in pool.run(_prepare_task(c, bench.by_id[c.task_id]) for c in todo):
            ex.submit(_score_code, bench, bench.by_id[c.task_id], c, prepared, sandbox, expected, opts.time_rule,
                      opts.code_modes).add_done_callback(finished.put)
            pending += 1
            while not finished.empty():
                write(finished.get())
                pending -= 1
        for _ in range(pending):
            write(finished.get())


def score_completions(bench: Benchmark, completions: list[Completion], results_path: str | Path | None = None,
                      opts: ScoreOptions | None = None, sandbox: Sandbox | None = None) -> dict:
    """Score every completion (skipping those already in ``results_path``); returns the summary dict."""
    from .report import build_summary

    opts = opts or ScoreOptions()
    unknown = [c for c in completions if c.task_id not in bench.by_id]
    if unknown:
        raise ValueError(f"line {unknown[0].line}: {bench.name}: {unknown_task_id(unknown[0].task_id, bench.by_id)}")
    results = ResultsFile(results_path)
    todo = [c for c in completions if (c.task_id, c.sample) not in results.rows
            or bench.kind == "code" and not _reusable(results.rows[(c.task_id, c.sample)], opts.code_modes)]
    sized = [(c, _over_size(c, opts.max_completion_bytes)) for c in todo]  # before any text work
    too_big = [(c, why) for c, why in sized if why]
    todo = [c for c, why in sized if not why]
    isolation = None
    bar = tqdm(total=len(todo) + len(too_big), disable=not opts.progress, desc=f"scoring {bench.name}")
    try:
        if bench.kind == "code":
            sandbox = sandbox or Sandbox()
            isolation = sandbox.isolation.describe()
            for c, why in too_big:  # never prepared, never run
                results.add(dict(_failed_code_row(c, why, opts.code_modes), isolation=isolation))
                bar.update()
            expected = ExpectedOutputs(bench, sandbox, opts.cache_dir, opts.workers).load_or_compute(
                opts.progress, only={c.task_id for c in todo})
            _score_code_rows(bench, longest_first(todo, expected), sandbox, expected, opts, results, isolation, bar)
        else:
            for c, why in too_big:
                results.add(_text_row(bench, c, Outcome(error=why)))
                bar.update()
            _score_text_rows(bench, todo, opts, results, bar)
    finally:
        bar.close()
        results.close()
        if sandbox is not None and not sandbox.isolation.isolated and not sandbox.isolation.uid_drop:
            revoke_isolated_key(opts.cache_dir)  # this run's programs could read it (elfreg.sandbox.expected)
    # in the completions' order: rows are written as they finish, and the summary must not depend on that order
    rows = [results.rows[k] for k in dict.fromkeys((c.task_id, c.sample) for c in completions) if k in results.rows]
    summary = build_summary(bench, rows, opts, isolation)
    if bench.kind == "code":
        # A resumed run may mix rows scored under different isolation: the report names all of them, and
        # ``isolated`` is false as soon as one row ran unisolated (``--isolation none``) or is of unknown provenance.
        seen = sorted({str(r.get("isolation")) for r in rows} | {str(isolation)})
        summary["settings"]["isolation"] = " | ".join(seen)
        summary["isolated"] = all(s.startswith("bwrap") for s in seen)
        summary["error_samples"] = sum(any(r.get(m, {}).get(k) == "error" for m in opts.code_modes
                                           for k in ("base", "plus")) for r in rows)
    summary["settings"]["sample_format"] = sorted({c.format for c in completions})
    summary["data_version"] = bench.data_version  # None: not byte-identical to the shipped copy
    return summary
