"""Hostile samples on the text and preparation side of `eval score` (issue 28): each ends to end on the benchmark
named, bounded in time; before the fixes each crashed the run, took minutes (super-linear regular expressions and
sanitizer), held finished rows back, or logged a whole 10 MB completion."""

import dataclasses
import json
import logging
import re
import sys
import time

import pytest

from elfreg.cli import main
from elfreg.eval.completions import Completion
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions
from elfreg.fingerprint import CHECK_FIELD

from sandbox._isolation import isolated_sandbox

DEEP = "x = " + "-" * 3000 + "1\n"  # compile() raises RecursionError on it


def _rows(path):
    """The rows of a results file, without their integrity check (elfreg.fingerprint)."""
    return [{k: v for k, v in json.loads(line).items() if k != CHECK_FIELD} for line in path.read_text().splitlines()]


def _score(bench, comps, tmp_path, **opts):
    options = ScoreOptions(workers=2, allow_subset=True, progress=False, cache_dir=str(tmp_path / "cache"), **opts)
    sandbox = isolated_sandbox() if bench.kind == "code" else None
    try:
        return score_completions(bench, comps, tmp_path / "r.jsonl", options, sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()


def _body(p):
    """HumanEval's canonical solution as a `completion` (the prompt's continuation)."""
    return p.reference[len(p.extra["code_prompt"]):]


@pytest.mark.timeout(120)
def test_deeply_nested_first_line_is_a_row_and_the_run_resumes_on_humaneval(tmp_path):
    bench = load_benchmark("humaneval")
    p, q = bench.problems[:2]
    comps = [Completion(p.task_id, 0, DEEP + _body(p), 1, "completion"),
             Completion(q.task_id, 0, _body(q), 2, "completion")]
    s = _score(bench, comps, tmp_path)  # before: RecursionError out of looks_like_solution, no rows, no summary
    rows = {r["task_id"]: r for r in _rows(tmp_path / "r.jsonl")}
    assert rows[q.task_id]["noalias"]["base"] == "pass"
    assert rows[p.task_id]["noalias"]["base"] in ("pass", "fail")  # scored, whatever the verdict
    assert s["metrics"]["noalias"]["base"]["problems"] == 2
    again = _score(bench, comps, tmp_path)  # the resume reads both rows and scores nothing again
    assert again["metrics"] == s["metrics"] and len(_rows(tmp_path / "r.jsonl")) == 2


@pytest.mark.timeout(60)
def test_whitespace_after_answer_is_read_in_linear_time_on_mmlu(tmp_path):
    # "answer" + 300 spaces took 45 s before (~n^4); here 20,000 spaces, and the conclusion before it still counts
    bench = load_benchmark("mmlu_dev")
    p = bench.problems[0]
    hostile = f"The answer is ({p.answer}).\nanswer" + " " * 20_000 + "\nanswer:" + " \t" * 10_000 + "*" * 10_000
    s = _score(bench, [Completion(p.task_id, 0, hostile, 1, "completion")], tmp_path)
    row = _rows(tmp_path / "r.jsonl")[0]
    assert row["pred"] == p.answer and row["correct"] and "detail" not in row
    assert s["metrics"]["accuracy"]["pass@1"] == 1.0


@pytest.mark.timeout(60)
def test_whitespace_runs_are_read_in_linear_time_on_gsm8k(tmp_path):
    # the number regex restarted inside every whitespace run (20,000 spaces: 3.4 s; 200,000: minutes)
    bench = load_benchmark("gsm8k")
    p = bench.problems[0]
    hostile = f"So the total is {p.answer}." + " " * 200_000 + "-$" + " " * 200_000 + "done"
    _score(bench, [Completion(p.task_id, 0, hostile, 1, "completion")], tmp_path)
    row = _rows(tmp_path / "r.jsonl")[0]
    assert row["pred"] == p.answer and row["correct"] and "detail" not in row


@pytest.mark.timeout(120)
def test_junk_lines_and_blank_lines_are_prepared_quickly_on_humaneval(tmp_path):
    # 3,000 junk lines: the sanitizer tried every span (> 150 s); 200,000 blank lines: the fence regex (~70 s)
    bench = load_benchmark("humaneval")
    p, q = bench.problems[:2]
    junk = "\n".join(f"??? step {i} $" for i in range(3000))
    comps = [Completion(p.task_id, 0, f"{junk}\n{p.reference}\n{junk}", 1),
             Completion(q.task_id, 0, "\n" * 200_000 + q.reference, 2)]
    s = _score(bench, comps, tmp_path)
    assert s["metrics"]["noalias"]["base"]["pass@1"] == 1.0, _rows(tmp_path / "r.jsonl")


@pytest.mark.timeout(120)
def test_preparation_past_the_time_limit_fails_that_sample_only_on_humaneval(tmp_path):
    # a try block that never gets its except leaves every span from its first line incomplete: the sanitizer's
    # search runs to its work budget (several seconds at 240 KB): the per-sample limit kills the work, the row
    # fails saying why, the other sample passes
    bench = load_benchmark("humaneval")
    p, q = bench.problems[:2]
    slow = "try:\n" + "    x = 1\n" * 24_000
    comps = [Completion(p.task_id, 0, slow, 1), Completion(q.task_id, 0, q.reference, 2)]
    t0 = time.monotonic()
    s = _score(bench, comps, tmp_path, text_limit_s=2)
    rows = {r["task_id"]: r for r in _rows(tmp_path / "r.jsonl")}
    for mode in ("noalias", "alias"):
        assert rows[p.task_id][mode] == {"base": "fail", "detail": "time limit in code preparation (2 s)"}
        assert rows[q.task_id][mode]["base"] == "pass"
    assert s["metrics"]["noalias"]["base"]["problems"] == 2 and time.monotonic() - t0 < 60


def _catastrophic(text: str) -> str | None:
    """An answer extractor with a regular expression that backtracks for ages inside C code on ``a...ab``."""
    return "1" if re.match(r"(a+)+$", text) else text.strip()


@pytest.mark.timeout(60)
def test_extraction_past_the_time_limit_is_wrong_and_later_rows_are_written_first_on_gsm8k(tmp_path):
    bench = dataclasses.replace(load_benchmark("gsm8k"), answer_extractor=_catastrophic)
    ps = bench.problems[:4]
    comps = [Completion(ps[0].task_id, 0, "a" * 40 + "b", 1, "completion")]
    comps += [Completion(p.task_id, 0, p.answer, i + 2, "completion") for i, p in enumerate(ps[1:])]
    s = _score(bench, comps, tmp_path, text_limit_s=2)
    rows = _rows(tmp_path / "r.jsonl")
    # the stuck first sample does not hold the others back: they are written as they finish, before it
    assert [r["task_id"] for r in rows] == [p.task_id for p in ps[1:]] + [ps[0].task_id]
    assert rows[-1] == {"task_id": ps[0].task_id, "sample": 0, "gold": ps[0].answer, "pred": None, "correct": False,
                        "detail": "time limit in answer extraction (2 s)"}
    assert all(r["correct"] for r in rows[:-1])
    assert s["metrics"]["accuracy"]["pass@1"] == 0.75
    (tmp_path / "r.jsonl").unlink()  # the same samples, the stuck one last: the same summary
    assert {**_score(bench, comps[::-1], tmp_path, text_limit_s=2), "date": s["date"]} == s


@pytest.mark.timeout(120)
def test_a_finished_code_row_is_written_before_a_slow_earlier_one_on_humaneval(tmp_path):
    bench = load_benchmark("humaneval")
    p, q = bench.problems[:2]
    sleepy = p.reference.replace('"""\n', '"""\n    import time\n    time.sleep(30)\n', 1)
    assert sleepy != p.reference
    comps = [Completion(p.task_id, 0, sleepy, 1), Completion(q.task_id, 0, q.reference, 2)]
    s = _score(bench, comps, tmp_path)
    rows = _rows(tmp_path / "r.jsonl")
    assert [r["task_id"] for r in rows] == [q.task_id, p.task_id]  # before: in submission order
    assert rows[0]["noalias"]["base"] == "pass" and rows[1]["noalias"]["base"] == "timeout"
    assert s["metrics"]["noalias"]["base"]["pass@1"] == 0.5


def _eval_score(tmp_path, data: bytes, capsys):
    comp = tmp_path / "c.jsonl"
    comp.write_bytes(data)
    rc = main(["eval", "score", "--benchmark", "mmlu_dev", "--completions", str(comp), "--out", str(tmp_path / "o"),
               "--no-progress"])
    return rc, capsys.readouterr().err, comp


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad, says", [
    (b'{"task_id": "x", "completion": "caf\xe9"}\n', "not UTF-8 (byte 36 of the line is 0xe9); save the file as UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "JSON nested too deeply to read"),
], ids=["latin-1", "deep"])
def test_bad_lines_of_a_completions_file_are_named_on_mmlu(tmp_path, capsys, bad, says):
    tid = load_benchmark("mmlu_dev").problems[0].task_id
    good = json.dumps({"task_id": tid, "completion": "The answer is (A)."}).encode() + b"\n"
    rc, err, comp = _eval_score(tmp_path, good + bad, capsys)
    assert rc == 2 and err == f"elfreg eval score: error: {comp}:2: {says}\n"


@pytest.mark.timeout(120)
def test_math_verify_logs_the_head_of_a_10mb_completion_on_math500(tmp_path, capfd):
    bench = load_benchmark("math500")
    p, q = bench.problems[:2]
    handler = logging.StreamHandler(sys.stderr)  # where `eval score` sends warnings; the workers inherit it
    logging.getLogger("math_verify").addHandler(handler)
    try:
        comps = [Completion(p.task_id, 0, "x" * 10_000_000, 1, "completion"),  # parsing times out after 1 s
                 Completion(q.task_id, 0, "y " * 50_000 + f"so the answer is $\\boxed{{{q.answer}}}$", 2,
                            "completion")]
        s = _score(bench, comps, tmp_path, math_timeout_s=1, max_completion_bytes=16 << 20)  # read, not refused
    finally:
        logging.getLogger("math_verify").removeHandler(handler)
    err = capfd.readouterr().err
    assert "Timeout during parsing: xxx" in err and "... [10000024 characters in all]" in err
    assert len(err) < 5_000  # before: the whole 10 MB
    rows = {r["task_id"]: r for r in _rows(tmp_path / "r.jsonl")}
    assert not rows[p.task_id]["correct"] and rows[q.task_id]["correct"]  # the verdict reads the whole text
    assert s["metrics"]["accuracy"]["pass@1"] == 0.5
