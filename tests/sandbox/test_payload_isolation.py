"""No payload but its own reaches a tested program (issue 19): not the reference solution, not the tests and their
expected values, not the outputs handed to the checker, not another sample's program — in its memory (inherited
or freed), file descriptors, ``/proc``, environment, files, keyrings or IPC.

Each benchmark is scored end to end (``score_completions``) on one task (two in the slow variants), once with a
cold expected-output cache (the reference runs in the same run) and once warm, with 1 or 2 workers, through the
fork server (the default as root) and, in two slow variants, a fresh interpreter per program (``bwrap``). Per task, in
this order: a *sibling* (correct, leaves its program everywhere it can), a wrong program whose outputs carry a
needle (they go to the checker on the original-test benchmarks), a *scraper* (answers correctly only if it found a
needle: the task's reference, tests, checker input, or any sibling's program) and the *control* (plants its own
needle in every channel and answers correctly only if the search found it in each: the search is not blind). The
needles are planted in the reference solutions and tests of this run's copy of the benchmark. With the fork server
of the earlier design (the template read every payload) the scrapers pass: the test was checked against it.
"""

import copy
import json
import os
import shutil

import pytest

from elfreg.eval.completions import Completion
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions
from elfreg.sandbox.codecheck import TimeRule

from ._adversary import needle, scraper, sibling
from ._isolation import isolated_sandbox

TASKS = {
    "humaneval": ["HumanEval/0", "HumanEval/4"],
    "humaneval_plus": ["HumanEval/0", "HumanEval/4"],
    "mbpp": ["Mbpp/11", "Mbpp/17"],
    "mbpp_plus": ["Mbpp/2", "Mbpp/3"],
}
RULE = TimeRule(min_time_s=10.0, sample_cap_s=60.0)  # a scraper's first call searches for seconds
ROLES = ("sibling", "wrong", "scraper", "control")


def _planted(name: str, tasks: int):
    """This run's copy of ``name`` on its first ``tasks`` tasks, with needles in the references and the tests."""
    bench = copy.deepcopy(load_benchmark(name))
    bench.problems = [p for p in bench.problems if p.task_id in TASKS[name][:tasks]]
    bench.by_id = {p.task_id: p for p in bench.problems}
    secrets = {}
    for p in bench.problems:
        ref, test, out, sib = needle("REF"), needle("TEST"), needle("OUT"), needle("SIB")
        original = p.reference
        p.reference = f"{p.reference}\n_REFERENCE_MARK = {ref!r}\n"
        if p.tests is not None:
            p.tests = f"{p.tests}\nassert {test!r} != ''\n"
        secrets[p.task_id] = {"ref": ref, "test": test, "out": out, "sib": sib, "correct": original}
    return bench, secrets


def _samples(bench, secrets) -> list[Completion]:
    every_sibling = [s["sib"] for s in secrets.values()]
    comps, line = [], 0
    for p in bench.problems:
        s = secrets[p.task_id]
        head = p.extra.get("preamble", "")
        wanted = [s["ref"], s["test"], s["out"], *every_sibling]
        programs = {
            "sibling": sibling(p.entry_point, s["correct"], s["sib"]),
            "wrong": f"{head}\ndef {p.entry_point}(*args, **kwargs):\n    return {s['out']!r}\n",
            "scraper": head + scraper(p.entry_point, wanted, s["correct"]),
            "control": head + scraper(p.entry_point, wanted, s["correct"], plant=needle("CTRL")),
        }
        for k, role in enumerate(ROLES):
            line += 1
            comps.append(Completion(p.task_id, k, programs[role], line, "solution"))
    return comps


def _verdicts(bench, secrets, workers: int, cache, out, isolation: str) -> dict:
    opts = ScoreOptions(workers=workers, cache_dir=str(cache), allow_subset=True, progress=False, time_rule=RULE)
    with isolated_sandbox(memory_bytes=2 << 30, isolation=isolation) as sb:
        summary = score_completions(bench, _samples(bench, secrets), out / "results.jsonl", opts, sb)
    assert summary["isolated"] and summary["error_samples"] == 0, summary
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {(r["task_id"], ROLES[r["sample"]]): r["noalias"] for r in rows}


def _passed(v: dict) -> bool:
    return v["base"] == "pass" and v.get("plus", "pass") == "pass"


def _slow(*args):
    return pytest.param(*args, marks=pytest.mark.slow)


@pytest.mark.parametrize("name,workers,tasks,isolation", [
    ("humaneval", 1, 1, "auto"), ("humaneval_plus", 2, 1, "auto"), ("mbpp", 2, 1, "auto"), ("mbpp_plus", 1, 1, "auto"),
    _slow("humaneval", 2, 2, "auto"), _slow("humaneval_plus", 1, 2, "auto"), _slow("mbpp", 1, 2, "auto"),
    _slow("mbpp_plus", 2, 2, "auto"),
    _slow("humaneval", 1, 1, "bwrap"), _slow("mbpp_plus", 2, 1, "bwrap"),  # a fresh interpreter per program
])
def test_no_program_reads_an_answer_key_or_a_sibling(name, workers, tasks, isolation, tmp_path):
    if isolation == "bwrap" and shutil.which(os.environ.get("ELFREG_BWRAP", "bwrap")) is None:
        pytest.skip("bwrap not installed: the fresh-interpreter bwrap path cannot run here")
    bench, secrets = _planted(name, tasks)
    cache = tmp_path / "cache"
    for run in ("cold", "warm"):  # cold: the references run in this very run; warm: only the checker does
        got = _verdicts(bench, secrets, workers, cache, tmp_path / run, isolation)
        for p in bench.problems:
            verdict = {role: got[(p.task_id, role)] for role in ROLES}
            assert _passed(verdict["sibling"]), (run, verdict)  # it is correct (and it tried to leak)
            assert not _passed(verdict["wrong"]), (run, verdict)
            assert _passed(verdict["control"]), (run, "the search is blind", verdict)
            assert not _passed(verdict["scraper"]), (run, "found an answer key or a sibling", verdict)
