"""train.minutes (elfreg.train.budget): the length that fits a wall-clock budget, decided once, kept on resume."""

import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import REPO
from _tiny import tiny_overrides
from elfreg.configtools import ConfigError
from elfreg.train.budget import DECIDE_AT, MARGIN, TimeBudget, steps_within
from elfreg.train.config import TrainConfig, load_run_config
from elfreg.train.trainer import Trainer

CONFIG = str(REPO / "configs/tiny-smoke.yaml")   # not relative: the tests may start anywhere


def every(n):
    """Checkpoints every n steps and at the run's last step."""
    return lambda k, length: k % n == 0 or k == length


def never(k, length):
    return False


@pytest.mark.parametrize("remaining, step, validation_s, want", [
    # N + 5 ceil(N / 30) <= 100: N = 85 costs 85 + 15 = 100, N = 86 costs 101
    (100.0, 0, 0.0, 85),
    # + 2 s a validation at each checkpoint: N + 7 ceil(N / 30) <= 100: 79 + 21 = 100, 80 + 21 = 101
    (100.0, 0, 2.0, 79),
    # from step 300: (N - 300) + 5 (ceil(N / 30) - 10) <= 100: 385 -> 85 + 15, 386 -> 86 + 15
    (100.0, 300, 0.0, 385),
    # a checkpoint at a multiple of 30 is not counted twice as the final one: 60 + 5 * 2 = 70
    (70.0, 0, 0.0, 60),
    (0.5, 40, 0.0, 40),            # not one more step fits
    (1e9, 0, 0.0, 1000),           # the cap
])
def test_steps_within_hand_computed(remaining, step, validation_s, want):
    val = (lambda k, length: k % 30 == 0 or k == length) if validation_s else never
    assert steps_within(remaining, step, 1000, 1.0, validation_s, 5.0, val, every(30)) == want


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_time_budget_decides_from_its_measurements_and_restores():
    clock = FakeClock()
    b = TimeBudget(minutes=1.0, cap=500, clock=clock)
    for s in [9.0, 9.0, 9.0] + [1.0] * 10:   # the first steps of a process are left out of the mean
        b.step_done(s)
    clock.t += 14.0
    assert not b.force_checkpoint() and b.elapsed() == 14.0
    clock.t += 1.0   # DECIDE_AT of the budget spent
    assert DECIDE_AT * 60 == 15.0 and b.force_checkpoint()
    n = b.decide(13, 0.0, 0.0, never, every(1000))
    # (1 - MARGIN)(60 - 15) = 42.75 s left at 1 s a step
    assert n == 13 + int((1 - MARGIN) * 45.0) == 55 and b.steps == 55
    assert b.record["step_s"] == 1.0 and b.record["decided_at_step"] == 13
    assert not b.force_checkpoint()   # decided: never again
    saved = json.loads(json.dumps(b.state()))
    later = TimeBudget(minutes=1.0, cap=500, clock=clock)
    later.restore(saved)
    assert later.steps == 55 and later.elapsed() == 15.0 and later.record == b.record


@pytest.mark.parametrize("over, field", [
    ({"minutes": 9}, "train.minutes"),                                          # no cap
    ({"minutes": 9, "epochs": 3}, "train.minutes"),                             # epochs cannot be the cap
    ({"minutes": 9, "steps": 100, "lr_schedule": "cosine"}, "train.decay_fraction"),   # decays from the start
    ({"minutes": 9, "steps": 100, "lr_schedule": "linear", "decay_fraction": 0.6}, "train.decay_fraction"),
    ({"minutes": 9, "steps": 100, "repa_weight_schedule": "decay"}, "train.repa_weight_schedule"),
    ({"minutes": 9, "steps": 100, "keep_epochs": [1]}, "train.keep_epochs"),
    ({"minutes": 0, "steps": 100}, "train.minutes"),
])
def test_minutes_refuses_what_needs_the_length_from_the_start(over, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        TrainConfig(**over)
    TrainConfig(minutes=9, steps=100, lr_schedule="linear", decay_fraction=0.2)   # the recipe's: fine


def cfg(lm, data, **over):
    return load_run_config(CONFIG, tiny_overrides(lm, data, **{"train.steps": 40, "train.minutes": 0.5,
                                                                "train.save_every": 4, "train.log_every": 1,
                                                                "train.keep_last": 20, **over}))


def run(trainer_cfg, out, clock, hooks=()):
    """A Trainer whose budget runs on ``clock``, which only the hooks move: one second a step, checkpoints free."""
    trainer = Trainer(trainer_cfg, out, hooks=[*hooks, lambda step: setattr(clock, "t", clock.t + 1.0)])
    trainer.budget.clock = clock
    trainer.budget.start = clock()
    return trainer.run()


def test_the_run_trains_the_steps_that_fit_and_records_them(tmp_path, tiny_lm_dir, sums_jsonl):
    res = run(cfg(tiny_lm_dir, sums_jsonl), tmp_path / "run", FakeClock())
    # decided after the first checkpoint (step 4, 4 s spent): (1 - MARGIN)(30 - 4) = 24.7 s at 1 s a step
    assert res.step == 4 + 24 == 28
    tb = res.summary["time_budget"]
    assert (tb["decided_at_step"], tb["steps"], tb["step_s"], tb["cap"]) == (4, 28, 1.0, 40)
    assert res.summary["planned_steps"] == 28
    state = json.loads((res.last_checkpoint / "train_state.json").read_text())
    assert state["budget"]["steps"] == 28
    card = (res.model_dir / "README.md").read_text()
    assert "train.minutes" in card and "decided at step 4" in card


def test_a_checkpoint_is_forced_to_decide_in_time(tmp_path, tiny_lm_dir, sums_jsonl):
    res = run(cfg(tiny_lm_dir, sums_jsonl, **{"train.save_every": 100, "train.minutes": 0.2}), tmp_path / "run",
              FakeClock())
    # 12 s: DECIDE_AT (3 s) is reached at step 4's checkpoint test; then (1 - MARGIN)(12 - 4) = 7.6 s: 7 steps
    assert res.summary["time_budget"]["decided_at_step"] == 4 and res.step == 11
    assert (tmp_path / "run" / "ckpt-00000004").is_dir()


@pytest.mark.parametrize("kill_after, decided_at", [(10, 4), (6, 8)])
def test_a_resumed_run_keeps_the_decided_length_or_decides_later(tmp_path, tiny_lm_dir, sums_jsonl, kill_after,
                                                                decided_at):
    ref = run(cfg(tiny_lm_dir, sums_jsonl), tmp_path / "ref", FakeClock())

    def crash(step):
        if step == kill_after:
            raise RuntimeError("killed")

    out = tmp_path / "crashy"
    with pytest.raises(RuntimeError, match="killed"):
        run(cfg(tiny_lm_dir, sums_jsonl), out, FakeClock(), hooks=[crash])
    res = run(cfg(tiny_lm_dir, sums_jsonl), out, FakeClock())
    assert res.summary["time_budget"]["decided_at_step"] == decided_at
    if decided_at == 4:   # the checkpoint at step 8 holds the decision: the same run, weight for weight
        assert res.step == ref.step == 28
        for name in ("weights.safetensors", "model/model.safetensors"):
            a, b = load_file(str(ref.last_checkpoint / name)), load_file(str(res.last_checkpoint / name))
            assert all(torch.equal(a[k], b[k]) for k in a)
    else:   # resumed from step 4's checkpoint, written before the decision: 3 s spent there, then 4 more
        assert res.summary["time_budget"]["elapsed_s"] == 3.0 + 4.0
        assert res.step == 8 + int((1 - MARGIN) * (30 - 7.0))
