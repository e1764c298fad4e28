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
