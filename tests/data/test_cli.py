import argparse
import json

from elfreg.data.canvas import CanvasConfig, CanvasStats, build_canvas
from elfreg.data.cli import register
from elfreg.tasks.formats import apply_template

from ._shared import shared_dir, tiny_tokenizer


def _run(argv):
    parser = argparse.ArgumentParser(prog="elfreg")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_decontaminate_cli_writes_rows_and_report(tmp_path):
    data = shared_dir() / "data"
    test_q = json.loads((data / "gsm8k" / "test.jsonl").read_text().splitlines()[5])["question"]
    rows = [{"question": "Tom has 3 apples and buys 4 more at the shop. How many apples does he have now?",
             "answer": "3+4=7\n#### 7"},
            {"question": test_q.lower(), "answer": "...\n#### 1"}]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, rep = tmp_path / "out.jsonl", tmp_path / "report.json"
    assert _run(["data", "decontaminate", "--task", "math", "--input", str(inp), "--columns",
                 "prompt=question,response=answer", "--output", str(out), "--report", str(rep),
                 "--benchmarks", str(data)]) == 0
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    report = json.loads(rep.read_text())
    assert [k["prompt"] for k in kept] == [rows[0]["question"]]
    assert report["rows_dropped"] == 1 and report["by_reason"] == {"exact": 1}
    assert report["dropped"][0]["item_id"] == "gsm8k/test/5"


def test_canvas_stats_cli_counts_match_build_canvas(tmp_path, capsys):
    rows = [{"prompt": "a b c", "response": "x y\n#### 4"}, {"prompt": "a " * 20, "response": "x\n#### 4"},
            {"prompt": "a", "response": "x y z " * 10 + "\n#### 4"}]
    inp = tmp_path / "rows.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = tiny_tokenizer(tmp_path / "tok", ["Question: a b c\nAnswer: x y z #### 4"])
    assert _run(["data", "canvas-stats", "--task", "math", "--input", str(inp), "--tokenizer", str(tmp_path / "tok"),
                 "--canvas-len", "24", "--prompt-cap", "12"]) == 0
    printed = json.loads(capsys.readouterr().out)
    stats = CanvasStats()
    cfg = CanvasConfig(canvas_len=24, prompt_cap=12, overflow="skip")
    for r in rows:
        build_canvas(*apply_template(r, "math"), tok, cfg, stats)
    assert (printed["fit"], printed["prompt_too_long"], printed["canvas_too_long"]) == (
        stats.kept, stats.prompt_too_long, stats.canvas_too_long)
    assert printed["rows"] == 3 and stats.kept == 1
