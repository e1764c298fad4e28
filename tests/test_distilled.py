"""A distilled model folder's record (distill.json) and the sampler defaults it gives the commands."""

import json

import pytest

from elfreg.configtools import ConfigError
from elfreg.distilled import DistillRecord, read_record, sampler_defaults, write_record
from elfreg.sampling.config import with_model_defaults


def test_record_round_trips_and_defaults_to_one_step_full_span(tmp_path):
    rec = DistillRecord(teacher="runs/t/model", method="pd", rounds=[16, 8, 4, 2, 1], steps=1,
                        trained_steps=[10, 10, 10, 10, 10])
    assert rec.sampler == {"sampler": "full-span", "grid": "uniform", "nfe": 2}
    write_record(tmp_path, rec)
    assert read_record(tmp_path) == rec
    assert sampler_defaults(tmp_path) == rec.sampler and sampler_defaults(str(tmp_path)) == rec.sampler
    assert read_record(tmp_path / "elsewhere") is None and sampler_defaults(tmp_path / "elsewhere") == {}
    assert sampler_defaults("someone/hub-model") == {}


def test_a_broken_record_names_its_file(tmp_path):
    (tmp_path / "distill.json").write_text("{not json")
    with pytest.raises(ValueError, match="distill.json: not a distillation record"):
        read_record(tmp_path)
    (tmp_path / "distill.json").write_text(json.dumps({"version": 1, "teacher": "t", "method": "magic", "rounds": [1],
                                                       "steps": 1}))
    with pytest.raises(ValueError, match="distill.json.*method"):
        read_record(tmp_path)
    with pytest.raises(ConfigError, match="steps"):
        DistillRecord(teacher="t", method="pd", rounds=[1], steps=0)


def test_flags_given_win_over_the_models_defaults():
    own = {"sampler": "full-span", "grid": "uniform", "nfe": 3}
    assert with_model_defaults(own) == own
    assert with_model_defaults(own, nfe=5) == {"sampler": "full-span", "grid": "uniform", "nfe": 5}
    # another sampler: the model's grid goes with its own sampler only
    assert with_model_defaults(own, sampler="early-stop") == {"sampler": "early-stop", "grid": "logit-normal",
                                                               "nfe": 3}
    assert with_model_defaults({}) == {"sampler": "early-stop", "grid": "logit-normal", "nfe": 64}
