"""Code scoring modes (the paper's alias rule, the helper-tolerant column), `completion` rows that hold whole
answers, rescoring rows of another alias rule, and MMLU through `eval score`."""

import json
import os

import pytest

from elfreg.cli import main
from elfreg.eval.codeprep import ALIAS_MODES, ALIAS_RULE
from elfreg.eval.completions import Completion
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions

from sandbox._isolation import isolated_sandbox

# Mbpp/11 (remove_Occ: drop the first and last occurrence of a character) answered by a helper and the solution
# under another name: two top-level functions
HELPER_ANSWER = ("def drop_at(s, i):\n    return s if i < 0 else s[:i] + s[i + 1:]\n\n"
                 "def remove_ends(s, ch):\n    return drop_at(drop_at(s, s.find(ch)), drop_at(s, s.find(ch)).rfind(ch))\n")


def _row(rows, tid, sample=0):
    return next(r for r in rows if r["task_id"] == tid and r["sample"] == sample)


def test_helper_answer_is_aliased_only_in_the_helper_tolerant_column(tmp_path):
    bench = load_benchmark("mbpp")
    p = bench.problems[0]
    assert p.entry_point == "remove_Occ"
    sandbox = isolated_sandbox()
    try:
        opts = ScoreOptions(workers=1, allow_subset=True, progress=False, cache_dir=str(tmp_path / "cache"),
                            alias_helpers=True)
        s = score_completions(bench, [Completion(p.task_id, 0, HELPER_ANSWER, 1)], tmp_path / "r.jsonl", opts,
                              sandbox)
    finally:
        sandbox.close()
    m = s["metrics"]
    assert m["noalias"]["base"]["pass@1"] == 0.0 and m["alias"]["base"]["pass@1"] == 0.0  # the paper's rule
    assert m["alias_helpers"]["base"]["pass@1"] == 1.0  # elfreg's reading, its own column
    assert m["aliased_samples"] == 0 and m["aliased_samples_helpers"] == 1
    row = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert row["alias_rule"] == ALIAS_RULE and row["aliased"] is False and row["aliased_helpers"] is True
    from elfreg.eval.report import markdown_table

    md = markdown_table(s)
    for label in ALIAS_MODES.values():
        assert f"| {label} |" in md


def test_completion_that_is_a_whole_answer_says_so_and_is_counted(tmp_path):
    """MBPP+ answers saved as `completion`s although they are chat replies with the whole program: scored as
    prompt + completion, most fail on an internal detail; each such row now says why, and the summary counts them."""
    bench = load_benchmark("mbpp_plus")
    probs = bench.problems[:6]
    comps = [Completion(p.task_id, 0, f"Sure! Here is the function:\n```python\n{p.reference}\n```\nHope it helps.",
                        i + 1, "completion") for i, p in enumerate(probs)]
    comps.append(Completion(probs[0].task_id, 1, "    return None\n", 7, "completion"))  # a real continuation
    sandbox = isolated_sandbox()
    try:
        s = score_completions(bench, comps, tmp_path / "r.jsonl",
                              ScoreOptions(workers=2, allow_subset=True, progress=False,
                                           cache_dir=str(tmp_path / "cache")), sandbox)
    finally:
        sandbox.close()
    rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    chat = [r for r in rows if r["sample"] == 0]
    assert all(r["looks_like_solution"] == "it has a markdown code fence" for r in chat)
    failed = [r for r in chat if r["noalias"]["base"] != "pass"]
    assert failed, "the chat replies were expected to fail as prompt continuations"
    for r in failed:
        assert r["noalias"]["detail"].startswith("this `completion` looks like a self-contained `solution`"), r
    assert "looks_like_solution" not in _row(rows, probs[0].task_id, 1)
    assert s["metrics"]["completions_looking_like_solutions"] == {"rows": 6, "failed": len(failed)}
    from elfreg.eval.report import markdown_table

    assert f"6 `completion` rows look like self-contained `solution`s ({len(failed)} of them failed)" \
        in markdown_table(s)


def test_rows_scored_under_another_alias_rule_are_scored_again(tmp_path):
    bench = load_benchmark("mbpp")
    p = bench.problems[0]
    results = tmp_path / "r.jsonl"
    # a row written by an earlier elfreg (the broader rule, no alias_rule field) that called the helper answer a pass
    results.write_text(json.dumps({"task_id": p.task_id, "sample": 0, "noalias": {"base": "fail"},
                                   "alias": {"base": "pass"}, "aliased": True}) + "\n")
    sandbox = isolated_sandbox()
    try:
        s = score_completions(bench, [Completion(p.task_id, 0, HELPER_ANSWER, 1)], results,
                              ScoreOptions(workers=1, allow_subset=True, progress=False,
                                           cache_dir=str(tmp_path / "cache")), sandbox)
    finally:
        sandbox.close()
    assert s["metrics"]["alias"]["base"]["pass@1"] == 0.0
    assert json.loads(results.read_text().splitlines()[-1])["alias_rule"] == ALIAS_RULE


def test_eval_score_on_mmlu_reads_letters_from_rationales(tmp_path):
    bench = load_benchmark("mmlu_dev")
    comp = tmp_path / "c.jsonl"
    with open(comp, "w") as f:
        for i, p in enumerate(bench.problems):
            wrong = "ABCD"[("ABCD".index(p.answer) + 1) % 4]
            f.write(json.dumps({"task_id": p.task_id, "sample": 0,
                                "completion": f"Reasoning about option {wrong}.\nThe answer is ({p.answer})."}) + "\n")
            f.write(json.dumps({"task_id": p.task_id, "sample": 1, "completion": f"Answer: {wrong}"}) + "\n")
    out = tmp_path / "out"
    assert main(["eval", "score", "--benchmark", "mmlu_dev", "--completions", str(comp), "--out", str(out),
                 "--no-progress", "--k", "1,2"]) == 0
    acc = json.loads((out / "summary.json").read_text())["metrics"]["accuracy"]
    assert acc["pass@1_per_seed"] == [1.0, 0.0] and acc["pass@2"] == 1.0 and acc["problems"] == 285


def test_code_samples_go_to_the_workers_slowest_reference_first(tmp_path):
    """The workers end together: a long sample that came last in the file no longer runs while the others wait."""
    from types import SimpleNamespace

    from elfreg.sandbox import ExpectedOutputs
    from elfreg.eval.scoring import longest_first

    bench = SimpleNamespace(name="t", source_sha256="0" * 16)
    expected = ExpectedOutputs(bench, SimpleNamespace(isolation=SimpleNamespace(isolated=True)), tmp_path)
    expected.table = {"a": {"base": [{"t": 0.1}], "plus": [{"t": 0.2}], "base_load": 0.05, "plus_load": 0.0},
                      "b": {"base": [{"t": 2.0}], "plus": [], "base_load": 0.0, "plus_load": 0.0},
                      "c": {"calls": [], "outputs": [], "ref_time": 1.0}}
    assert expected.reference_seconds("a") == pytest.approx(0.35) and expected.reference_seconds("x") == 0
    todo = [Completion(t, s, "", 1) for t in ("a", "x", "c", "b") for s in (0, 1)]
    assert [(c.task_id, c.sample) for c in longest_first(todo, expected)] == \
        [("b", 0), ("b", 1), ("c", 0), ("c", 1), ("a", 0), ("a", 1), ("x", 0), ("x", 1)]


def test_scoring_does_not_load_torch():
    """`eval score`'s scoring needs no torch (importing it costs seconds on every run)."""
    import subprocess
    import sys

    code = "import sys, elfreg.eval.scoring, elfreg.eval.run_model; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
    assert out.strip() == "False"
