import argparse
import json

from elfreg.eval.cli import register
from elfreg.eval.datasets import load_benchmark



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
