"""The plan in the paper's units (spec §7): epochs -> steps, warm-up, epoch checkpoints, token counts, --dry-run."""

import argparse
import re
from pathlib import Path

import numpy as np
import pytest

from _tiny import sum_rows, tiny_overrides
from elfreg.configtools import ConfigError
from elfreg.data import CanvasConfig, CanvasStats, build_canvas
from elfreg.data.templates import apply_template
from elfreg.train.cli import register
from elfreg.train.config import load_run_config
from elfreg.train.plan import RowLengths, count_lengths, format_plan, make_plan, steps_for_epochs, warmup_for_epochs

REPO = Path(__file__).resolve().parents[2]
GSM8K_ROWS = 2_404_028  # spec §7 / seeds 002 §3.1


def test_epochs_to_steps_is_the_ceiling_of_exact_arithmetic():
    assert steps_for_epochs(12, GSM8K_ROWS, 512) == 56_345  # 56,344.4 -> the spec's 56,345
    assert steps_for_epochs(7.5, GSM8K_ROWS, 512) == 35_216  # 35,215.25
    assert steps_for_epochs(1, 512, 512) == 1 and steps_for_epochs(1, 513, 512) == 2
    assert steps_for_epochs(0.1, 30, 3) == 1  # 0.1 x 30 = 3 exactly, no float 3.0000000000000004 -> 2
    assert warmup_for_epochs(0.5, GSM8K_ROWS, 512) == 2_348  # 2,347.68 rounded
    assert warmup_for_epochs(0.5, 55, 8) == 3  # 3.4375


def gsm8k_stand_in(rows: int, tokens_per_epoch: int, seed: int = 0) -> RowLengths:
    """Synthetic row lengths of a GSM8K-sized set whose tokens (prompt + response + EOS) sum to tokens_per_epoch."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(20, 120, size=rows)
    response = rng.integers(40, 300, size=rows)
    # shift the responses so the total is exact, keeping every row on the canvas
    deficit = tokens_per_epoch - int((prompt + response + 1).sum())
    response += deficit // rows
    response[: deficit % rows] += 1
    assert int((prompt + response + 1).sum()) == tokens_per_epoch
    return RowLengths(prompt, response, rows_read=rows)


def test_gsm8k_dry_run_matches_the_papers_figures():
    """The GSM8K preset on a stand-in of the paper's size: 2,404,028 rows, 12 epochs at batch 512, 6.696B tokens."""
    cfg = load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml")
    paper = cfg.paper
    assert (paper.rows, paper.epochs, paper.global_batch, paper.tokens) == (GSM8K_ROWS, 12, 512, 6.696e9)
    per_epoch = round(paper.tokens / paper.epochs)
    plan = make_plan(cfg, gsm8k_stand_in(GSM8K_ROWS, per_epoch))
    assert plan.rows == GSM8K_ROWS and plan.overflow == 0 and plan.global_batch == 512
    assert plan.epochs == 12 and plan.steps == 56_345
    assert plan.warmup_steps == 2_348 and plan.warmup_fraction == pytest.approx(2_348 / 56_345)
    assert plan.epoch_steps == {"6": 28_173, "7.5": 35_216}
    assert plan.tokens_per_epoch == per_epoch
    # 56,345 x 512 examples are 12.0001 epochs: the run's tokens exceed 12 epochs' by that share
    assert plan.tokens == round(per_epoch * 56_345 * 512 / GSM8K_ROWS)
    assert plan.tokens / paper.tokens == pytest.approx(56_345 * 512 / (12 * GSM8K_ROWS))
    text = format_plan(plan)
    for figure in ("2,404,028", "56,345", "6.696B", "2,348 steps (4.17% of the run)", "step 35,216"):
        assert figure in text, figure


def test_math_plan_shows_its_own_tokens_and_the_init_share():
    cfg = load_run_config(REPO / "configs/math/elf-reg-l.yaml")
    rows = cfg.paper.rows
    own = cfg.paper.tokens - cfg.paper.init_tokens  # 13.625B over 8 epochs
    plan = make_plan(cfg, gsm8k_stand_in(rows, round(own / 8)))
    assert plan.steps == steps_for_epochs(8, 3_572_583, 512) == 55_822  # 55,821.6
    text = format_plan(plan)
    assert "13.625B" in text and "4.185B" in text and "17.810B" in text


def test_overflow_is_counted_and_bounded():
    cfg = load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml")
    lengths = RowLengths(np.array([10, 300, 10, 10]), np.array([10, 10, 2000, 10]), rows_read=4)
    with pytest.raises(ValueError, match="canvas.max_overflow_fraction"):
        make_plan(cfg, lengths)  # 2 of 4 rows skipped > 5 %
    cfg.canvas.max_overflow_fraction = 0.5
    plan = make_plan(cfg, lengths)
    assert (plan.rows, plan.overflow_prompt, plan.overflow_canvas) == (2, 1, 1)
    assert plan.mean_tokens == 21 and plan.max_tokens == 21 and plan.overflow_fraction == 0.5


def test_keep_epochs_beyond_a_step_budget_is_an_error():
    cfg = load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml", ["train.epochs=null", "train.steps=30000"])
    with pytest.raises(ConfigError, match=r"train.keep_epochs: epoch 7.5 \(step 35216\) is beyond"):
        make_plan(cfg, gsm8k_stand_in(GSM8K_ROWS, 558_000_000))


def test_count_lengths_agrees_with_build_canvas(tiny_lm_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    rows = sum_rows(20) + [{"prompt": "what is 1 plus 2 " * 4 + "?", "response": "3", "answer": "3"}]
    lengths = count_lengths(iter(rows), "math", tok, batch_size=7)
    canvas = CanvasConfig(canvas_len=24, prompt_cap=12, overflow="skip")
    stats = CanvasStats()
    built = [build_canvas(*apply_template(r, "math"), tok, canvas, stats) for r in rows]
    prompt_over, canvas_over = lengths.overflow(24, 12)
    assert int(prompt_over.sum()) == stats.prompt_too_long == 1 and int(canvas_over.sum()) == stats.canvas_too_long
    for i, c in enumerate(built):
        if c is not None:
            assert (lengths.prompt[i], lengths.response[i]) == (c.prompt_len, c.content_len)


def test_dry_run_prints_the_plan_of_a_local_file(tmp_path, tiny_lm_dir, sums_jsonl, capsys):
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="cmd"))
    over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": "null", "train.epochs": 2.5,
                                                      "train.warmup_steps": "null", "train.warmup_epochs": 0.5,
                                                      "train.keep_epochs": "[1, 1.5]"})
    args = p.parse_args(["train", "--config", str(REPO / "configs/tiny-smoke.yaml"), "--dry-run", *over])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    # 55 sums of 16 tokens each (prompt 8 + response 7 + EOS) on a 24-token canvas, batch 8
    assert "dry run: nothing trained" in out
    cells = [re.split(r"\s{2,}", ln.strip()) for ln in out.splitlines()[3:]]
    lines = {c[0]: c[1] for c in cells if len(c) > 1}
    assert lines["rows that fit (one epoch)"] == "55" and lines["tokens per row (mean / max)"] == "16.0 / 16"
    assert lines["epochs"] == "2.5" and lines["optimiser steps"] == "18" and lines["tokens per epoch"] == "880"
    assert lines["tokens (prompt + response + EOS, no padding)"] == "2,304"  # 18 x 8 rows x 16 tokens
    assert lines["warm-up"] == "3 steps (16.67% of the run)"
    assert lines["checkpoint kept at epoch 1.5"] == "step 11"
    assert not any(tmp_path.iterdir()) or all(x.name == "sums.jsonl" for x in tmp_path.iterdir())


def test_steps_and_epochs_both_set_is_a_config_error():
    with pytest.raises(ConfigError, match="train.epochs.*both set"):
        load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml", ["train.steps=100"])
    with pytest.raises(ConfigError, match="train.warmup_epochs.*both set"):
        load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml", ["train.warmup_steps=100"])
    with pytest.raises(ConfigError, match=r"train.keep_epochs: epoch 12.5 is beyond"):
        load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml", ["train.keep_epochs=[6, 12.5]"])
    with pytest.raises(ConfigError, match="data.epochs"):
        load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml", ["data.epochs=12"])
