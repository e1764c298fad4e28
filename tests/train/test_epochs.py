"""Runs with budgets in epochs (spec §7): exact step counts, kept epoch checkpoints, token and overflow counts,
MATH starting from the GSM8K run's epoch-7.5 checkpoint, bad budgets refused before any work."""

import json
import os
from pathlib import Path

import pytest
import torch

from _tiny import sum_rows, tiny_overrides
from elfreg.configtools import ConfigError
from elfreg.tasks.formats import apply_template
from elfreg.pretrained import ElfModel
from elfreg.train import checkpoint as ck
from elfreg.train.config import load_run_config
from elfreg.train.trainer import Trainer, train

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs/tiny-smoke.yaml"
LONG = {"prompt": "what is 1 plus 2 plus 3 plus 4 plus 5 ?", "response": "15", "answer": "15"}  # prompt > cap 12


def data_file(tmp_path: Path, long_rows: int = 0) -> Path:
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in sum_rows() + [LONG] * long_rows))
    return path


def epoch_cfg(lm, data, **over):
    base = {"train.steps": "null", "train.warmup_steps": "null", "train.warmup_epochs": 0.5, "train.save_every": 100,
            "train.keep_last": 1, "train.log_every": 1}
    return load_run_config(CONFIG, tiny_overrides(lm, data, **{**base, **over}))


def test_epoch_budget_runs_exact_steps_keeps_epoch_checkpoints_and_counts_tokens(tmp_path, tiny_lm_dir):
    from transformers import AutoTokenizer

    data = data_file(tmp_path, long_rows=2)  # 55 sums fit, 2 rows overflow (3.5 % < the 5 % bound)
    cfg = epoch_cfg(tiny_lm_dir, data, **{"train.epochs": 2.5, "train.keep_epochs": "[1, 1.5]"})
    res = train(cfg, tmp_path / "run")
    # steps = ceil(2.5 x 55 / 8) = 18; epoch 1 -> ceil(55 / 8) = 7; epoch 1.5 -> ceil(82.5 / 8) = 11
    assert res.step == 18 and len(res.history) == 18
    assert [s for s, _ in ck.list_checkpoints(tmp_path / "run")] == [7, 11, 18]  # keep_last 1 spares the epochs
    assert os.readlink(tmp_path / "run" / "epoch-1") == "ckpt-00000007"
    assert os.readlink(tmp_path / "run" / "epoch-1.5") == "ckpt-00000011"
    # warm-up round(0.5 x 55 / 8) = 3 steps
    lr = [h["lr"] for h in res.history[:4]]
    assert lr == pytest.approx([cfg.train.lr / 3, 2 * cfg.train.lr / 3, cfg.train.lr, cfg.train.lr])
    # tokens the paper's way: prompt + response + EOS of each example, no EOS padding
    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    per_row = {len(tok(p)["input_ids"]) + len(tok(r)["input_ids"]) + 1
               for p, r in (apply_template(x, "math") for x in sum_rows())}
    assert per_row == {16}  # on a 24-token canvas: 8 padding positions per row are not counted
    assert all(h["tokens"] == 8 * 16 and h["canvas_tokens"] == 8 * 24 for h in res.history)
    sm = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert sm == {**sm, "steps": 18, "tokens_total": 18 * 8 * 16, "examples": 144, "epoch": pytest.approx(144 / 55),
                  "epoch_checkpoints": {"1": 7, "1.5": 11}}
    assert sm["plan"]["overflow_prompt"] == 2 and sm["plan"]["rows"] == 55  # per pass, counted before the run
    # the run's count: each pass that reaches a long row skips it again (2 full passes + part of a third)
    assert 4 <= sm["overflow_skipped"] <= 6 and sm["overflow_rows_read"] == 144 + sm["overflow_skipped"]
    assert sm["overflow_fraction"] == sm["overflow_skipped"] / sm["overflow_rows_read"]
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["tokens_total"] == 18 * 8 * 16 and last["epoch"] == pytest.approx(144 / 55)
    assert last["overflow_skipped"] == sm["overflow_skipped"]


def test_resumed_epoch_run_keeps_its_counts(tmp_path, tiny_lm_dir, sums_jsonl):
    class Stop(RuntimeError):
        pass

    def stop_at_8(step):
        if step == 8:
            raise Stop

    cfg = epoch_cfg(tiny_lm_dir, sums_jsonl, **{"train.epochs": 2, "train.keep_epochs": "[1]"})
    ref = train(cfg, tmp_path / "ref")
    with pytest.raises(Stop):
        train(cfg, tmp_path / "run", hooks=[stop_at_8])
    res = train(cfg, tmp_path / "run")  # resumes from the epoch-1 checkpoint (step 7)
    assert res.step == ref.step == 14
    assert res.summary["tokens_total"] == ref.summary["tokens_total"] == 14 * 8 * 16
    a = ElfModel.from_pretrained(ref.model_dir).student.state_dict()
    b = ElfModel.from_pretrained(res.model_dir).student.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_math_preset_starts_from_the_gsm8k_epoch_7_5_checkpoint(tmp_path, tiny_lm_dir, sums_jsonl, monkeypatch):
    """The MATH preset's init_from, resolved in a folder holding a (tiny) GSM8K run with the GSM8K preset's kept
    epochs, is that run's epoch-7.5 checkpoint. By the preset's choice the run continues it: the online weights,
    the optimiser state and the EMA; `init_weights: ema` + `init_optimizer: fresh` start from the EMA weights with
    a new optimiser (the EMA continues in both)."""
    gsm = load_run_config(REPO / "configs/gsm8k/elf-reg-b.yaml").train
    math = load_run_config(REPO / "configs/math/elf-reg-b.yaml").train
    assert 7.5 in gsm.keep_epochs and math.init_from == "runs/gsm8k-elf-reg-b/epoch-7.5" and math.epochs == 8
    assert (math.init_weights, math.init_optimizer, math.warmup_steps, math.warmup_epochs) == (
        "online", "continue", 0, None)
    monkeypatch.chdir(tmp_path)
    keep = "[" + ", ".join(f"{e:g}" for e in gsm.keep_epochs) + "]"
    gsm_run = train(epoch_cfg(tiny_lm_dir, sums_jsonl, **{"train.epochs": 8, "train.batch_size": 16,
                                                          "train.keep_epochs": keep}), "runs/gsm8k-elf-reg-b")
    ckpt_7_5 = Path("runs/gsm8k-elf-reg-b/epoch-7.5").resolve()
    assert ckpt_7_5.name == "ckpt-00000026" and gsm_run.step == 28  # ceil(7.5 x 55 / 16), ceil(8 x 55 / 16)
    src_ema = ElfModel.from_pretrained(ckpt_7_5 / "model")
    online = ck.load_tensors(ckpt_7_5 / "weights.safetensors")
    saved_opt = ck.load_tensors(ckpt_7_5 / "optimizer.safetensors")
    final = ElfModel.from_pretrained(gsm_run.model_dir)

    def start(**over):
        return Trainer(epoch_cfg(tiny_lm_dir, sums_jsonl, **{"train.epochs": math.epochs, "train.batch_size": 16,
                                                             "train.init_from": math.init_from,
                                                             "train.warmup_epochs": "null",
                                                             "train.warmup_steps": 0, **over}), "runs/math")

    t = start(**{"train.init_weights": math.init_weights, "train.init_optimizer": math.init_optimizer})
    weights, ema = t.student.state_dict(), t.ema.shadow
    assert all(torch.equal(weights[k], v) for k, v in online.items())  # the trained (online) weights
    assert not all(torch.equal(weights[k], v) for k, v in src_ema.student.state_dict().items())
    assert all(torch.equal(ema[k], v.float()) for k, v in src_ema.student.state_dict().items())  # EMA continues
    opt, _ = ck.flatten_optimizer(t.optim.state_dict())
    assert saved_opt and opt.keys() == saved_opt.keys() and all(torch.equal(opt[k], saved_opt[k]) for k in opt)
    assert torch.equal(t.elf.x_stats.mean, src_ema.x_stats.mean) and t.total_steps == 28 and t.warmup_steps == 0
    assert t.step_once(0)["lr"] == t.cfg.train.lr  # it trains on from there, at full lr (no second warm-up)
    # the earlier behaviour, now a stated choice: EMA weights (not the end model), a fresh optimiser
    t = start(**{"train.init_weights": "ema", "train.init_optimizer": "fresh", "train.warmup_steps": "null",
                 "train.warmup_epochs": 0.5})
    weights = t.student.state_dict()
    assert all(torch.equal(weights[k], v) for k, v in src_ema.student.state_dict().items())
    assert not all(torch.equal(weights[k], v) for k, v in final.student.state_dict().items())
    assert not ck.flatten_optimizer(t.optim.state_dict())[0]  # no state yet
    # a model folder has no online weights and no optimiser state: the fields say so
    with pytest.raises(ConfigError, match="train.init_weights: 'online' needs a checkpoint"):
        start(**{"train.init_from": str(gsm_run.model_dir)})
    with pytest.raises(ConfigError, match="train.init_optimizer: 'continue' needs a checkpoint"):
        start(**{"train.init_from": str(gsm_run.model_dir), "train.init_weights": "ema"})


def test_bad_budgets_fail_before_any_work(tmp_path, tiny_lm_dir, sums_jsonl):
    with pytest.raises(ConfigError, match=r"train.epochs.*both set"):
        epoch_cfg(tiny_lm_dir, sums_jsonl, **{"train.epochs": 2, "train.steps": 5})
    with pytest.raises(ConfigError, match=r"train.keep_epochs: epoch 2.75 is beyond the run's train.epochs = 2.5"):
        epoch_cfg(tiny_lm_dir, sums_jsonl, **{"train.epochs": 2.5, "train.keep_epochs": "[1, 2.75]"})
    cfg = epoch_cfg(tiny_lm_dir, sums_jsonl, **{"train.steps": 5, "train.keep_epochs": "[1.5]"})
    with pytest.raises(ConfigError, match=r"train.keep_epochs: epoch 1.5 \(step 11\) is beyond the run's 5 steps"):
        Trainer(cfg, tmp_path / "run")
    assert not ck.list_checkpoints(tmp_path / "run") and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_overflow_over_the_bound_stops_the_run(tmp_path, tiny_lm_dir):
    data = data_file(tmp_path, long_rows=6)  # 6 of 61 rows (9.8 %) overflow
    cfg = epoch_cfg(tiny_lm_dir, data, **{"train.epochs": 1})
    with pytest.raises(ValueError, match=r"canvas.max_overflow_fraction: 6 of 61 rows"):
        Trainer(cfg, tmp_path / "planned")  # epochs: the plan counts the rows first, nothing is trained
    assert not (tmp_path / "planned" / "metrics.jsonl").exists()
    # a step budget has no plan: the stream's running count stops the run once enough rows were read
    cfg = load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, data, **{"train.steps": 20, "train.log_every": 1,
                                                                       "canvas.overflow_check_rows": 40}))
    with pytest.raises(ValueError, match="canvas.max_overflow_fraction"):
        train(cfg, tmp_path / "streamed")
    cfg = load_run_config(CONFIG, tiny_overrides(tiny_lm_dir, data, **{"train.steps": 7,
                                                                       "canvas.max_overflow_fraction": 0.2}))
    res = train(cfg, tmp_path / "allowed")  # 56 examples: the whole first pass over the 61 rows was read
    assert res.summary["overflow_skipped"] >= 6 and res.summary["overflow_fraction"] <= 0.2


def test_feature_cache_counts_overflow_and_plans_from_its_rows(tmp_path, tiny_lm_dir):
    from elfreg.backbones import Backbones
    from elfreg.train.features import CachedFeatures

    cfg = epoch_cfg(tiny_lm_dir, data_file(tmp_path), **{"train.epochs": 1.5, "data.features": "cached"})
    backbones = Backbones(cfg.backbones)
    rows = sum_rows() + [LONG] * 2
    ds = CachedFeatures.build_or_load(rows, backbones, cfg.canvas_config(), tmp_path / "cache", progress=False)
    again = CachedFeatures.build_or_load(rows, backbones, cfg.canvas_config(), tmp_path / "cache", progress=False)
    for d in (ds, again):  # counted at build, kept in the manifest
        assert (len(d), d.overflow.kept, d.overflow.prompt_too_long, d.overflow.canvas_too_long) == (55, 55, 2, 0)
    assert ds.token_counts(backbones.tokenizer.eos_token_id).tolist() == [16] * 55
    t = Trainer(cfg, tmp_path / "run", backbones=backbones, dataset=ds)
    assert t.total_steps == 11 and t.plan.rows == 55 and t.plan.overflow_prompt == 2  # ceil(1.5 x 55 / 8)
    assert t.plan.tokens_per_epoch == 55 * 16 and t.warmup_steps == 3


def test_a_bad_row_found_while_counting_is_a_clear_error(tmp_path, tiny_lm_dir):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps(sum_rows()[0]) + "\n" + json.dumps({"prompt": "what is 1 ?", "response": "1"}) + "\n")
    with pytest.raises(ValueError, match=r"counting the training rows failed: BadRowError: .*bad.jsonl"):
        Trainer(epoch_cfg(tiny_lm_dir, data, **{"train.epochs": 1}), tmp_path / "run")
    assert "error" in json.loads((tmp_path / "run" / "data_counts.json").read_text())  # recounted next time
