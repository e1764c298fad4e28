"""train.minutes (elfreg.train.budget): the length that fits a wall-clock budget, decided at each checkpoint until the
learning rate decays, kept on resume."""

import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import REPO
from _tiny import tiny_overrides
from elfreg.configtools import ConfigError
from elfreg.train.budget import DECIDE_AT, MARGIN, TimeBudget, steps_within
from elfreg.train.config import TrainConfig, load_run_config
from elfreg.train.optim import lr_at
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
    # (1 - MARGIN)(60 - 15) = 40.5 s left at 1 s a step
    assert MARGIN == 0.1 and n == 13 + 40 == 53 and b.steps == 53
    assert b.record["step_s"] == 1.0 and b.record["decided_at_step"] == 13
    assert b.record["first"] == {"step": 13, "steps": 53} and b.record["decisions"] == 1
    assert not b.force_checkpoint()   # decided: never forced again
    saved = json.loads(json.dumps(b.state()))
    later = TimeBudget(minutes=1.0, cap=500, clock=clock)
    later.restore(saved)
    assert later.steps == 53 and later.elapsed() == 15.0 and later.record == b.record


def test_time_budget_decides_again_from_the_steps_since_the_last_decision():
    clock = FakeClock()
    b = TimeBudget(minutes=1.0, cap=500, clock=clock)
    for s in [9.0] * 3 + [1.0] * 10:
        b.step_done(s)
    clock.t += 15.0
    # (1 - MARGIN)(60 - 15) = 40.5 s, 3 s of it for the final checkpoint: 37 steps
    assert b.decide(13, 1.0, 3.0, never, every(1000)) == 13 + 37
    for _ in range(5):   # the machine got slower: 2 s a step since the decision
        b.step_done(2.0)
    clock.t += 10.0
    # 2 s a step (the recent mean, above the process's 1.33 s), 4 s a checkpoint (the mean of 3 and 5):
    # (1 - MARGIN)(60 - 25) = 31.5 s, 27.5 s after the final checkpoint: 13 steps
    assert b.decide(18, 1.0, 5.0, never, every(1000)) == 18 + 13
    r = b.record
    assert (r["step_s"], r["checkpoint_s"], r["validation_s"]) == (2.0, 4.0, 1.0)   # means over the checkpoints
    assert r["first"] == {"step": 13, "steps": 50} and r["decisions"] == 2 and r["decided_at_step"] == 18
    # faster again (0.5 s a step): the process's mean, the larger one, plans (the first 3 steps left out), so a fast
    # stretch does not plan steps the rest of the run cannot take
    for _ in range(5):
        b.step_done(0.5)
    assert b.step_time() == (10 * 1.0 + 5 * 2.0 + 5 * 0.5) / 20 > 0.5
    # a length whose decay would have begun already is never chosen: at least ``least``, at most the cap
    assert b.decide(18, 1.0, 5.0, never, every(1000)) == 18 + 24   # 1.125 s a step, 4.33 s a checkpoint: 42
    assert b.decide(18, 1.0, 5.0, never, every(1000), least=50) == 50
    assert b.decide(18, 1.0, 5.0, never, every(1000), least=900) == 500


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
    """A Trainer whose budget runs on ``clock``, which moves one second in each optimiser step (before the step's
    checkpoint, as a real step's time passes); validations and checkpoints take no time."""
    trainer = Trainer(trainer_cfg, out, hooks=list(hooks))
    trainer.budget.clock = clock
    trainer.budget.start = clock()
    step_once = trainer.step_once

    def timed(step):
        clock.t += 1.0
        return step_once(step)

    trainer.step_once = timed
    return trainer.run()


# 30 s at 1 s a step, a checkpoint every 4 steps, constant learning rate: decided at each checkpoint k as
# k + floor((1 - MARGIN)(30 - k)): 4 -> 27, 8 -> 27, 12 -> 28, 16 -> 28, 20 -> 29, 24 -> 29, 28 -> 29; the run
# stops at 29
DECISIONS = {4: 27, 8: 27, 12: 28, 16: 28, 20: 29, 24: 29, 28: 29}


def test_the_run_trains_the_steps_that_fit_and_records_them(tmp_path, tiny_lm_dir, sums_jsonl):
    res = run(cfg(tiny_lm_dir, sums_jsonl), tmp_path / "run", FakeClock())
    assert all(k + int((1 - MARGIN) * (30 - k)) == n for k, n in DECISIONS.items())
    assert res.step == 29
    tb = res.summary["time_budget"]
    assert (tb["decided_at_step"], tb["steps"], tb["step_s"], tb["cap"]) == (28, 29, 1.0, 40)
    assert tb["first"] == {"step": 4, "steps": 27} and tb["decisions"] == len(DECISIONS)
    assert res.summary["planned_steps"] == 29
    state = json.loads((res.last_checkpoint / "train_state.json").read_text())
    assert state["budget"]["steps"] == 29
    card = (res.model_dir / "README.md").read_text()
    assert "train.minutes" in card and "first decided at step 4 (27 steps)" in card and "last at step 28" in card


def test_the_length_is_decided_again_only_until_the_decay_begins(tmp_path, tiny_lm_dir, sums_jsonl):
    over = {"train.lr_schedule": "linear", "train.decay_fraction": 0.5, "train.warmup_steps": 5}
    run_cfg = cfg(tiny_lm_dir, sums_jsonl, **over)
    res = run(run_cfg, tmp_path / "run", FakeClock())
    # the decay covers the last round(0.5 (N - 5)) steps: at N = 27 and 28 it begins at step 16. Decided at 4 (27),
    # 8 (27), 12 (28), 16 (28: no step has decayed yet); from step 20 the decay runs and the length stays 28 (a
    # decision there would have given 29)
    tb = res.summary["time_budget"]
    assert (res.step, tb["decided_at_step"], tb["decisions"]) == (28, 16, 4)
    # every step trained at the rate a 28-step run gives it, the decay's steps included
    assert [h["lr"] for h in res.history] == pytest.approx([lr_at(k, run_cfg.train, 5, 28) for k in range(28)])
    assert res.history[-1]["lr"] == 0.0


def test_a_checkpoint_is_forced_to_decide_in_time(tmp_path, tiny_lm_dir, sums_jsonl):
    res = run(cfg(tiny_lm_dir, sums_jsonl, **{"train.save_every": 100, "train.minutes": 0.2}), tmp_path / "run",
              FakeClock())
    # 12 s: DECIDE_AT (3 s) is spent by step 3; then (1 - MARGIN)(12 - 3) = 8.1 s: 8 more steps
    assert res.summary["time_budget"]["decided_at_step"] == 3 and res.step == 11
    assert (tmp_path / "run" / "ckpt-00000003").is_dir()


@pytest.mark.parametrize("kill_after, first", [(10, 4), (6, 8)])
def test_a_resumed_run_decides_as_the_uninterrupted_one(tmp_path, tiny_lm_dir, sums_jsonl, kill_after, first):
    """Killed after step 10, it resumes from step 8's checkpoint (written before step 8's decision: it holds step 4's
    and 8 s spent); after step 6, from step 4's (4 s spent, nothing decided yet), and decides first at 8. Both
    then decide at each checkpoint from the recorded seconds as the uninterrupted run did: the same run, weight for
    weight."""
    ref = run(cfg(tiny_lm_dir, sums_jsonl), tmp_path / "ref", FakeClock())

    def crash(step):
        if step == kill_after:
            raise RuntimeError("killed")

    out = tmp_path / "crashy"
    with pytest.raises(RuntimeError, match="killed"):
        run(cfg(tiny_lm_dir, sums_jsonl), out, FakeClock(), hooks=[crash])
    res = run(cfg(tiny_lm_dir, sums_jsonl), out, FakeClock())
    tb = res.summary["time_budget"]
    assert tb["first"] == {"step": first, "steps": 27} and tb["elapsed_s"] == 28.0
    assert res.step == ref.step == 29
    for name in ("weights.safetensors", "model/model.safetensors"):
        a, b = load_file(str(ref.last_checkpoint / name)), load_file(str(res.last_checkpoint / name))
        assert all(torch.equal(a[k], b[k]) for k in a)
