import pytest

from elfreg.diagnose.config import DiagnoseConfig


def test_end_is_added_and_steps_follow_nfe():
    cfg = DiagnoseConfig(steps=16, readouts=(8, 2, 4), early_nfe=4)
    assert cfg.readouts == (2, 4, 8, 16)
    assert cfg.readout_steps == [0, 2, 6]
    sc = cfg.sampler_config(3)
    assert (sc.sampler, sc.nfe, sc.master_points, sc.grid, sc.seed) == ("full-span", 16, 16, "logit-normal", 3)
    assert cfg.sampler_config(0, "uniform", 9).master_points == 9
    assert cfg.to_dict()["readouts"] == [2, 4, 8, 16]


@pytest.mark.parametrize("kwargs, match", [
    (dict(steps=2), r"steps: need an integer in \[3, 65536\] \(points of the master path\), got 2"),
    (dict(steps=16, readouts=(4,), early_nfe=4, seeds=(0, 2 ** 64)), r"seeds: need an integer in \[0, 2\^63-1\]"),
    (dict(steps=16, readouts=(4,), early_nfe=4, w=float("nan")), r"w: need a number in \[0, 100\] .*got nan"),
    (dict(steps=16, readouts=(1, 4)), r"readouts: NFE values must lie in \[2, steps = 16\]"),
    (dict(steps=16, readouts=(4, 17)), "readouts"),
    (dict(steps=16, readouts=()), "readouts: need a non-empty list"),
    (dict(steps=16, readouts=(4,), early_nfe=8), "early_nfe: 8 is not one of the readouts"),
    (dict(steps=16, readouts=(4,), early_nfe=4, seeds=(0, 0)), "seeds: need distinct"),
    (dict(steps=16, readouts=(4,), early_nfe=4, accel_steps=2), "accel_steps"),
    (dict(steps=16, readouts=(4,), early_nfe=4, state_dtype="int8"), "state_dtype"),
    (dict(steps=16, readouts=(4,), early_nfe=4, sigma=0.0), r"sigma: need a number in \(0, 100\]"),
    (dict(steps=16, readouts=(4,), early_nfe=4, batch_size=0), "batch_size"),
])
def test_validation_names_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DiagnoseConfig(**kwargs)
