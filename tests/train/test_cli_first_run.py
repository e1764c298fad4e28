"""A user's first `elfreg train` on their own JSONL: the dry run sizes the canvas."""

import argparse
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
