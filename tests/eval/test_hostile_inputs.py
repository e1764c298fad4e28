"""Hostile inputs of `eval score` on the text side (issues 32, 35, 36): endless or special completions files, lines
and completions too long to hold, text work past its memory, a worker's start-up charged to a sample, files with
problems missing. Each end to end on the benchmark named, bounded in time; before the fixes each grew without bound,
hung, was charged to the wrong sample, or hid what it meant at the end of a long line."""

import json
import os
import resource
import subprocess
import sys
import threading

import pytest

from elfreg.cli import main
from elfreg.eval.completions import Completion, line_limit
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions
from elfreg.fingerprint import CHECK_FIELD

from sandbox._isolation import isolated_sandbox


def _elfreg(*argv: str, timeout: float, memory_bytes: int | None = None) -> subprocess.CompletedProcess:
    """``python -m elfreg ARGV`` in a fresh process (nothing imported or warmed by other tests), its address space
    capped at ``memory_bytes``: a reader that holds an endless line fails there, not on the machine."""
    def cap() -> None:
        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run([sys.executable, "-m", "elfreg", *argv], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=cap)


def _rows(path):
    """The rows of a results file, without their integrity check (elfreg.fingerprint)."""
    return [{k: v for k, v in json.loads(line).items() if k != CHECK_FIELD} for line in path.read_text().splitlines()]


def _line(task_id: str, text: str) -> str:
    return json.dumps({"task_id": task_id, "completion": text}) + "\n"


@pytest.mark.timeout(120)
def test_an_endless_character_device_is_one_line_on_gsm8k(tmp_path):
    # before: 3 GB of RSS in 11 s reading one endless line of /dev/zero, then a MemoryError traceback
    got = _elfreg("eval", "score", "--benchmark", "gsm8k", "--completions", "/dev/zero", "--out", str(tmp_path / "o"),
                  "--no-progress", timeout=90, memory_bytes=3 << 30)
    assert got.returncode == 2
    assert got.stderr.splitlines() == ["elfreg eval score: error: /dev/zero: is a character device, not a completions "
                                       "file; give a JSONL file (or a pipe)"]
    assert not (tmp_path / "o").exists()


@pytest.mark.timeout(120)
def test_a_line_longer_than_the_limit_is_one_line_naming_it_on_gsm8k(tmp_path):
    # the default limit: room for a 4 MiB completion escaped 6 times over; one byte more, never held whole
    limit = line_limit(ScoreOptions.max_completion_bytes)
    comp = tmp_path / "c.jsonl"
    with open(comp, "w") as f:
        f.write(_line("gsm8k/0", "The answer is 18."))
        f.write('{"task_id": "gsm8k/1", "completion": "' + "9" * limit + '"}\n')
    got = _elfreg("eval", "score", "--benchmark", "gsm8k", "--completions", str(comp), "--out", str(tmp_path / "o"),
                  "--no-progress", timeout=90, memory_bytes=3 << 30)
    assert got.returncode == 2
    assert got.stderr.splitlines() == [f"elfreg eval score: error: {comp}:2: line longer than {limit:,} bytes (a "
                                       "completion may hold 4,194,304 bytes: --max-completion-bytes)"]


@pytest.mark.timeout(180)
def test_a_fifo_of_valid_rows_is_read_once_scored_and_the_run_ends_on_gsm8k(tmp_path):
    # before: the rows were read, then the fingerprint read the FIFO again for its digest and waited forever
    bench = load_benchmark("gsm8k")
    fifo = tmp_path / "samples.fifo"
    os.mkfifo(fifo)
    rows = "".join(_line(p.task_id, p.reference) for p in bench.problems[:3])

    def write() -> None:
        with open(fifo, "w") as f:  # waits for the reader
            f.write(rows)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = tmp_path / "o"
    got = _elfreg("eval", "score", "--benchmark", "gsm8k", "--completions", str(fifo), "--out", str(out),
                  "--allow-subset", "--no-progress", timeout=150)
    assert got.returncode == 0, got.stderr
    assert [r["correct"] for r in _rows(out / "results.jsonl")] == [True, True, True]
    writer.join(5)
    assert not writer.is_alive()
    # the fingerprint holds the digest of the bytes read: the same rows from a file resume the same folder
    comp = tmp_path / "c.jsonl"
    comp.write_text(rows)
    assert main(["eval", "score", "--benchmark", "gsm8k", "--completions", str(comp), "--out", str(out),
                 "--allow-subset", "--no-progress"]) == 0
    assert len(_rows(out / "results.jsonl")) == 3


@pytest.mark.timeout(120)
def test_a_completion_over_the_size_limit_is_a_wrong_row_with_the_reason_on_gsm8k(tmp_path, capsys):
    bench = load_benchmark("gsm8k")
    p, q = bench.problems[:2]
    comp = tmp_path / "c.jsonl"
    comp.write_text(_line(p.task_id, "The answer is 1. " * 200) + _line(q.task_id, q.reference))
    out = tmp_path / "o"
    argv = ["eval", "score", "--benchmark", "gsm8k", "--completions", str(comp), "--out", str(out), "--allow-subset",
            "--no-progress"]
    assert main(argv + ["--max-completion-bytes", "1000"]) == 0
    rows = {r["task_id"]: r for r in _rows(out / "results.jsonl")}
    assert rows[p.task_id] == {"task_id": p.task_id, "sample": 0, "gold": p.answer, "pred": None, "correct": False,
                               "detail": "not scored: the sample is 3,400 bytes, over --max-completion-bytes 1,000"}
    assert rows[q.task_id]["correct"]
    capsys.readouterr()
    assert main(argv) == 2  # the limit decides verdicts: it is part of the folder's fingerprint
    assert "was made with max_completion_bytes=1000, now max_completion_bytes=4194304" in capsys.readouterr().err
    assert main(argv + ["--max-completion-bytes", "0"]) == 2  # checked before anything is read
    assert "argument --max-completion-bytes: need an integer in [1, 1073741824] bytes, got 0" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_solution_over_the_size_limit_fails_every_mode_unrun_on_humaneval(tmp_path):
    bench = load_benchmark("humaneval")
    p, q = bench.problems[:2]
    comps = [Completion(p.task_id, 0, p.reference + "#" * 2000, 1), Completion(q.task_id, 0, q.reference, 2)]
    sandbox = isolated_sandbox()
    try:
        s = score_completions(bench, comps, tmp_path / "r.jsonl",
                              ScoreOptions(allow_subset=True, progress=False, cache_dir=str(tmp_path / "cache"),
                                           max_completion_bytes=1000), sandbox)
    finally:
        sandbox.close()
    rows = {r["task_id"]: r for r in _rows(tmp_path / "r.jsonl")}
    size = len((p.reference + "#" * 2000).encode())
    for mode in ("noalias", "alias"):
        assert rows[p.task_id][mode] == {"base": "fail",
                                         "detail": f"not scored: the sample is {size:,} bytes, over "
                                                   "--max-completion-bytes 1,000"}
        assert rows[q.task_id][mode]["base"] == "pass"
    assert s["metrics"]["noalias"]["base"]["pass@1"] == 0.5 and s["isolated"]


@pytest.mark.timeout(180)
def test_text_work_past_its_memory_limit_is_a_wrong_row_and_the_run_goes_on_on_gsm8k(tmp_path):
    # '12 ' * n made extraction hold ~25 bytes per input byte (the issue: 157 MB -> 3.5 GB in one worker); under a
    # 128 MiB limit an 8 MB row is that row's error, its worker is replaced, and the gold rows around it are right
    bench = load_benchmark("gsm8k")
    ps = bench.problems[:5]
    hog = "12 " * ((8 << 20) // 3)
    comps = [Completion(p.task_id, 0, hog if i == 1 else p.reference, i + 1, "completion") for i, p in enumerate(ps)]
    opts = ScoreOptions(workers=1, allow_subset=True, progress=False, max_completion_bytes=16 << 20,
                        text_memory_bytes=128 << 20)
    s = score_completions(bench, comps, tmp_path / "r.jsonl", opts)
    rows = {r["task_id"]: r for r in _rows(tmp_path / "r.jsonl")}
    assert rows[ps[1].task_id]["detail"] == "answer extraction: over the memory limit of text work (128 MiB)"
    assert not rows[ps[1].task_id]["correct"]
    assert all(rows[p.task_id]["correct"] for i, p in enumerate(ps) if i != 1)
    assert s["metrics"]["accuracy"]["pass@1"] == 0.8


@pytest.mark.timeout(240)
def test_no_gold_answer_pays_for_a_replacement_worker_start_up_on_math500(tmp_path):
    # before: a worker replaced after a slow sample imported math-verify and sympy on its next task (1-2 s), so
    # with --text-limit 1 every gold answer after a slow sample was "time limit"
    bench = load_benchmark("math500")
    # 7 MB of formulas: math-verify parses them for about 3 s on a fast idle core (2 MB took 0.96 s: a fast machine
    # scored some within the 1-s limit, and no worker was replaced), hence the larger --max-completion-bytes
    slow = "$\\frac{1}{2}$ " * 500_000
    ps = bench.problems[:10]
    comp = tmp_path / "c.jsonl"
    comp.write_text("".join(_line(p.task_id, slow if i % 2 == 0 else p.reference) for i, p in enumerate(ps)))
    out = tmp_path / "o"
    got = _elfreg("eval", "score", "--benchmark", "math500", "--completions", str(comp), "--out", str(out),
                  "--allow-subset", "--no-progress", "--text-limit", "1", "--max-completion-bytes", str(8 << 20),
                  timeout=200)
    assert got.returncode == 0, got.stderr
    rows = {r["task_id"]: r for r in _rows(out / "results.jsonl")}
    gold = [p.task_id for i, p in enumerate(ps) if i % 2]
    assert {t: rows[t].get("detail") for t in gold} == {t: None for t in gold}
    assert all(rows[t]["correct"] for t in gold)
    assert all(rows[p.task_id]["detail"] == "time limit in math-verify (1 s)" for p in ps[::2])


@pytest.mark.timeout(120)
def test_missing_problems_get_a_line_of_their_own_before_the_table_on_gsm8k(tmp_path, capsys):
    # before (5 HumanEval rows): pass@1 1.22 % with "missing problems: 159" at the end of a long last line
    bench = load_benchmark("gsm8k")
    comp = tmp_path / "c.jsonl"
    comp.write_text("".join(_line(p.task_id, p.reference) for p in bench.problems[:5]))
    argv = ["eval", "score", "--benchmark", "gsm8k", "--completions", str(comp), "--no-progress"]
    assert main(argv + ["--out", str(tmp_path / "all")]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == ("**1314 of 1319 gsm8k problems have no sample and count as wrong** in every figure below; pass "
                     "--allow-subset to score only the problems in the file.")
    assert main(argv + ["--out", str(tmp_path / "subset"), "--allow-subset"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "**Subset:** 5 of 1319 gsm8k problems scored; the 1314 with no sample are left out of every figure "
        "(--allow-subset).")


@pytest.mark.timeout(60)
def test_an_unknown_task_id_shows_the_benchmark_s_form_on_gsm8k(tmp_path, capsys):
    comp = tmp_path / "c.jsonl"
    comp.write_text(_line("gsm8k/0", "18") + _line("0", "18"))
    assert main(["eval", "score", "--benchmark", "gsm8k", "--completions", str(comp), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    assert capsys.readouterr().err == (f"elfreg eval score: error: {comp}:2: unknown task_id '0' (did you mean "
                                       "'gsm8k/0'?); this benchmark's ids look like 'gsm8k/0' ... 'gsm8k/1318'\n")
