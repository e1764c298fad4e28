"""summary.md: one column per reported pass@k, the dropped ks and the protocol line."""

from elfreg.eval.metrics import summarize
from elfreg.eval.report import markdown_table, subset_line


def test_code_table_has_one_column_per_k_for_every_mode_and_test_set():
    # 2 problems x 16 samples: a passes 4 base / 2 plus, b passes nothing
    base = summarize({"a": {s: s < 4 for s in range(16)}, "b": {s: False for s in range(16)}}, ks=(1, 10, 16))
    plus = summarize({"a": {s: s < 2 for s in range(16)}, "b": {s: False for s in range(16)}}, ks=(1, 10, 16))
    summary = {"benchmark": "humaneval_plus", "metrics": {"noalias": {"base": base, "plus": plus},
                                                          "alias": {"base": base, "plus": plus}},
               "pass_at_k": {"ks": [1, 10, 16], "dropped_ks": [], "ks_from": "protocol:paper"},
               "evaluation": {"protocol": "paper", "values": {"nfe": 16, "samples": 16},
                              "origin": {"nfe": "user", "samples": "protocol:paper"}},
               "settings": {}, "data_file": "f", "data_sha256": "x", "problems_missing": 0, "versions": {}}
    md = markdown_table(summary)
    assert "| pass@1 (%) | std across seeds | pass@10 (%) | pass@16 (%) | problems | samples |" in md
    # base: pass@10 of a = 1 - C(12,10)/C(16,10) = 1 - 66/8008; pass@16 = 1; mean with b's 0
    p10 = 100 * (1 - 66 / 8008) / 2
    std = 100 * (4 / 16 * 0.25 - 0.125 ** 2) ** 0.5  # per-seed pass@1: 0.5 on seeds 0-3, 0 on the other 12
    assert f"| humaneval_plus | base | off | 12.50 | {std:.2f} | {p10:.2f} | 50.00 | 2 | 16 |" in md
    assert md.count("| humaneval_plus |") == 4
    assert "Protocol: paper; nfe=16 (user), samples=16 (protocol:paper)" in md


def test_results_rows_and_summaries_never_hold_nan(tmp_path):
    import pytest

    from elfreg.eval.report import write_reports
    from elfreg.eval.scoring import ResultsFile

    results = ResultsFile(tmp_path / "results.jsonl", key="ab" * 32)
    with pytest.raises(ValueError, match="^score is inf: JSON has no such number"):
        results.add({"task_id": "t", "sample": 0, "correct": True, "score": float("inf")})
    results.close()
    assert (tmp_path / "results.jsonl").read_text() == ""
    base = summarize({"a": {0: True, 1: False}}, ks=(1,))
    summary = {"benchmark": "gsm8k", "metrics": {"accuracy": base}, "pass_at_k": {"ks": [1], "dropped_ks": [], "ks_from": "user"},
               "settings": {"w": float("nan")}, "data_file": "f", "data_sha256": "x", "problems_missing": 0,
               "versions": {}}
    with pytest.raises(ValueError, match=r"^settings\.w is nan: JSON has no such number"):
        write_reports(summary, tmp_path)
    assert not (tmp_path / "summary.json").exists()


def test_missing_problems_are_said_before_the_table():
    summary = {"benchmark": "humaneval", "problems_in_benchmark": 164, "problems_missing": 159,
               "settings": {"allow_subset": False}}
    assert subset_line(summary) == ("**159 of 164 humaneval problems have no sample and count as wrong** in every "
                                    "figure below; pass --allow-subset to score only the problems in the file.")
    assert subset_line({**summary, "settings": {"allow_subset": True}}) == (
        "**Subset:** 5 of 164 humaneval problems scored; the 159 with no sample are left out of every figure "
        "(--allow-subset).")
    assert subset_line({**summary, "problems_missing": 0}) is None


def test_the_summary_records_where_the_benchmark_s_prompt_function_lives(tmp_path):
    """settings.prompt_format names the prompt function's current home (it read elfreg.eval.prompts, a module that
    moved): importing that name gives the very function the benchmark formats its prompts with."""
    import importlib

    from elfreg.tasks.testsets import load_benchmark
    from elfreg.eval.report import build_summary
    from elfreg.eval.scoring import ScoreOptions

    bench = load_benchmark("gsm8k")
    rows = [{"task_id": bench.problems[0].task_id, "sample": 0, "correct": True}]
    where = build_summary(bench, rows, ScoreOptions(allow_subset=True, ks=(1,)), "none")["settings"]["prompt_format"]
    assert where == "elfreg.tasks.formats.gsm8k_prompt"
    module, _, name = where.rpartition(".")
    assert getattr(importlib.import_module(module), name) is bench.prompt_formatter
