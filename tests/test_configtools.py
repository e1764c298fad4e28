import pytest

from elfreg.config import ElfRegConfig, ModelConfig, ObjectiveConfig, model_preset
from elfreg.configtools import ConfigError, apply_overrides, from_dict, load_yaml, to_dict


def test_unknown_key_names_the_field():
    with pytest.raises(ConfigError, match=r"model\.widht"):
        from_dict(ElfRegConfig, {"model": {"widht": 3}})


def test_bad_value_names_the_field():
    with pytest.raises(ConfigError, match=r"objective\.decoder_prob"):
        from_dict(ElfRegConfig, {"objective": {"decoder_prob": 1.5}})
    with pytest.raises(ConfigError, match=r"model\.depth"):
        from_dict(ElfRegConfig, {"model": {"depth": "deep"}})
    with pytest.raises(ConfigError, match=r"objective\.w_law"):
        from_dict(ElfRegConfig, {"objective": {"w_law": "gaussian"}})
    with pytest.raises(ConfigError, match=r"model\.width"):
        ModelConfig(width=100, heads=12)


def test_objective_must_fit_model():
    with pytest.raises(ConfigError, match=r"objective\.use_reg"):
        ElfRegConfig(model=model_preset("elf-b"), objective=ObjectiveConfig(use_repa=False))


def test_overrides_and_roundtrip(tmp_path):
    data = apply_overrides(to_dict(ElfRegConfig()), ["model.width=256", "model.heads=4", "objective.w_law=log_uniform",
                                                     "model.head_token_ids=[1, 2, 3]"])
    cfg = from_dict(ElfRegConfig, data)
    assert (cfg.model.width, cfg.model.heads, cfg.objective.w_law) == (256, 4, "log_uniform")
    assert cfg.model.head_token_ids == [1, 2, 3]
    assert from_dict(ElfRegConfig, to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["model.width"])


def test_yaml_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  width: 3\n  depth: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+"):
        load_yaml(path)
    with pytest.raises(ConfigError, match="not found"):
        load_yaml(tmp_path / "missing.yaml")


def test_paper_defaults():
    o = ObjectiveConfig()
    assert (o.sigma, o.c_t_floor, o.t_mean, o.t_std, o.decoder_prob, o.self_cond_prob) == (2.0, 0.05, -1.5, 0.8, 0.2, 0.5)
    assert (o.w_min, o.w_max, o.repa_weight, o.reg_weight, o.repa_shift) == (0.5, 5.0, 0.5, 0.1, 0)
    assert model_preset("elf-reg-l").repa_block == 8 and model_preset("elf-reg-b").repa_block == 4
