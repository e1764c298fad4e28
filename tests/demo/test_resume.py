"""`elfreg demo` resumes its training runs only with the settings that made them (issue 28); fast: every refusal
comes before the backbones are loaded."""

import json

from elfreg.cli import main
from elfreg.demo.cli import demo_config
from elfreg.demo.prepare import with_training_precision
from elfreg.demo.runner import claim_runs
from elfreg.demo.runs import run_fingerprint


def _first_run_made(out, overrides=()):
    """The record a first `demo --quick` leaves before its first checkpoint, plus a checkpoint of ELF seed 0."""
    claim_runs(with_training_precision(demo_config(True, list(overrides)))[0], out)
    ckpt = out / "ELF" / "seed-0" / "ckpt-00000003"
    ckpt.mkdir()
    (ckpt / "COMPLETE").write_text(json.dumps({"step": 3}))
    return out / "ELF" / "seed-0"


def test_demo_refuses_a_run_made_with_other_settings_before_writing_anything(tmp_path, capsys):
    out = tmp_path / "out"
    fp32 = "train.precision=fp32"  # auto's choice depends on the shapes (and the CPU): fixed, it is not a change
    run = _first_run_made(out, [fp32])
    files = sorted(p.relative_to(out) for p in out.rglob("*"))
    for change, said in (("train.lr=0.1", "train.lr=0.002, now train.lr=0.1"),
                         ("student.width=32", "student.width=64, now student.width=32"),
                         ("task.n_train=80", "task.n_train=64, now task.n_train=80"),
                         ("eval.curve_every=2", "curve.every=3, now curve.every=2")):
        assert main(["demo", "--quick", "--out", str(out), "--no-progress", fp32, change]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"elfreg demo: error: {run}: was made with {said}; pass --restart to start over, "
                       "or use another --out"], change
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == files  # demo_config.yaml not rewritten


def test_demo_keys_that_may_change_on_resume():
    base = demo_config(True, [])
    for change in ("train.log_every=1", "train.save_every=2", "train.seeds=[0,1,2]", "lanes=1", "threads=4",
                   "eval.nfes=[2,4,8]", "eval.seeds=[0,5]", "eval.batch_size=3", "eval.samplers=[renoise]"):
        assert run_fingerprint(demo_config(True, [change]), "ELF", 0) == run_fingerprint(base, "ELF", 0), change
    # a decaying schedule (the demo's) ends at the last step: the length is part of the run
    assert run_fingerprint(demo_config(True, ["train.steps=7"]), "ELF", 0) != run_fingerprint(base, "ELF", 0)
    assert run_fingerprint(base, "ELF", 1) != run_fingerprint(base, "ELF", 0)


def test_demo_restart_moves_the_old_output_aside(tmp_path, monkeypatch):
    import elfreg.demo.runner as demo_run

    out = tmp_path / "out"
    _first_run_made(out)
    seen = []

    def stop(cfg, cache_dir, progress, phases):  # the first step after the checks: stop there
        seen.append(sorted(p.name for p in out.iterdir()))
        raise KeyboardInterrupt

    monkeypatch.setattr(demo_run, "prepare", stop)
    try:
        demo_run.run_demo(demo_config(True, ["train.lr=0.1"]), out, restart=True)
    except KeyboardInterrupt:
        pass
    # the old output moved aside; the new one is empty until the plan is made (its runs' records come with it)
    assert [p.name for p in tmp_path.glob("out.replaced-*")] and seen == [[]]
    assert not list(out.rglob("ckpt-*"))
