"""The plan in the paper's units (spec §7): epochs -> steps, warm-up, epoch checkpoints, token counts, --dry-run."""

import argparse
import re
from pathlib import Path

import numpy as np
import pytest

from _tiny import sum_rows, tiny_overrides
from elfreg.configtools import ConfigError
from elfreg.data import CanvasConfig, CanvasStats, build_canvas
from elfreg.tasks.formats import apply_template
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


def _paper_plan(preset: str):
    """The preset's plan on a stand-in of the paper's data: its rows, and its tokens per epoch."""
    cfg = load_run_config(REPO / "configs" / f"{preset}.yaml")
    p = cfg.paper
    per_epoch = round((p.tokens - (p.init_tokens or 0)) / (p.tokens_epochs or p.epochs))
    return cfg, make_plan(cfg, gsm8k_stand_in(p.rows, per_epoch))


@pytest.mark.parametrize("preset, epochs, steps, kept, compared", [
    # Table 2's note (seeds/002:263): the baselines train 6 (B) and 3 (L) epochs more than ELF-REG's 12
    ("gsm8k/elf-b", 18, 84_517, {"6": 28_173, "7.5": 35_216}, {"6": 28_173, "18": 84_517}),
    ("gsm8k/elf-l", 15, 70_431, {"6": 28_173, "7.5": 35_216, "14": 65_736}, {"14": 65_736, "15": 70_431}),
    ("gsm8k/elf-reg-b", 12, 56_345, {"6": 28_173, "7.5": 35_216}, {"6": 28_173, "12": 56_345}),
    ("gsm8k/elf-reg-l", 12, 56_345, {"6": 28_173, "7.5": 35_216, "8": 37_563}, {"8": 37_563, "12": 56_345}),
])
def test_gsm8k_baselines_train_the_papers_epochs(preset, epochs, steps, kept, compared):
    """Rows, epochs and steps of each GSM8K preset against the paper (2,404,028 rows at batch 512), with the
    epochs where the paper compares the models (Fig. 3: ELF-L reaches 51.48 % at epoch 14, ELF-REG-L at 8)."""
    cfg, plan = _paper_plan(preset)
    assert (plan.rows, plan.epochs, plan.steps) == (GSM8K_ROWS, epochs, steps) == (
        GSM8K_ROWS, epochs, steps_for_epochs(epochs, GSM8K_ROWS, 512))
    assert plan.epoch_steps == kept and plan.compare_steps == compared
    # the paper's token figure is ELF-REG's 12 epochs (6.696B); a baseline's run scales it per epoch
    assert plan.tokens == pytest.approx(6.696e9 * epochs / 12, rel=1e-4)
    text = format_plan(plan)
    assert f"{6.696 * epochs / 12:.3f}B" in text and "seeds/002:" in text
    for e in compared:
        assert f"paper compares at epoch {e}" in text


def test_mmlu_presets_plan_the_papers_30_epochs_and_tokens():
    for preset in ("mmlu/elf-b", "mmlu/elf-reg-b"):
        cfg, plan = _paper_plan(preset)
        assert cfg.data.task == "choice" and cfg.model.max_prompt_len == 512
        assert (plan.rows, plan.epochs, plan.steps, plan.warmup_steps) == (96_112, 30, 5_632, 94)
        assert plan.tokens == pytest.approx(1.259e9, rel=1e-4)
        # EMA 0.999 over 5,632 steps keeps 0.36 % of the initialisation (0.9999 would keep 57 %)
        assert plan.ema_decay == 0.999 and 0.999 ** plan.steps == pytest.approx(0.00357, rel=0.01)
        text = format_plan(plan)
        assert "1.259B" in text and "0.999 (0.36% after 5,632 steps)" in text and "Table 21" in text


def test_math_plan_shows_where_it_starts_and_what_continues():
    cfg, plan = _paper_plan("math/elf-reg-l")
    assert plan.start == {"from": "runs/gsm8k-elf-reg-l/epoch-7.5", "weights": "online", "optimizer": "continue",
                          "found": "not there yet"}
    assert plan.warmup_steps == 0  # the optimiser continues: no second warm-up
    text = format_plan(plan)
    assert "online / continued / continued" in text and "seeds/002:192" in text
    cfg.train.init_weights, cfg.train.init_optimizer = "ema", "fresh"
    assert "ema / fresh / continued" in format_plan(make_plan(cfg, gsm8k_stand_in(cfg.paper.rows, 1_703_125_000)))


def test_offline_dry_run_of_a_hub_preset_fails_fast_naming_each_source(monkeypatch, capsys):
    """With the hub unreachable, the dry run stops at once (no retries) and says what to point at local copies."""
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="cmd"))
    args = p.parse_args(["train", "--config", str(REPO / "configs/gsm8k/elf-reg-b.yaml"), "--dry-run"])
    t0 = time.monotonic()
    assert args.func(args) == 2
    assert time.monotonic() - t0 < 30  # was ~40-50 s of hub retries
    err = capsys.readouterr().err
    assert "hub is unreachable (HF_HUB_OFFLINE is set)" in err
    assert "backbones.encoder = Qwen/Qwen3-0.6B-Base" in err and "backbones.encoder=DIR" in err
    assert "data.sources[0] (openmathinstruct2-gsm8k) = hub dataset nvidia/OpenMathInstruct-2" in err
    assert "data.sources[1] (metamathqa)" in err and "`path: DIR`" in err


def test_hub_probe_is_short_and_local_sources_need_no_hub(monkeypatch, tiny_lm_dir, sums_jsonl):
    import time

    from elfreg.hubaccess import hub_unreachable
    from elfreg.train.plan import check_sources

    from huggingface_hub import constants

    # the CI machine may run offline: both the variable and the value huggingface_hub read from it at import
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    t0 = time.monotonic()
    why = hub_unreachable(timeout_s=2.0)
    assert why is not None and "127.0.0.1:9" in why and time.monotonic() - t0 < 10
    # a run whose encoder and data are local never probes
    cfg = load_run_config(REPO / "configs/tiny-smoke.yaml", tiny_overrides(tiny_lm_dir, sums_jsonl))
    assert check_sources(cfg, probe=lambda: pytest.fail("probed the hub for a local run")) is False


def test_a_time_budget_plans_its_cap_as_at_most():
    """configs/small-cpu.yaml trains as many steps as fit train.minutes: the plan says its steps, epochs and tokens
    are a cap, not the run's length."""
    cfg = load_run_config(REPO / "configs/small-cpu.yaml")
    plan = make_plan(cfg, RowLengths(np.full(1000, 20), np.full(1000, 27), rows_read=1000))
    assert plan.minutes == 9 and plan.steps == 4800
    text = format_plan(plan)
    assert "at most 4,800 (as many as fit 9 minutes: train.minutes)" in text
    assert "at most 153.6" in text   # epochs: 4,800 x 32 / 1,000
    assert "at most" not in format_plan(make_plan(load_run_config(REPO / "configs/tiny-smoke.yaml"),
                                                  RowLengths(np.full(10, 5), np.full(10, 5), rows_read=10)))
