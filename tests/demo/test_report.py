"""The demo report's parts that need no training: seeds that would decide a claim, Fig. 3 thresholds that follow
the students' range, the rerun command, the machine record, and a whole report from hand-made results."""

import json

import pytest

from elfreg.demo.cli import demo_config
from elfreg.demo.claims import claims, reach_claims, reach_seeds_to_decide, seeds_to_decide
from elfreg.demo.report import SECTIONS, changed_settings, decide_command, write_report
from elfreg.machine import cpu_model, vector_extensions


def test_seeds_to_decide_hand_values():
    # diff 0.1: 2 s.e. < 0.1 needs v_seed / S' + v_problem < 0.0025, i.e. S' > v_seed / 0.0016
    assert seeds_to_decide(0.1, 0.01, 0.0009) == 7  # 6: 2 sqrt(.01/6 + .0009) = .1013; 7: .0965
    assert seeds_to_decide(-0.1, 0.01, 0.0009) == 7  # the sign does not matter
    assert seeds_to_decide(0.1, 0.0001, 0.0009) == 2  # never fewer than two
    assert seeds_to_decide(0.05, 0.01, 0.001) is None  # the problems' part alone is wider than the effect
    assert seeds_to_decide(0.0, 0.01, 0.0) is None  # no effect


def test_reach_seeds_to_decide_hand_values():
    # lead 100 steps, no spread, curve every 100: margin t(0.975, S' - 1) sqrt(100^2 / 6 / S')
    # S' = 2: 12.71 x 28.9 = 367; 3: 4.30 x 23.6 = 101.4; 4: 3.18 x 20.4 = 65.0 < 100
    assert reach_seeds_to_decide(100.0, 0.0, 100) == 4
    assert reach_seeds_to_decide(-100.0, 0.0, 100) == 4
    assert reach_seeds_to_decide(0.0, 0.0, 100) is None
    assert reach_seeds_to_decide(1.0, 1e6, 100) is None  # beyond the limit of 1,000 seeds


def _curve(accs, every=100):
    return [{"step": every * (i + 1), "acc": a, "chain_acc": 0.0} for i, a in enumerate(accs)]


def test_reach_thresholds_follow_the_lowest_peak():
    cfg = demo_config(False, ["eval.curve_every=100", "eval.reach_of_peak=[0.5,0.9]"])
    runs = {"ELF": [_curve([0.2, 0.4, 0.6, 0.55])] * 3, "ELF-REG": [_curve([0.55, 0.7, 0.8, 0.8])] * 3}
    results = {"models": {v: {"runs": [{"seed": s, "curve": c} for s, c in enumerate(cs)]} for v, cs in runs.items()}}
    got = reach_claims(results, cfg)
    # the lowest peak is ELF's 60 %: thresholds 30 % and 54 %, which every run reaches
    assert [c.text for c in got] == [
        "ELF-REG reaches 30 % test accuracy (50 % of the lowest peak, 60.0 %) in fewer steps than ELF (Fig. 3)",
        "ELF-REG reaches 54 % test accuracy (90 % of the lowest peak, 60.0 %) in fewer steps than ELF (Fig. 3)"]
    # 30 %: ELF 200 vs ELF-REG 100 on every seed: +100 < margin t(0.975, 2) sqrt(100^2 / 18) = 101
    assert got[0].outcome == "inconclusive" and "+100 steps, margin 101" in got[0].evidence
    assert got[0].seeds_needed == 4 and got[0].note == ""
    # 54 %: ELF 300 vs ELF-REG 100: +200, held
    assert got[1].outcome == "held" and got[1].seeds_needed is None
    # a run whose curve stays at 0 leaves no threshold
    runs["ELF"] = [_curve([0.0, 0.0])] * 3
    results = {"models": {v: {"runs": [{"seed": s, "curve": c} for s, c in enumerate(cs)]} for v, cs in runs.items()}}
    assert {c.outcome for c in reach_claims(results, cfg)} == {"not measured"}


def test_decide_command_reruns_the_changed_settings_with_more_seeds():
    cfg = demo_config(False, ["train.steps=900", "train.seeds=[0,1]", "eval.nfes=[4,8,16]"])
    assert changed_settings(cfg) == ["train.steps=900", "train.seeds=[0,1]", "eval.nfes=[4,8,16]"]
    # without a budget, which would cut the seeds again
    assert decide_command(cfg, 5) == ("elfreg demo --budget 0 train.steps=900 eval.nfes=[4,8,16] "
                                      "train.seeds=[0,1,2,3,4]")
    # the command's settings load back to the same config
    from elfreg.configtools import to_dict

    again = demo_config(False, decide_command(cfg, 2).split()[4:])
    assert to_dict(again) == to_dict(cfg)


def test_machine_record_parses_cpuinfo():
    x86 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
           "model name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_tile\n")
    assert cpu_model(x86) == "AMD EPYC (cpu family 26, model 2, stepping 1)"
    assert vector_extensions(x86) == ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"]
    arm = "processor\t: 0\nFeatures\t: fp asimd asimddp sve bf16\nCPU part\t: 0xd4f\n"
    assert vector_extensions(arm) == ["asimd", "asimddp", "sve", "bf16"]
    assert vector_extensions("") == []


def _results(cfg, elf_rows, reg_rows, n_eval=2):
    """Hand-made results: every cell of ELF solves ``elf_rows[s]`` for training seed s (each sampling seed alike)."""
    def cells(rows):
        out = []
        for sampler in cfg.eval.samplers:
            for nfe in cfg.eval.nfes:
                correct = [r for r in rows for _ in range(n_eval)]
                acc = [sum(r) / len(r) for r in correct]
                out.append({"sampler": sampler, "nfe": nfe, "acc": acc, "chain_acc": acc, "correct": correct,
                            "train_seed": [s for s in range(len(rows)) for _ in range(n_eval)],
                            "exit_time": [0.5] * len(acc), "mean": sum(acc) / len(acc), "std": 0.01})
        return out
    runs = lambda rows, top: [{"seed": s, "model_dir": "/nonexistent/model", "steps": 400, "train_seconds": 10.0,  # noqa: E731
                               "curve": _curve([0.1, top / 2, top, top])} for s in range(len(rows))]
    return {"task": {"train": 100, "test": len(elf_rows[0]), "example": {"prompt": "1+1=?", "response": "2"}},
            "models": {"ELF": {"steps": 400, "runs": runs(elf_rows, 0.5), "eval": {"cells": cells(elf_rows)}},
                       "ELF-REG": {"steps": 400, "runs": runs(reg_rows, 0.6), "eval": {"cells": cells(reg_rows)}}},
            "phases_seconds": {"backbones": 1.0, "train": 30.0, "total": 40.0}, "threads": 2, "lanes": 2,
            "machine": {"cpu": "Test CPU", "cpu_count": 2, "vector_extensions": ["avx2"], "torch": "2.13.0+cpu",
                        "torch_git": "abc", "torch_cpu_capability": "AVX2", "torch_blas": "mkl", "mkldnn": True,
                        "python": "3.11", "os": "Linux", "threads": 2, "lanes": 2, "threads_per_run": 1,
                        "interop_threads": 2, "env": {},
                        "precision": {"precision": "auto", "precision_used": "fp32", "bf16_time_ratio": 12.9,
                                      "summary": "fp32 (auto; bf16 measured: 12.90x fp32's time at these shapes)"}}}


def test_report_states_seeds_and_command_for_inconclusive_claims_and_the_machine(tmp_path):
    cfg = demo_config(False, ["train.seeds=[0,1,2]", "eval.seeds=[0,1,2]", "eval.curve_every=200"])
    n = 40
    elf = [[1] * 20 + [0] * 20, [1] * 18 + [0] * 22, [1] * 22 + [0] * 18]
    # ELF-REG: +2 problems on seeds 0 and 1, +0 on seed 2: a small, noisy lead
    reg = [[1] * 22 + [0] * 18, [1] * 20 + [0] * 20, [1] * 22 + [0] * 18]
    results = _results(cfg, elf, reg)
    rows = {c.text: c for c in claims(results, cfg)}
    beat = rows["ELF-REG beats ELF (early-stop, 16 NFE)"]
    assert beat.outcome == "inconclusive" and "interval [" in beat.evidence
    # d per seed: .05, .05, 0 (mean 1/30, var 1/1200); per problem: 1/3 on problems 18-21 (seed-dependent), else 0
    assert beat.seeds_needed == seeds_to_decide(1 / 30, 1 / 1200, beat_problem_part(elf, reg, n))
    write_report(results, cfg, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "### How many training seeds would decide the inconclusive claims" in report
    seeds = ",".join(map(str, range(beat.seeds_needed)))
    assert f"`elfreg demo --budget 0 eval.seeds=[0,1,2] eval.curve_every=200 train.seeds=[{seeds}]`" in report
    assert "## Reproducibility" in report and "Test CPU" in report and "CPU kernels AVX2" in report
    assert "bit for bit on the same machine type" in report
    assert "| training precision | fp32 (auto; bf16 measured: 12.90x fp32's time at these shapes) |" in report
    # a claim without any effect says why no number of seeds decides it
    assert "| none: no effect measured | — |" in report
    assert len(SECTIONS) == len(set(SECTIONS))


def beat_problem_part(elf, reg, n):
    per_problem = [sum(reg[s][i] - elf[s][i] for s in range(3)) / 3 for i in range(n)]
    m = sum(per_problem) / n
    return sum((x - m) ** 2 for x in per_problem) / (n - 1) / n


@pytest.mark.parametrize("bad", ["eval.reach_of_peak=[0]", "eval.reach_of_peak=[1.5]"])
def test_reach_of_peak_must_be_fractions(bad):
    from elfreg.configtools import ConfigError

    with pytest.raises(ConfigError, match="eval.reach_of_peak"):
        demo_config(False, [bad])


def test_results_json_keys_the_report_reads_are_plain_json():
    cfg = demo_config(False, ["train.seeds=[0,1]", "eval.seeds=[0]"])
    results = _results(cfg, [[1, 0], [0, 1]], [[1, 1], [0, 1]], n_eval=1)
    assert json.loads(json.dumps(results)) == results


def test_setting_note_says_what_the_setting_decides_on_the_samplers_and_where_they_differ():
    from elfreg.demo.report import setting_note

    cfg = demo_config(False, ["train.seeds=[0,1,2]", "eval.seeds=[0,1]"])
    half = [[1] * 20 + [0] * 20] * 3
    results = _results(cfg, half, half)
    for c in results["models"]["ELF"]["eval"]["cells"]:  # ELF's re-noising at 16 NFE solves every problem
        if c["sampler"] == "renoise" and c["nfe"] == 16:
            c["correct"] = [[1] * 40 for _ in c["correct"]]
            c["acc"] = [1.0] * len(c["acc"])
            c["mean"] = 1.0
    note = setting_note(results, cfg, claims(results, cfg))
    assert note[0] == "" and ("1 of the 8 claims on them is decided here (ELF: re-noising beats early-stop at 16 NFE: "
                              "held)") in note[1]
    assert "From 4 to 16 NFE accuracy moves by at most 50.0 points" in note[1]
    assert "`elfreg demo --preset harder`" in note[1]  # the default task points to the setting where they differ
    harder = demo_config(False, ["train.seeds=[0,1,2]"], "harder")
    note = setting_note(_results(harder, half, half), harder, claims(_results(harder, half, half), harder))[1]
    assert "0 of the 8 claims on them are decided here." in note and "From 4 to 32 NFE" in note
    assert "--preset harder" not in note


def test_training_precision_is_resolved_at_the_students_shapes(monkeypatch):
    from elfreg import precision
    from elfreg.demo.prepare import training_precision
    from elfreg.machine import machine_info

    seen = []

    def fake(workload, cache_dir=None):  # bf16 takes 12.9x fp32's time on this (fake) CPU
        seen.append(workload)
        return 12.9, "measured"
    monkeypatch.setattr(precision, "cached_ratio", fake)
    cfg = demo_config(False, [])
    p = training_precision(cfg)
    assert p.choice == "fp32"
    (workload,) = seen
    assert workload.backward and workload.rows == cfg.train.batch_size * (12 + 1 + 30)
    assert workload.maps[0] == (cfg.student.width, 3 * cfg.student.width)
    assert machine_info(2, 2, p)["precision"]["precision_used"] == "fp32"


def test_the_report_says_what_each_term_does_from_the_runs():
    """The text loss and the gradient shares of each run (mean ± std over training seeds); no section without
    them (results of an older demo)."""
    from elfreg.demo.report import _terms

    cfg = demo_config(False, [])
    runs = lambda loss, rel: [{"seed": s, "loss_elf": loss + s / 1000, "grad_rel_repa": rel, "grad_cos_repa": 0.1,  # noqa: E731
                               "grad_rel_reg": 2 * rel, "grad_cos_reg": -0.2} for s in (0, 1, 2)]
    elf = [{"seed": s, "loss_elf": 0.07 + s / 1000, "grad_rel_repa": None, "grad_cos_repa": None,
            "grad_rel_reg": None, "grad_cos_reg": None} for s in (0, 1, 2)]
    lines = _terms({"models": {"ELF": {"runs": elf}, "ELF-REG": {"runs": runs(0.1, 0.4)}}}, cfg)
    text = "\n".join(lines)
    assert "## What each term does" in text and "every 110 steps" in text
    assert "| ELF | 0.071 ± 0.001 | — | — | — | — |" in text
    assert "| ELF-REG | 0.101 ± 0.001 | 0.40 ± 0.00 | 0.10 ± 0.00 | 0.80 ± 0.00 | -0.20 ± 0.00 |" in text
    assert _terms({"models": {"ELF": {"runs": [{"seed": 0}]}}}, cfg) == []
