"""Checkpoints: atomic folders, keep-last-k, a run killed and resumed reaches the same weights (issue 5.4)."""

import json

import pytest
import torch
from safetensors.torch import load_file

from helpers import REPO
from _tiny import tiny_overrides
from elfreg.pretrained import ElfModel
from elfreg.train import checkpoint as ck
from elfreg.train.config import load_run_config
from elfreg.train.trainer import TrainingDiverged, train

CONFIG = str(REPO / "configs/tiny-smoke.yaml")   # not relative: the tests may start anywhere


class Crash(RuntimeError):
    pass


def crash_at(k):
    def hook(step):
        if step == k:
            raise Crash(f"simulated kill after step {k}")
    return hook


def cfg(lm, data, **over):
    return load_run_config(CONFIG, tiny_overrides(lm, data, **{"train.steps": 9, "train.save_every": 3,
                                                                "train.keep_last": 2, **over}))


@pytest.mark.parametrize("kill_after", [4, 6])
def test_killed_run_resumes_to_identical_weights(tmp_path, tiny_lm_dir, sums_jsonl, kill_after):
    ref = train(cfg(tiny_lm_dir, sums_jsonl), tmp_path / "ref")
    out = tmp_path / "crashy"
    with pytest.raises(Crash):
        train(cfg(tiny_lm_dir, sums_jsonl), out, hooks=[crash_at(kill_after)])
    (out / ".tmp-ckpt-00000009-123").mkdir()  # a half-written checkpoint of a kill during saving
    res = train(cfg(tiny_lm_dir, sums_jsonl), out)
    assert res.step == ref.step == 9
    assert not (out / ".tmp-ckpt-00000009-123").exists()
    for name in ("weights.safetensors", "model/model.safetensors", "optimizer.safetensors"):
        a, b = load_file(str(ref.last_checkpoint / name)), load_file(str(res.last_checkpoint / name))
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (name, k)
    # metrics lines after the resumed checkpoint were rewritten, not duplicated
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps))


def test_keep_last_and_model_folder_loads(tmp_path, tiny_lm_dir, sums_jsonl):
    res = train(cfg(tiny_lm_dir, sums_jsonl), tmp_path / "run")
    assert [s for s, _ in ck.list_checkpoints(tmp_path / "run")] == [6, 9]
    model = ElfModel.from_pretrained(res.model_dir)
    ema = load_file(str(res.last_checkpoint / "model" / "model.safetensors"))
    raw = load_file(str(res.last_checkpoint / "weights.safetensors"))
    assert torch.equal(model.student.state_dict()["final_linear.weight"], ema["final_linear.weight"])
    assert not torch.equal(ema["final_linear.weight"], raw["final_linear.weight"])  # EMA differs from raw
    assert (res.last_checkpoint / "config.yaml").is_file()
    assert model.x_stats.std.shape == (32,) and not torch.equal(model.x_stats.std, torch.ones(32))


def test_resume_never_starts_over(tmp_path, tiny_lm_dir, sums_jsonl):
    train(cfg(tiny_lm_dir, sums_jsonl, **{"train.steps": 3}), tmp_path / "run")
    res = train(cfg(tiny_lm_dir, sums_jsonl, **{"train.steps": 3}), tmp_path / "run", resume="never")
    assert res.history and res.history[0]["step"] == 1


def test_nan_loss_names_step_and_checkpoint(tmp_path, tiny_lm_dir, sums_jsonl):
    def poison(step):
        if step == 3:
            with torch.no_grad():
                trainer_student.final_linear.weight.fill_(float("nan"))

    from elfreg.train.trainer import Trainer

    t = Trainer(cfg(tiny_lm_dir, sums_jsonl), tmp_path / "run", hooks=[poison])
    trainer_student = t.student
    with pytest.raises(TrainingDiverged, match=r"step 4; last good checkpoint: .*ckpt-00000003"):
        t.run()


def test_resume_with_a_changed_config_is_refused_in_one_line(tmp_path, tiny_lm_dir, sums_jsonl, capsys):
    from elfreg.cli import main

    out = tmp_path / "run"
    base = ["train", "--config", CONFIG, "--output", str(out),
            *tiny_overrides(tiny_lm_dir, sums_jsonl, **{"train.steps": 3, "train.save_every": 3})]
    assert main(base) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    for change, said in ((["train.lr=0.1"], "was made with train.lr=0.001, now train.lr=0.1"),
                         (["model.width=32"], "was made with model.width=64, now model.width=32")):
        assert main(base + change) == 2
        err = [x for x in capsys.readouterr().err.strip().splitlines() if not x.startswith("Loading weights")]
        assert err == [f"elfreg train: error: {out}: {said}; pass --restart to start over, or use another --output"]
        assert sorted(p.name for p in out.iterdir()) == before  # nothing written
    # where and how often: may change; the length too, under the constant schedule (the warm-up does not move)
    assert main(base + ["train.log_every=1", "train.save_every=2", "train.keep_last=3", "train.steps=4"]) == 0
    assert [s for s, _ in ck.list_checkpoints(out)] == [3, 4]
    # a decaying schedule ends at the run's last step: its length is part of the run
    assert main(base + ["train.lr_schedule=cosine", "--restart"]) == 0
    assert len(list(tmp_path.glob("run.replaced-*"))) == 1 and [s for s, _ in ck.list_checkpoints(out)] == [3]
    capsys.readouterr()
    assert main(base + ["train.lr_schedule=cosine", "train.steps=5"]) == 2
    assert "was made with train.steps=3, now train.steps=5" in capsys.readouterr().err
