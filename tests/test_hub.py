import json

import pytest
import torch

from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
from elfreg.data.templates import LEGACY_PROMPT_TEMPLATE
from elfreg.hub import ElfModel
from elfreg.stats import FeatureStats


def _model(tiny_lm_dir=None):
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=16, max_prompt_len=8),
                       backbones=BackboneConfig(encoder=str(tiny_lm_dir or "x/y"), encoder_layer=2, dtype="float32"))
    m = ElfModel.new(cfg, FeatureStats(torch.randn(32), torch.rand(32) + 0.5))
    torch.nn.init.normal_(m.student.final_linear.weight, std=0.1)
    return m


def test_save_load_roundtrip(tmp_path):
    m = _model()
    folder = m.save_pretrained(tmp_path / "model")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "stats.safetensors"]
    assert json.loads((folder / "config.json").read_text())["model"]["width"] == 128
    back = ElfModel.from_pretrained(folder)
    assert back.config == m.config
    assert torch.equal(back.x_stats.mean, m.x_stats.mean)
    z = torch.randn(2, 16, 32)
    args = (z, torch.zeros_like(z), torch.rand(2), torch.rand(2) + 1)
    r = torch.randn(2, 32)
    assert torch.equal(back.student(*args, reg=r).x_hat, m.student.eval()(*args, reg=r).x_hat)


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ElfModel.from_pretrained(tmp_path / "missing" / "model")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="missing config.json"):
        ElfModel.from_pretrained(tmp_path / "empty")
    folder = _model().save_pretrained(tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model"]["depth"] = 2
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="does not match the config"):
        ElfModel.from_pretrained(folder)
    (folder / "config.json").write_text("{bad")
    with pytest.raises(ValueError, match=r"config\.json:1"):
        ElfModel.from_pretrained(folder)


def test_hub_id_offline_is_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="Hugging Face hub"):
        ElfModel.from_pretrained("nobody-here/no-such-elfreg-model")


def test_encode_prompts(tiny_lm_dir):
    m = _model(tiny_lm_dir)
    x, mask, ids = m.encode_prompts(["what is 3 plus 4 ?", "what is 2"], formatted=True)
    assert x.shape == (2, 16, 32) and mask.sum(1).tolist() == [6, 3]
    # a causal encoder: the shorter prompt's features do not depend on batching / padding
    x1, _, _ = m.encode_prompts(["what is 2"], formatted=True)
    assert torch.allclose(x[1, :3], x1[0, :3], atol=1e-5)
    assert torch.count_nonzero(x[1, 3:]) == 0
    with pytest.raises(ValueError, match="max_prompt_len"):
        m.encode_prompts(["what " * 9], formatted=True)


def test_encode_prompts_applies_the_template_once(tiny_lm_dir):
    m = _model(tiny_lm_dir)
    m.prompt_template = "what is {question} ?"
    bare = m.encode_prompts(["3 plus 4"])
    done = m.encode_prompts(["what is 3 plus 4 ?"], formatted=True)
    assert bare[2] == done[2] == [m.tokenizer("what is 3 plus 4 ?", add_special_tokens=False)["input_ids"]]
    assert torch.equal(bare[0], done[0]) and torch.equal(bare[1], done[1])
    assert m.prompt_token_ids([" 3 plus 4\n"]) == done[2]          # the question is stripped inside the template
    assert m.format_prompts(["x"], formatted=True) == ["x"]


def test_prompt_template_saved_loaded_and_legacy_fallback(tmp_path):
    m = _model()
    m.prompt_template = "Problem: {question}\nSolution:"
    folder = m.save_pretrained(tmp_path / "m")
    assert json.loads((folder / "config.json").read_text())["prompt_template"] == "Problem: {question}\nSolution:"
    assert ElfModel.from_pretrained(folder).prompt_template == "Problem: {question}\nSolution:"
    assert ElfModel.new(m.config).prompt_template == LEGACY_PROMPT_TEMPLATE == "Question: {question}\nAnswer:"
    # a folder saved before templates were stored loads with the template every such model was trained on
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["prompt_template"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert ElfModel.from_pretrained(folder).prompt_template == LEGACY_PROMPT_TEMPLATE
    for bad, match in (("no field here", r"exactly one field \{question\}"), ("{question} {other}", "other"),
                       ("{question", "not a valid template"), (3, "expected a string")):
        cfg["prompt_template"] = bad
        (folder / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(ValueError, match=match) as err:
            ElfModel.from_pretrained(folder)
        assert "config.json: prompt_template" in str(err.value)
