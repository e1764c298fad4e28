"""Distilling a tiny teacher: PD rounds and the flow map, the folder's record, resume mid-round, sampling a
distilled model at NFE 2."""

import json

import pytest
import torch
from safetensors.torch import load_file

from _teacher import distill_overrides, train_teacher
from elfreg.distill import distill, load_distill_config, read_record
from elfreg.pretrained import ElfModel


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_lm_dir):
    return train_teacher(tmp_path_factory.mktemp("teacher") / "run", tiny_lm_dir)


@pytest.fixture(scope="module")
def pd_run(tmp_path_factory, teacher):
    out = tmp_path_factory.mktemp("pd") / "out"
    return distill(teacher, out, load_distill_config(None, distill_overrides(), teacher=teacher))


class Crash(RuntimeError):
    pass


def test_pd_rounds_leave_a_model_that_says_what_it_is(pd_run, teacher):
    out = pd_run.output
    assert (out / "round-1-2-steps" / "model" / "distill.json").is_file()
    assert (out / "round-2-1-steps" / "ckpt-00000003" / "COMPLETE").is_file()
    rec = read_record(out / "model")
    assert rec == pd_run.record
    assert (rec.teacher, rec.method, rec.rounds, rec.steps, rec.trained_steps) == (str(teacher), "pd", [2, 1], 1,
                                                                                    [3, 3])
    assert rec.sampler == {"sampler": "full-span", "grid": "uniform", "nfe": 2}
    assert read_record(out / "round-1-2-steps" / "model").sampler["nfe"] == 3   # the 2-step round's own model
    model = ElfModel.from_pretrained(out / "model")
    assert model.distill == rec
    assert model.config.model == ElfModel.from_pretrained(teacher).config.model   # the teacher's network
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == list(range(1, 7))
    assert {r["stage"] for r in steps} == {"round-1-2-steps", "round-2-1-steps"}
    assert all(r["loss"] > 0 and r["loss_reg"] > 0 for r in steps)    # the REG state is distilled with the text
    assert (out / "learning_curve.png").is_file()
    assert "Distilled" in (out / "model" / "README.md").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert [s["teacher_sub_steps"] for s in summary["stages"]] == [32, 64]


def test_each_round_starts_from_the_previous_rounds_ema(tmp_path, teacher, monkeypatch):
    import elfreg.distill.loop as loop

    starts = []
    real = loop.load_start
    monkeypatch.setattr(loop, "load_start", lambda student, w: (starts.append(w), real(student, w)))
    res = distill(teacher, tmp_path / "out", load_distill_config(None, distill_overrides(), teacher=teacher))
    t = ElfModel.from_pretrained(teacher).student.state_dict()
    r1 = load_file(str(res.output / "round-1-2-steps" / "model" / "model.safetensors"))
    assert len(starts) == 2
    assert all(torch.equal(starts[0][k], t[k]) for k in t)            # round 1: the teacher's (EMA) weights
    assert all(torch.equal(starts[1][k], r1[k]) for k in r1)          # round 2: round 1's EMA
    assert not torch.equal(r1["final_linear.weight"], t["final_linear.weight"])


def test_resume_mid_round_is_bit_for_bit(tmp_path, teacher, pd_run):
    cfg = load_distill_config(None, distill_overrides(), teacher=teacher)
    out = tmp_path / "crashy"

    def crash(stage, step):
        if stage == 2 and step == 1:
            raise Crash("killed in round 2 after step 1 (before its checkpoint at step 2)")

    with pytest.raises(Crash):
        distill(teacher, out, cfg, hooks=[crash])
    assert (out / "round-1-2-steps" / "summary.json").is_file() and not (out / "model").exists()

    def crash3(stage, step):
        if stage == 2 and step == 3:
            raise Crash("killed in round 2 after its checkpoint at step 2")

    with pytest.raises(Crash):
        distill(teacher, out, cfg, hooks=[crash3])
    res = distill(teacher, out, cfg)
    assert res.stages[0] is None                        # round 1 was kept, not trained again
    for name in ("weights.safetensors", "model/model.safetensors", "optimizer.safetensors"):
        a = load_file(str(pd_run.output / "round-2-1-steps" / "ckpt-00000003" / name))
        b = load_file(str(out / "round-2-1-steps" / "ckpt-00000003" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_a_resumed_run_with_other_settings_is_refused(tmp_path, teacher, pd_run):
    from elfreg.fingerprint import RunMismatch

    with pytest.raises(RunMismatch, match="distill.rounds"):
        distill(teacher, pd_run.output, load_distill_config(None, distill_overrides(**{"distill.rounds": "[4,1]"}),
                                                            teacher=teacher))


def test_a_pd_run_resumes_whatever_the_flow_maps_settings(tmp_path):
    """A PD run's folder written before the flow map's settings changed (or existed) still resumes; a flow-map run's
    does not, and an older folder without distill.target_weights reads as the online targets it was made with."""
    import yaml

    from elfreg.distill.loop import _run_key, check_same_run
    from elfreg.fingerprint import RunMismatch

    for method in ("pd", "flowmap"):
        out = tmp_path / method
        out.mkdir()
        old = _run_key(load_distill_config(None, ["distill.diagonal_frac=0.25", "distill.full_frac=0.1"],
                                           method=method), "T")
        del old["distill"]["target_weights"]   # written before the option existed
        (out / "distill.yaml").write_text(yaml.safe_dump(old))
        now = load_distill_config(None, [], method=method)
        if method == "pd":
            check_same_run(out, now, "T")
        else:
            with pytest.raises(RunMismatch, match="distill.diagonal_frac=0.25.*now distill.diagonal_frac=0.5"):
                check_same_run(out, now, "T")
            check_same_run(out, load_distill_config(None, ["distill.diagonal_frac=0.25", "distill.full_frac=0.1"],
                                                    method=method), "T")
            with pytest.raises(RunMismatch, match="target_weights=online, now distill.target_weights=ema"):
                check_same_run(out, load_distill_config(None, ["distill.diagonal_frac=0.25", "distill.full_frac=0.1",
                                                               "distill.target_weights=ema"], method=method), "T")


def _nfe_and_invariance(model, nfe):
    from elfreg.sampling import SamplerConfig, sample
    from elfreg.sampling.text import model_sampler_config

    prompts = ["what is 2 plus 3 ?", "what is 4 plus 1 ?", "what is 0 plus 0 ?"]
    x, mask, _ = model.encode_prompts(prompts)
    cfg = model_sampler_config(model)
    assert (cfg.sampler, cfg.grid, cfg.nfe) == ("full-span", "uniform", nfe)
    keys = [(i, 0) for i in range(3)]
    model.student.row_by_row = True
    out = sample(model.student, x, mask, cfg, keys)
    assert out.nfe == [nfe] * 3
    assert out.count.denoiser_calls == nfe - 1 and out.count.decoder_calls == 1
    alone = sample(model.student, x[1:2], mask[1:2], cfg, keys[1:2])
    assert torch.equal(alone.token_ids[0], out.token_ids[1])     # a row does not depend on its batch
    return out


def test_a_distilled_model_generates_at_nfe_2_by_default(pd_run, tiny_lm_dir):
    model = ElfModel.from_pretrained(pd_run.output / "model")
    _nfe_and_invariance(model, 2)
    texts = model.generate(["what is 2 plus 3 ?", "what is 4 plus 1 ?"])
    assert len(texts) == 2 and all(isinstance(t, str) for t in texts)
    assert model.generate(["what is 2 plus 3 ?"], nfe=2, sampler="full-span", grid="uniform") == texts[:1]


def test_flowmap_student_runs_any_number_of_steps(tmp_path, teacher):
    cfg = load_distill_config(None, distill_overrides(), teacher=teacher, method="flowmap")
    res = distill(teacher, tmp_path / "fm", cfg)
    rec = read_record(res.model_dir)
    assert (rec.method, rec.rounds, rec.steps, rec.trained_steps) == ("flowmap", [1], 1, [3])
    model = ElfModel.from_pretrained(res.model_dir)
    assert model.config.model.flow_map and "jump_embedder.mlp.2.weight" in model.student.state_dict()
    _nfe_and_invariance(model, 2)
    from elfreg.sampling import sample
    from elfreg.sampling.text import model_sampler_config

    x, mask, _ = model.encode_prompts(["what is 2 plus 3 ?"])
    for nfe in (3, 5):
        out = sample(model.student, x, mask, model_sampler_config(model, nfe=nfe), [(0, 0)])
        assert out.nfe == [nfe]


def test_an_elf_teacher_distils_too(tmp_path, tiny_lm_dir):
    teacher = train_teacher(tmp_path / "elf", tiny_lm_dir, variant="elf")
    res = distill(teacher, tmp_path / "out", load_distill_config(
        None, distill_overrides(**{"distill.rounds": "[1]"}), teacher=teacher))
    model = ElfModel.from_pretrained(res.model_dir)
    assert model.config.model.extra_token == "none" and model.distill.steps == 1


def test_the_command_plans_distils_and_generate_uses_the_record(tmp_path, teacher, capsys):
    from elfreg.cli import main

    over = distill_overrides(**{"distill.rounds": "[4,1]"})
    assert main(["distill", "--teacher", str(teacher), "--dry-run", *over]) == 0
    plan = capsys.readouterr().out
    assert "round-1-4-steps" in plan and "round-2-1-steps" in plan and "1/64" in plan and "counted" in plan
    assert "16" in plan.split("round-1-4-steps")[1].splitlines()[0]          # 64 / 4 teacher sub-steps
    out = tmp_path / "run"
    assert main(["distill", "--teacher", str(teacher), "--output", str(out), *over]) == 0
    assert "samples at NFE 2 by default" in capsys.readouterr().out
    assert main(["generate", "--model", str(out / "model"), "--prompt", "what is 2 plus 3 ?", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "NFE per sample: mean 2.00 over 1 (min 2, max 2)" in err, err
