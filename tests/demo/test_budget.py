"""The demo's budget (elfreg.demo.budget): its estimate from timed parts, and the cuts that fit it, seeds first."""

import argparse
import json
import time

import pytest

from elfreg.cli import main
from elfreg.demo import runner as demo_run
from elfreg.demo.budget import Timing, consequences, curve_points, estimate, fit, run_seconds, schedule
from elfreg.demo.cli import budget_minutes, budget_since, demo_config
from elfreg.demo.report import write_report


def fake_timing(step: float = 0.1, reg_step: float | None = None, curve: float = 1.0) -> Timing:
    """Seconds as time_run would measure them: ELF-REG's step slower, the rest alike."""
    both = lambda x: {"ELF": x, "ELF-REG": x}  # noqa: E731
    return Timing(setup=both(1.0), step={"ELF": step, "ELF-REG": reg_step or 1.2 * step}, save=both(0.5),
                  curve=both(curve), encode=both(2.0), steps_timed=8)


def test_run_seconds_by_hand():
    cfg = demo_config(False, [])  # 1,100 steps, a checkpoint every 500, a curve point every 220
    t = fake_timing()
    assert curve_points(1100, 220) == 5 and curve_points(1000, 220) == 5 and curve_points(10, 0) == 0
    # trainer + steps + 3 checkpoints (500, 1000, 1100) and the final model + 5 curve points + one encoding
    assert run_seconds(cfg, t, "ELF") == pytest.approx(1.0 + 1100 * 0.1 + 4 * 0.5 + 5 * 1.0 + 2.0)
    # resumed from step 600: 500 steps, checkpoints at 1000 and 1100 and the model, curve points 660, 880, 1100
    assert run_seconds(cfg, t, "ELF", done=600) == pytest.approx(1.0 + 500 * 0.1 + 3 * 0.5 + 3 * 1.0 + 2.0)


def test_schedule_replays_the_queue_on_the_lanes():
    # two lanes take 4, 2, 3 in order: lane A 0-4, lane B 0-2 then 2-5
    assert schedule([4, 2, 3], 2) == (5, 5)
    # each job's follow-up is queued when it ends (the demo's process lanes): 1 after job 1 at 2 -> lane A at 4-5;
    # 1 after job 0 at 4 -> lane B at 5-6; 1 after job 2 at 5 -> lane A at 5-6
    assert schedule([4, 2, 3], 2, [1, 1, 1]) == (5, 6)
    # threads or one lane: the follow-ups start when every first job has ended
    assert schedule([4, 2, 3], 2, [1, 1, 1], pipelined=False) == (5, 7)
    assert schedule([4, 2, 3], 1, [1, 1, 1]) == (9, 12)


def test_estimate_gives_a_resumed_demo_only_what_is_left():
    cfg = demo_config(False, [])
    t = fake_timing()
    full = estimate(cfg, t)
    half = estimate(cfg, t, {(v, s): 600 for v in ("ELF", "ELF-REG") for s in cfg.train.seeds})
    assert half.train < full.train and half.evaluate == pytest.approx(full.evaluate, rel=0.5)
    # three seeds on two lanes: three rounds of an ELF and an ELF-REG run
    assert full.train == pytest.approx(3 * (run_seconds(cfg, t, "ELF") + run_seconds(cfg, t, "ELF-REG")) / 2, rel=0.1)


def test_the_plan_shrinks_seeds_first_then_sampling_seeds_then_steps_never_below_the_minimum():
    cfg = demo_config(False, [])
    assert (cfg.train.seeds, cfg.eval.seeds, cfg.train.steps, cfg.train.min_steps) == ([0, 1, 2], [0, 1], 1100, 1000)
    t = fake_timing(step=0.1)
    spent = 30.0
    asked = spent + estimate(cfg, t).total
    # a budget that holds the run: nothing cut
    plan = fit(cfg, t, asked + 1, spent)
    assert plan.cuts == [] and plan.cfg.train.seeds == [0, 1, 2] and not plan.over_budget
    # a bit less: one training seed goes, nothing else
    plan = fit(cfg, t, asked - 1, spent)
    assert plan.cfg.train.seeds == [0, 1] and plan.cfg.eval.seeds == [0, 1] and plan.cfg.train.steps == 1100
    assert [c.key for c in plan.cuts] == ["train.seeds"] and spent + plan.planned.total <= asked - 1
    # one training seed and one sampling seed before any step is cut
    one_seed = demo_config(False, ["train.seeds=[0]", "eval.seeds=[0]"])
    plan = fit(cfg, t, spent + estimate(one_seed, t).total + 0.01, spent)
    assert (plan.cfg.train.seeds, plan.cfg.eval.seeds, plan.cfg.train.steps) == ([0], [0], 1100)
    # less still: steps, to a multiple of 10 within the budget, not below train.min_steps
    plan = fit(cfg, t, spent + estimate(one_seed, t).total - 5, spent)
    assert 1000 <= plan.cfg.train.steps < 1100 and plan.cfg.train.steps % 10 == 0 and not plan.over_budget
    assert [c.key for c in plan.cuts] == ["train.seeds", "eval.seeds", "train.steps"]
    # far too little: the smallest run the task learns in, flagged over the budget
    plan = fit(cfg, t, 60, spent)
    assert (plan.cfg.train.seeds, plan.cfg.eval.seeds, plan.cfg.train.steps) == ([0], [0], 1000)
    assert plan.over_budget and spent + plan.planned.total > 60
    # a slower machine gets a smaller plan from the same budget
    budget = asked - 1
    assert len(fit(cfg, fake_timing(step=0.3), budget, spent).cfg.train.seeds) == 1
    # no budget: the run as asked
    assert fit(cfg, fake_timing(step=10), None, spent).cuts == []


def test_the_minimum_is_the_steps_asked_when_fewer():
    cfg = demo_config(True, [])  # --quick: 6 steps, far below train.min_steps
    plan = fit(cfg, fake_timing(), 1.0, 30.0)
    assert plan.cfg.train.steps == 6 and plan.cfg.train.seeds == [0] and plan.over_budget


def test_each_cut_says_what_it_does_to_the_claims():
    cfg = demo_config(False, [])
    plan = fit(cfg, fake_timing(), 60, 30.0)
    text = " ".join(consequences(plan, cfg))
    assert "one training seed" in text and "Fig. 3" in text and "Sampling seeds [0, 1] -> [0]" in text
    assert "1100 -> 1000" in text
    two = fit(cfg, fake_timing(), 30 + estimate(cfg, fake_timing()).total - 1, 30.0)
    assert "1 degree(s) of freedom instead of 2" in " ".join(consequences(two.to_dict(), cfg))


def test_make_plan_prints_saves_and_reuses_the_plan(tmp_path, monkeypatch, capsys):
    cfg = demo_config(False, [])
    runs = [{"variant": v, "setup": 1.0, "step": 0.1, "save": 0.5, "curve": 1.0, "encode": 2.0, "steps_timed": 8}
            for v in ("ELF", "ELF-REG")]
    calls = []
    monkeypatch.setattr(demo_run, "time_lanes", lambda data, c, pool: calls.append(1) or runs)
    start = demo_run.time.perf_counter()
    planned, plan = demo_run.make_plan(None, cfg, tmp_path, None, 120.0, start)
    out = capsys.readouterr().out
    assert "elfreg demo: timed 8 steps per run" in out and "ELF 100 ms, ELF-REG 100 ms per step" in out
    assert "cut to fit the budget" in out and "train.seeds [0, 1, 2] -> [0]" in out
    assert planned.train.seeds == [0] and plan["cuts"] and not plan["resumed"] and len(calls) == 1
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert saved["cfg"]["train"]["seeds"] == [0]
    # the same settings and budget again (a resumed demo): the first plan, no timing
    again, plan2 = demo_run.make_plan(None, cfg, tmp_path, None, 120.0, start)
    assert again.train.seeds == [0] and plan2["resumed"] and len(calls) == 1
    assert "resuming with the plan" in capsys.readouterr().out
    # another budget: planned anew
    demo_run.make_plan(None, cfg, tmp_path, None, None, start)
    assert len(calls) == 2


def test_a_resume_refused_names_the_cuts_the_budget_made(tmp_path, monkeypatch):
    from elfreg.fingerprint import RunMismatch

    cfg = demo_config(False, [])
    runs = [{"variant": v, "setup": 1.0, "step": 0.1, "save": 0.5, "curve": 1.0, "encode": 2.0, "steps_timed": 8}
            for v in ("ELF", "ELF-REG")]
    monkeypatch.setattr(demo_run, "time_lanes", lambda data, c, pool: runs)
    planned, _ = demo_run.make_plan(None, cfg, tmp_path, None, 60.0, demo_run.time.perf_counter())
    assert planned.train.steps == 1000
    demo_run.claim_runs(planned, tmp_path)
    ckpt = tmp_path / "ELF" / "seed-0" / "ckpt-00000500"
    ckpt.mkdir(parents=True)
    (ckpt / "COMPLETE").write_text("{}")
    with pytest.raises(RunMismatch, match=r"train.steps=1000.*--budget 1"):
        demo_run.claim_runs(cfg, tmp_path, write=False)


def test_report_says_what_was_cut_and_quick_is_a_smoke_test(tmp_path):
    from demo.test_report import _results  # the report tests' hand-made results

    cfg = demo_config(False, [])
    plan = fit(cfg, fake_timing(), 30 + estimate(cfg, fake_timing()).total - 1, 30.0)
    assert plan.cfg.train.seeds == [0, 1]
    results = _results(plan.cfg, [[1] * 20 + [0] * 20] * 2, [[1] * 21 + [0] * 19] * 2)
    results["plan"] = {**plan.to_dict(), "resumed": False}
    results["phases_seconds"] = {"total": 123.0}
    write_report(results, plan.cfg, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "## Budget" in report and "| `train.seeds` | [0, 1, 2] | [0, 1] |" in report
    assert "it took 2.0 min" in report and "degree(s) of freedom" in report and "--budget 0" in report
    assert "Smoke test" not in report
    quick = demo_config(True, [])
    results = _results(quick, [[1, 0] * 4] * 2, [[1, 0] * 4] * 2)
    results["plan"] = {**fit(quick, fake_timing(), None, 1.0).to_dict(), "resumed": False}
    write_report(results, quick, tmp_path)
    lines = (tmp_path / "report.md").read_text().splitlines()
    assert [ln for ln in lines if "Smoke test" in ln] == [lines[2]] and "cannot learn it" in lines[2]
    assert "Nothing was cut" in "\n".join(lines)


@pytest.mark.parametrize("bad", ["-1", "x", "inf", "nan"])
def test_budget_must_be_minutes(bad, capsys):
    with pytest.raises(Exception):
        budget_minutes(bad)
    assert main(["demo", "--quick", "--budget", bad, "--out", "unused"]) == 2
    assert "--budget" in capsys.readouterr().err


def test_budget_zero_is_no_limit():
    assert budget_minutes("0") == 0 and budget_minutes("7.5") == 7.5


# a time as text, or seconds from now (taken when the test runs, not when it is collected: a long suite would turn
# "10 minutes ahead" into the past)
@pytest.mark.parametrize("bad", ["x", "nan", 600, -2 * 86400], ids=["text", "nan", "future", "two-days-ago"])
def test_budget_since_must_be_a_recent_unix_time(bad, capsys):
    bad = str(time.time() + bad) if isinstance(bad, int) else bad
    with pytest.raises(argparse.ArgumentTypeError):
        budget_since(bad)
    assert main(["demo", "--quick", "--budget-since", bad, "--out", "unused"]) == 2
    assert "--budget-since" in capsys.readouterr().err


def test_budget_since_counts_the_set_up(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr("elfreg.demo.runner.run_demo", lambda *a, **kw: seen.update(kw))
    assert main(["demo", "--quick", "--out", str(tmp_path / "d"), "--budget-since", str(time.time() - 90)]) == 0
    assert 90 <= seen["spent_before_s"] < 150 and seen["budget_s"] == 600
    assert main(["demo", "--quick", "--out", str(tmp_path / "d")]) == 0
    assert 0 <= seen["spent_before_s"] < 30
