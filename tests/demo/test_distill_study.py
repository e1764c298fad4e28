"""`elfreg demo --distill`: the task and its verifier, the settings, the real configs taking the study's overrides,
the targets' rule, and a whole tiny study (tiny Qwen3 backbones) that resumes without training again."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from elfreg.configfiles import resolve_config
from elfreg.configtools import ConfigError
from elfreg.demo import distill as study
from elfreg.demo.claims import compare

REPO = Path(__file__).resolve().parents[2]
SMALL = ["distill.epochs_per_round=null", "train.batch_size=4", "train.warmup_epochs=null", "train.warmup_steps=1",
         "train.ema_decay=0.5", "train.save_every=2", "train.log_every=1", "train.stats_canvases=16"]


def test_the_verifier_wants_three_equal_digits_on_the_first_line():
    assert study.answer_digit("7 7 7") == "7"
    assert study.answer_digit(" 0 0 0 \n#### 0") == "0"
    assert study.answer_digit("7 7 7\n#### 3") == "7"      # the first line decides
    for bad in ("9 7 9", "7 7", "7 7 7 7", "77 7 7", "a a a", "", "\n7 7 7", "7  7 7"):
        assert study.answer_digit(bad) is None, bad


def test_task_rows_are_seeded_and_cover_every_digit():
    rows = study.task_rows(500)
    assert rows == study.task_rows(500) and rows != study.task_rows(500, seed=1)
    assert {r["answer"] for r in rows} == {str(d) for d in range(10)}
    for r in rows:
        assert r["prompt"] == study.PROMPT and study.answer_digit(r["response"]) == r["answer"]


@pytest.mark.parametrize("override, field", [("seeds=[]", "seeds"), ("seeds=[1,1]", "seeds"),
                                             ("methods=[pd,cm]", "methods"), ("nfes=[2,3]", "nfes"),
                                             ("nfes=[1,16]", "nfes"), ("samples=1", "samples"), ("rows=5", "rows"),
                                             ("student=OLT", "student")])
def test_bad_settings_name_their_key(override, field):
    with pytest.raises(ConfigError, match=field):
        study.study_config([override])


def test_the_shipped_configs_take_the_studys_overrides(tmp_path):
    """The teacher's run and both distillations resolve from the real configs with the study's overrides."""
    from elfreg.distill import load_distill_config
    from elfreg.train.config import load_run_config

    cfg = study.study_config([])
    data = study.write_data(tmp_path, cfg)
    run = load_run_config(resolve_config(cfg.teacher_config),
                          study.teacher_settings(cfg, 2, data, tmp_path / "c", False))
    assert (run.model.width, run.train.steps, run.train.minutes, run.train.seed) == (64, 800, None, 2)
    assert (run.model.extra_token, run.objective.use_reg) == ("reg", True)
    elf = load_run_config(resolve_config(cfg.teacher_config), study.teacher_settings(
        study.study_config(["student=ELF"]), 2, data, tmp_path / "c", False))
    assert (elf.model.extra_token, elf.model.repa, elf.objective.use_repa, elf.objective.use_reg) == \
        ("none", False, False, False)
    assert (run.model.max_prompt_len, run.model.max_len) == (study.PROMPT_LEN, study.CANVAS_LEN)
    assert run.data.sources[0]["path"] == str(data) and len(data.read_text().splitlines()) == 3000
    pd = load_distill_config(resolve_config("distill/demo"), study.distill_overrides(cfg, "pd", 2, tmp_path, False),
                             method="pd")
    fm = load_distill_config(resolve_config("distill/demo"),
                             study.distill_overrides(cfg, "flowmap", 2, tmp_path, False), method="flowmap")
    assert pd.train.seed == fm.train.seed == 2
    # the flow map gets PD's optimiser steps, all rounds together
    assert fm.distill.steps_per_round == len(pd.distill.rounds) * pd.distill.steps_per_round
    # ... as PD is run here: its own overrides count (rounds 2 -> 1, 7 steps each: 14 for the flow map)
    short = study.study_config(["pd_overrides=['distill.rounds=[2,1]', 'distill.steps_per_round=7']"])
    fm2 = load_distill_config(resolve_config("distill/demo"),
                              study.distill_overrides(short, "flowmap", 2, tmp_path, False), method="flowmap")
    assert fm2.distill.steps_per_round == 14


def _cell(rows: list[list[int]]) -> dict:
    return study.cell({s: ["1" if x else None for x in r] for s, r in enumerate(rows)})


def test_within_three_points_is_judged_against_the_moved_line():
    """compare(..., against=-0.03): held beyond 2 s.e. above -3 points, did not hold beyond 2 s.e. below it."""
    teacher = _cell([[1] * 90 + [0] * 10] * 3)
    same = _cell([[1] * 90 + [0] * 10] * 3)                      # 0 points below: inside the line by 3
    far = _cell([[1] * 60 + [0] * 40] * 3)                       # 30 points below
    near = _cell([[1] * 88 + [0] * 12, [1] * 85 + [0] * 15, [1] * 91 + [0] * 9])   # 2.7 below, noisy
    assert compare(teacher, same, 1, None, -0.03)[0] == "held"
    assert compare(teacher, same, 1, None, 0.0)[0] == "inconclusive"   # "above" is not shown by a tie
    assert compare(teacher, far, 1, None, -0.03)[0] == "did not hold"
    assert compare(teacher, near, 1, None, -0.03)[0] == "inconclusive"
    # the answers themselves too noisy for the gap: no number of training seeds decides it, and the note names the
    # study's own knob
    a, b = _cell([[1] * 50 + [0] * 50] * 2), _cell([[0] * 48 + [1] * 52] * 2)
    outcome, _, needed, note = compare(a, b, 1, None, 0.0, units="answers", knob="samples")
    assert (outcome, needed) == ("inconclusive", None) and "more answers (samples) would be needed" in note
    assert "task.n_test" in compare(a, b, 1, None)[3]
    c = _cell([[1, 0, 1, 1], [0, 0, 1, 1]])
    assert c["acc"] == [0.75, 0.5] and c["mean"] == 0.625 and c["distinct"] == [1, 1]


def test_a_tiny_study_runs_reports_and_resumes_without_training(tmp_path, tiny_lm_dir, one_thread, monkeypatch,
                                                                  capsys):
    lm = [f"backbones.encoder={tiny_lm_dir}", f"backbones.teacher={tiny_lm_dir}", "train.batch_size=8",
          "train.stats_canvases=16", "train.save_every=4"]
    over = ["seeds=[0,1]", "rows=40", "teacher_steps=4", "samples=4", "nfes=[2,16]",
            f"teacher_config={REPO / 'configs/tiny-smoke.yaml'}", f"teacher_overrides={json.dumps(lm)}",
            f"pd_overrides={json.dumps(SMALL + ['distill.rounds=[2,1]', 'distill.steps_per_round=2'])}",
            f"flowmap_overrides={json.dumps(SMALL + ['distill.steps_per_round=2'])}"]
    cfg = study.study_config(over)
    lines: list[str] = []
    import elfreg.backbones

    loads = []
    real = elfreg.backbones.Backbones
    monkeypatch.setattr(elfreg.backbones, "Backbones", lambda *a, **k: loads.append(k) or real(*a, **k))
    res = study.run_study(cfg, tmp_path / "s", progress=False, log=lines.append)
    # the frozen networks of the six trainings (encoder and REG teacher) are loaded once; each scored model loads
    # its own encoder for sampling
    assert [k["need_teacher"] for k in loads].count(True) == 1
    monkeypatch.setattr(elfreg.backbones, "Backbones", real)
    assert set(res["cells"]) == {"teacher", "pd", "flowmap"}
    for model in res["cells"].values():
        assert set(model) == {"2", "16"}
        for c in model.values():
            assert c["train_seed"] == [0, 1] and [len(r) for r in c["correct"]] == [4, 4]
    assert [c["claim"] for c in res["claims"]] == [
        "the teacher needs its steps: NFE 16 above NFE 2", "PD at NFE 2 within 3 points of the teacher at NFE 16",
        "flow map at NFE 2 within 3 points of the teacher at NFE 16", "the flow map at NFE 2 above PD at NFE 2"]
    for seed in (0, 1):
        rec = json.loads((tmp_path / f"s/seed-{seed}/pd/model/distill.json").read_text())
        assert rec["method"] == "pd" and rec["teacher"].endswith(f"seed-{seed}/teacher/model")
        assert set(json.loads((tmp_path / f"s/seed-{seed}/seconds.json").read_text())) == {"teacher", "pd", "flowmap"}
    md = (tmp_path / "s/distill.md").read_text()
    assert "| flow map |" in md and "within 3 points" in md and "2 training seeds (0, 1)" in md
    assert json.loads((tmp_path / "s/distill.json").read_text())["cells"] == json.loads(json.dumps(res["cells"]))

    # the speed benchmark times every model of a seed and both AR baselines on the study's folder
    import runpy

    monkeypatch.setattr(sys, "argv", ["bench", "--study", str(tmp_path / "s"), "--batch", "1", "2", "--repeats", "1"])
    runpy.run_path(str(REPO / "benchmarks/bench_distill_speed.py"), run_name="__main__")
    printed = capsys.readouterr().out
    for row in ("teacher NFE 16", "PD NFE 2", "flow map NFE 2", "flow map NFE 3", "batch 1: AR matched", "batch 2:"):
        assert row in printed, row

    # a rerun trains nothing and samples nothing: every stage and score is read back
    import elfreg.distill
    import elfreg.train.trainer

    def refuse(*a, **k):
        raise AssertionError("a finished stage ran again")

    monkeypatch.setattr(elfreg.train.trainer, "train", refuse)
    monkeypatch.setattr(elfreg.distill, "distill", refuse)
    monkeypatch.setattr(study, "score", refuse)
    again = study.run_study(cfg, tmp_path / "s", progress=False, log=lines.append)
    assert again["cells"] == res["cells"]
    # a folder of models made under other settings is refused in one line naming them, nothing touched
    from elfreg.fingerprint import RunMismatch

    for other in ("rows=48", "student=ELF", "teacher_steps=5"):
        with pytest.raises(RunMismatch, match=other.split("=")[0]):
            study.run_study(study.study_config(over + [other]), tmp_path / "s", progress=False, log=lines.append)
    assert json.loads((tmp_path / "s/distill.json").read_text())["cells"] == json.loads(json.dumps(res["cells"]))


def test_the_command_refuses_bad_input_in_one_line(tmp_path):
    for argv in (["--distill", "seeds=[]"], ["--distill", "--quick"], ["--distill", "--ablations"]):
        p = subprocess.run([sys.executable, "-m", "elfreg", "demo", "--out", str(tmp_path / "o"), *argv],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "error" in p.stderr
        assert not (tmp_path / "o").exists()


def test_scores_are_kept_beside_the_model_and_an_unreadable_file_is_scored_again(tmp_path, monkeypatch):
    model = tmp_path / "pd" / "model"
    model.mkdir(parents=True)
    calls = []

    def fake(model_dir, nfes, samples):
        calls.append((model_dir, list(nfes), samples))
        return {n: ["3"] * samples for n in nfes}

    monkeypatch.setattr(study, "score", fake)
    cfg = study.study_config(["nfes=[2,16]", "samples=3"])
    (model.parent / "scores.json").write_text('{"key": ')          # torn or hand-edited
    assert study.scored(model, cfg) == {2: ["3"] * 3, 16: ["3"] * 3} and len(calls) == 1
    assert study.scored(model, cfg) == {2: ["3"] * 3, 16: ["3"] * 3} and len(calls) == 1   # read back
    study.scored(model, study.study_config(["nfes=[2,16]", "samples=4"]))                     # other settings
    assert len(calls) == 2
