import argparse
import json

import pytest

from elfreg.eval.cli import register
from elfreg.tasks.testsets import load_benchmark



def _parser():
    p = argparse.ArgumentParser(prog="elfreg")
    register(p.add_subparsers(dest="command", required=True))
    return p


def test_score_writes_reports_and_resumes(tmp_path, capsys):
    bench = load_benchmark("gsm8k")
    comp = tmp_path / "c.jsonl"
    with open(comp, "w") as f:
        for s in range(2):
            for p in bench.problems[:5]:
                text = p.reference if s == 0 else "The answer is 0.5"
                f.write(json.dumps({"task_id": p.task_id, "completion": text, "sample": s}) + "\n")
    out = tmp_path / "out"
    argv = ["eval", "score", "--benchmark", "gsm8k", "--completions", str(comp),
            "--out", str(out), "--allow-subset", "--no-progress"]
    args = _parser().parse_args(argv)
    assert args.func(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    acc = summary["metrics"]["accuracy"]
    assert acc["pass@1"] == 0.5 and acc["pass@1_per_seed"] == [1.0, 0.0] and acc["pass@1_std_across_seeds"] == 0.5
    assert summary["settings"]["workers"] == 2 and summary["data_sha256"]
    assert "| gsm8k | answer |" in (out / "summary.md").read_text()
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 10
    args = _parser().parse_args(argv)  # second run: everything already scored, nothing appended
    assert args.func(args) == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == 10


def test_bad_completions_file_names_the_line(tmp_path, capsys):
    comp = tmp_path / "c.jsonl"
    comp.write_text('{"task_id": "gsm8k/0", "completion": "1", "sample": 0}\n{"task_id": "nope", "completion": "1"}\n')
    args = _parser().parse_args(["eval", "score", "--benchmark", "gsm8k",
                                 "--completions", str(comp), "--out", str(tmp_path / "o")])
    assert args.func(args) == 2
    assert "c.jsonl:2: unknown task_id 'nope'" in capsys.readouterr().err


def _two_seed_completions(tmp_path, bench, n_problems=5):
    comp = tmp_path / "c.jsonl"
    with open(comp, "w") as f:
        for s in range(2):
            for i, p in enumerate(bench.problems[:n_problems]):
                text = p.reference if (s == 0 or i == 0) else "The answer is 0.5"
                f.write(json.dumps({"task_id": p.task_id, "completion": text, "sample": s}) + "\n")
    return comp


def _score_two_seeds(tmp_path, *extra):
    """``eval score`` on the two-sample GSM8K file with ``extra`` flags: (exit code, output folder)."""
    comp = _two_seed_completions(tmp_path, load_benchmark("gsm8k"))
    out = tmp_path / "out"
    args = _parser().parse_args(["eval", "score", "--benchmark", "gsm8k", "--completions", str(comp),
                                 "--out", str(out), *extra])
    return args.func(args), out


def test_score_reports_the_requested_ks(tmp_path):
    rc, out = _score_two_seeds(tmp_path, "--allow-subset", "--no-progress", "--k", "2,1")
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    acc = summary["metrics"]["accuracy"]
    # problem 0: 2/2 correct, problems 1-4: 1/2 -> pass@1 = 6/10, pass@2 = 1 for all five
    assert acc["pass@1"] == 0.6 and acc["pass@2"] == 1.0 and acc["ks"] == [1, 2]
    assert summary["pass_at_k"] == {"ks": [1, 2], "dropped_ks": [], "ks_from": "ScoreOptions.ks"}
    md = (out / "summary.md").read_text()
    assert "| pass@1 (%) | std across seeds | pass@2 (%) |" in md and "| 60.00 | 40.00 | 100.00 |" in md


def test_score_default_ks_are_the_papers_that_fit(tmp_path):
    rc, out = _score_two_seeds(tmp_path, "--allow-subset", "--no-progress")
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass_at_k"]["ks"] == [1] and summary["pass_at_k"]["dropped_ks"] == [4]
    assert "Not reported (k > 2 samples): pass@4" in (out / "summary.md").read_text()


def test_score_k_beyond_samples_fails_before_scoring(tmp_path, capsys):
    rc, out = _score_two_seeds(tmp_path, "--k", "1,4")
    assert rc == 2
    assert "pass@4 needs at least 4 samples per problem, but there are 2" in capsys.readouterr().err
    assert not out.exists()


def _score(comp, out, *extra, benchmark="gsm8k"):
    from elfreg.cli import main

    return main(["eval", "score", "--benchmark", benchmark, "--completions", str(comp), "--out", str(out),
                 "--allow-subset", "--no-progress", *extra])


def test_score_refuses_an_out_made_for_another_benchmark(tmp_path, capsys):
    dev = load_benchmark("mmlu_dev")
    comp = tmp_path / "c.jsonl"
    comp.write_text("".join(json.dumps({"task_id": p.task_id, "completion": f"The answer is ({p.answer})",
                                        "sample": 0}) + "\n" for p in dev.problems[:4]))
    out = tmp_path / "out"
    assert _score(comp, out, benchmark="mmlu_dev") == 0
    assert json.loads((out / "summary.json").read_text())["metrics"]["accuracy"]["pass@1"] == 1.0
    rows = (out / "results.jsonl").read_bytes()
    capsys.readouterr()
    # the same task ids exist in mmlu: the old code reused mmlu_dev's verdicts and reported them as mmlu's
    assert _score(comp, out, benchmark="mmlu") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was made with benchmark=mmlu_dev" in err[0] and "now benchmark=mmlu" in err[0]
    assert "--restart" in err[0] and (out / "results.jsonl").read_bytes() == rows
    # another completions file into the same folder is refused too; --restart moves the old files aside
    comp.write_text(comp.read_text().replace("The answer is", "I think the answer is"))
    assert _score(comp, out, benchmark="mmlu_dev") == 2
    assert "was made with completions=" in capsys.readouterr().err
    assert _score(comp, out, "--restart", benchmark="mmlu") == 0
    assert list(tmp_path.glob("out/results.jsonl.replaced-*"))[0].read_bytes() == rows
    assert json.loads((out / "summary.json").read_text())["benchmark"] == "mmlu"


def test_score_rescores_edited_verdicts_and_a_torn_last_line(tmp_path, capsys):
    comp = _two_seed_completions(tmp_path, load_benchmark("gsm8k"))
    out = tmp_path / "out"
    assert _score(comp, out) == 0
    acc = json.loads((out / "summary.json").read_text())["metrics"]["accuracy"]["pass@1"]
    assert acc == 0.6  # sample 0: 5 of 5, sample 1: 1 of 5
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    wrong = next(i for i, x in enumerate(lines) if '"correct": false' in x)
    lines[wrong] = lines[wrong].replace('"correct": false', '"correct": true')  # a hand edit
    results.write_text("\n".join(lines) + "\n" + lines[0][:30])  # and a line torn by a kill
    with pytest.warns(UserWarning) as got:
        assert _score(comp, out) == 0
    said = " ".join(str(w.message) for w in got)
    assert "1 rows fail their integrity check" in said and f"line {wrong + 1}" in said
    assert "dropped a truncated last line" in said
    assert json.loads((out / "summary.json").read_text())["metrics"]["accuracy"]["pass@1"] == acc
    rows = [json.loads(x) for x in results.read_text().splitlines()]  # every line whole again
    assert len(rows) == 11 and rows[-1]["correct"] is False and rows[-1]["task_id"] == rows[wrong]["task_id"]


def test_score_names_a_malformed_results_line(tmp_path, capsys):
    comp = _two_seed_completions(tmp_path, load_benchmark("gsm8k"))
    out = tmp_path / "out"
    assert _score(comp, out) == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    lines[2] = "{not json"
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert _score(comp, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out / 'results.jsonl'}:3: not a results row" in err[0]


def test_score_text_limit_reaches_the_scorer_is_checked_first_and_is_part_of_the_fingerprint(tmp_path, capsys,
                                                                                              monkeypatch):
    import elfreg.eval.cli as eval_cli

    comp = _two_seed_completions(tmp_path, load_benchmark("gsm8k"))
    out = tmp_path / "out"
    assert _score(comp, out, "--text-limit", "0") == 2  # refused before any work
    assert "argument --text-limit: need a number in [1, 86400] s, got 0.0" in capsys.readouterr().err
    assert not out.exists()
    seen = []
    real = eval_cli.score_completions
    monkeypatch.setattr(eval_cli, "score_completions", lambda *a: seen.append(a[3].text_limit_s) or real(*a))
    assert _score(comp, out, "--text-limit", "7.5") == 0 and seen == [7.5]
    capsys.readouterr()
    assert _score(comp, out) == 2  # the verdicts of samples past the limit depend on it
    assert "was made with text_limit=7.5, now text_limit=30.0" in capsys.readouterr().err
