"""A user's first `elfreg train` on their own JSONL: the dry run sizes the canvas, the run ends with its final loss,
time and learning curve."""

import argparse
import json
import re
from pathlib import Path

from _tiny import tiny_overrides
from elfreg.train.cli import register

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "configs/tiny-smoke.yaml")


def _run(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["train", *argv])
    return args.func(args)


def test_a_dry_run_of_rows_over_the_canvas_names_the_canvas_they_need(tiny_lm_dir, sums_jsonl, capsys):
    # the sums: prompt 8 tokens, prompt + response + EOS 16
    over = tiny_overrides(tiny_lm_dir, sums_jsonl)
    assert _run(["--config", SMOKE, "--dry-run", *over, "model.max_len=12", "model.max_prompt_len=6"]) == 2
    err = capsys.readouterr().err
    assert "these rows need model.max_prompt_len=8 model.max_len=16 (all of them; 8 and 16 hold 99 %)" in err
    assert _run(["--config", SMOKE, "--dry-run", *over, "model.max_len=16", "model.max_prompt_len=8"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"canvas the rows need \(all / 99 %\)\s+max_prompt_len 8 / 8, max_len 16 / 16", out)


def test_train_ends_with_final_loss_time_and_learning_curve(tmp_path, tiny_lm_dir, sums_jsonl, capsys):
    over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 3, "train.log_every": 1})
    over.remove("train.progress=false")  # --no-progress says it instead
    assert _run(["--config", SMOKE, "--output", str(tmp_path / "run"), "--no-progress", *over]) == 0
    out, err = capsys.readouterr()
    assert "train:" not in err and "it/s" not in err  # no progress bar
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = out.strip().splitlines()[-1]
    png = tmp_path / "run" / "learning_curve.png"
    assert last.startswith(f"final loss {records[-1]['loss']:.4g} (step 3, first logged {records[0]['loss']:.4g} "
                           "at step 1); ")
    assert re.search(r"; \d+ s; learning curve ", last) and last.endswith(str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --no-progress is train.progress=false, which a resumed run may change
    assert "progress: false" in (tmp_path / "run" / "config.yaml").read_text()
