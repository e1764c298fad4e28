"""`elfreg diagnose` end to end on two saved tiny ElfModels (ELF and ELF-REG, random weights)."""

import argparse
import json

import matplotlib.image
import pytest
import torch

from elfreg.config import BackboneConfig, ElfRegConfig, ObjectiveConfig, model_preset
from elfreg.diagnose.cli import cmd_diagnose, register
from elfreg.diagnose.tasks import AnswerTask
from elfreg.pretrained import ElfModel

PROMPTS = [("what is 3 plus 4 ?", "what"), ("sort a b c", "a"), ("what is 2 times 5 ?", "10")]
FIRST_WORD = AnswerTask("first-word", lambda t: (t.split() or [None])[0],
                        lambda t, p: bool(t.split()) and t.split()[0] == str(p["answer"]))


def _parse(*argv):
    parser = argparse.ArgumentParser(prog="elfreg")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["diagnose", *argv])


def _save(tmp_path, tiny_lm_dir, name, extra_token):
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=16, max_prompt_len=8, extra_token=extra_token),
                       backbones=BackboneConfig(encoder=str(tiny_lm_dir), encoder_layer=2, teacher=None,
                                                dtype="float32"),
                       objective=ObjectiveConfig(use_reg=extra_token == "reg"))
    torch.manual_seed(0)
    model = ElfModel.new(cfg)
    torch.nn.init.normal_(model.student.final_linear.weight, std=0.3)
    return model.save_pretrained(tmp_path / name)


@pytest.fixture
def prompts_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"prompt": q, "answer": a, "id": i}) + "\n" for i, (q, a) in enumerate(PROMPTS)))
    return p


def test_diagnose_two_models_writes_json_and_png(tmp_path, tiny_lm_dir, prompts_file, capsys):
    elf = _save(tmp_path, tiny_lm_dir, "elf", "none")
    reg = _save(tmp_path, tiny_lm_dir, "elf-reg", "reg")
    out = tmp_path / "diag"
    args = _parse("--model", str(elf), "--model2", str(reg), "--label", "ELF", "--label2", "ELF-REG",
                  "--prompts", str(prompts_file), "--out", str(out), "--steps", "16", "--readouts", "2,4,8",
                  "--seeds", "0,1", "--early-nfe", "4", "--accel-steps", "9", "--task", "first-word",
                  "--batch-size", "2", "--device", "cpu", "--no-progress")
    assert args.func is cmd_diagnose
    assert cmd_diagnose(args, task_lookup=lambda n: FIRST_WORD if n == "first-word" else None) == 0
    doc = json.loads((out / "diagnostics.json").read_text())
    assert set(doc["models"]) == {"ELF", "ELF-REG"}
    for label, res in doc["models"].items():
        rows = res["readouts"]
        assert [r["nfe"] for r in rows] == [2, 4, 8, 16]
        assert all(r["n"] == 6 and r["n_scored"] == 6 for r in rows)          # 3 prompts x 2 seeds
        end = rows[-1]
        assert end["text_error_mean"] == 0 and end["response_agreement"] == 1 and end["stable_token_fraction"] == 1
        assert end["flips_vs_end"] == {"up": 0, "down": 0, "n": 6, "net": 0.0}
        assert all(r["text_error_mean"] > 0 for r in rows[:-1])
        assert all(0 <= r["stable_token_fraction"] <= r2["stable_token_fraction"] + 1e-12
                   for r, r2 in zip(rows, rows[1:]))                          # stability can only grow
        assert (rows[0]["joint_error_mean"] is None) == (label == "ELF")
        e = res["early_stop"]
        f = e["flips"]
        assert e["nfe"] == 4 and e["end_nfe"] == 16
        assert f["net"] == pytest.approx(e["accuracy_end"] - e["accuracy_early"])
        assert res["calls"] == {"denoiser_per_sample": 15, "decoder_per_sample": 4}
        assert len(res["acceleration"]) == 7 and res["acceleration"][1]["t"] == pytest.approx(1 / 8)
        assert len(res["samples"]) == 6
        settings = doc["settings"][label]
        assert settings["steps"] == 16 and settings["seeds"] == [0, 1] and settings["task"] == "first-word"
    assert "| ELF-REG | 4 of 16 |" in doc["early_stop_table"] and "| ELF-REG |" in capsys.readouterr().out
    png = out / "diagnostics.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(png)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 500


def test_readout_matches_elfreg_generate_early_stop(tmp_path, tiny_lm_dir, prompts_file):
    # the read-out at NFE 4 of a 16-point master path is what `elfreg generate --sampler early-stop --nfe 4
    # --rho 4 --seed s` returns for sample 0
    from elfreg.generate.cli import cmd_generate, register as register_generate
    from elfreg.sampling.results_io import read_records

    reg = _save(tmp_path, tiny_lm_dir, "elf-reg", "reg")
    out = tmp_path / "diag"
    assert cmd_diagnose(_parse("--model", str(reg), "--prompts", str(prompts_file), "--out", str(out), "--steps",
                               "16", "--readouts", "4", "--seeds", "1", "--accel-steps", "0", "--task", "exact",
                               "--device", "cpu", "--no-progress")) == 0
    doc = json.loads((out / "diagnostics.json").read_text())
    res = doc["models"]["elf-reg"]
    assert res["acceleration"] is None
    parser = argparse.ArgumentParser(prog="elfreg")
    register_generate(parser.add_subparsers(dest="command", required=True))
    gen = tmp_path / "gen.jsonl"
    assert cmd_generate(parser.parse_args(["generate", "--model", str(reg), "--prompts", str(prompts_file), "--out",
                                           str(gen), "--sampler", "early-stop", "--nfe", "4", "--rho", "4",
                                           "--seed", "1", "--task", "gsm8k", "--device", "cpu",
                                           "--no-progress"])) == 0
    texts = {r["prompt_index"]: r["response"] for r in read_records(gen)}
    for s in res["samples"]:
        assert s["answers"][0] == (texts[s["prompt_index"]].strip() or None)


def test_the_first_samples_keep_their_texts_in_the_json_and_the_report(tmp_path, tiny_lm_dir, prompts_file):
    from elfreg.pretrained import ElfModel

    reg = _save(tmp_path, tiny_lm_dir, "elf-reg", "reg")
    out = tmp_path / "diag"
    assert cmd_diagnose(_parse("--model", str(reg), "--prompts", str(prompts_file), "--out", str(out), "--steps",
                               "16", "--readouts", "2,4,8", "--seeds", "0,1", "--accel-steps", "0", "--task",
                               "exact", "--keep-texts", "4", "--batch-size", "2", "--device", "cpu",
                               "--no-progress")) == 0
    samples = json.loads((out / "diagnostics.json").read_text())["models"]["elf-reg"]["samples"]
    kept = [s for s in samples if "texts" in s]
    assert [(s["prompt_index"], s["seed"]) for s in kept] == [(0, 0), (1, 0), (2, 0), (0, 1)]   # across batches
    model = ElfModel.from_pretrained(reg)
    for s in kept:
        assert len(s["texts"]) == 4 and [t.strip() or None for t in s["texts"]] == s["answers"]
        want = model.generate([q for q, _ in PROMPTS], sampler="early-stop", nfe=4, rho=4, seed=s["seed"])
        assert s["texts"][1] == want[s["prompt_index"]]   # the read-out at NFE 4: what early-stop with 4 NFE answers
    report = (out / "diagnostics.md").read_text()
    assert "## The texts over time" in report and report.count("#### elf-reg: prompt ") == 4
    assert "#### elf-reg: prompt 1, seed 1" not in report
    assert cmd_diagnose(_parse("--model", str(reg), "--prompts", str(prompts_file), "--out", str(out), "--steps",
                               "16", "--accel-steps", "0", "--task", "exact", "--keep-texts", "0", "--device", "cpu",
                               "--no-progress")) == 0
    assert "texts" not in json.dumps(json.loads((out / "diagnostics.json").read_text())["models"])
    assert "## The texts over time" not in (out / "diagnostics.md").read_text()


def test_bad_input_fails_before_loading(tmp_path, prompts_file, capsys):
    calls = []

    def load(path, device, prompt_format="template"):
        calls.append(path)
        raise AssertionError("must not load")

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "a"}) + "\n{not json\n")
    cases = [
        (["--prompts", str(bad)], "bad.jsonl:2: not valid JSON"),
        (["--prompts", str(prompts_file), "--readouts", "2,600"], "readouts: NFE values must lie in"),
        (["--prompts", str(prompts_file), "--task", "nope"], "--task: unknown task 'nope'"),
        (["--prompts", str(prompts_file), "--steps", "16", "--readouts", "2", "--early-nfe", "8"], "early_nfe"),
    ]
    for extra, match in cases:
        assert cmd_diagnose(_parse("--model", "m", "--out", str(tmp_path / "o"), *extra), load=load) == 2
        assert match in capsys.readouterr().err
    assert calls == [] and not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):   # a missing prompts file is an argument error, before anything runs
        _parse("--model", "m", "--out", str(tmp_path / "o"), "--prompts", str(tmp_path / "none.jsonl"))
    assert "argument --prompts: " + str(tmp_path / "none.jsonl") + ": no such file" in capsys.readouterr().err


def test_models_in_folders_of_one_name_are_labelled_by_their_paths(tmp_path, tiny_lm_dir, prompts_file):
    from elfreg.diagnose.cli import model_labels

    assert model_labels(["runs/ELF/seed-0/model", "runs/ELF-REG/seed-0/model"]) == [
        "ELF/seed-0/model", "ELF-REG/seed-0/model"]
    assert model_labels(["a/elf", "b/elf-reg"]) == ["elf", "elf-reg"]  # distinct folder names stay short
    assert model_labels(["x/seed-0/model", "x/seed-1/model"]) == ["seed-0/model", "seed-1/model"]
    assert model_labels(["m", "m"]) == ["m (1)", "m (2)"]  # the same model twice
    elf = _save(tmp_path / "ELF" / "seed-0", tiny_lm_dir, "model", "none")
    reg = _save(tmp_path / "ELF-REG" / "seed-0", tiny_lm_dir, "model", "reg")
    out = tmp_path / "diag"
    args = _parse("--model", str(elf), "--model2", str(reg), "--label2", "mine", "--prompts", str(prompts_file),
                  "--out", str(out), "--steps", "4", "--readouts", "2", "--early-nfe", "2", "--accel-steps", "0",
                  "--task", "first-word", "--device", "cpu", "--no-progress")
    assert cmd_diagnose(args, task_lookup=lambda n: FIRST_WORD if n == "first-word" else None) == 0
    assert set(json.loads((out / "diagnostics.json").read_text())["models"]) == {"ELF/seed-0/model", "mine"}


def test_exit_rule_fires_where_elfreg_generate_adaptive_stops(tmp_path, tiny_lm_dir, prompts_file, capsys):
    # the rule along a 32-point master path with max NFE 16 is `elfreg generate --sampler adaptive --nfe 16 --rho 2`
    from elfreg.generate.cli import cmd_generate, register as register_generate
    from elfreg.sampling.results_io import read_records

    reg = _save(tmp_path, tiny_lm_dir, "elf-reg", "reg")
    out = tmp_path / "diag"
    assert cmd_diagnose(_parse("--model", str(reg), "--prompts", str(prompts_file), "--out", str(out), "--steps",
                               "32", "--readouts", "4", "--seeds", "0,1", "--accel-steps", "0", "--task", "exact",
                               "--exit-check-every", "1", "--exit-patience", "1", "--exit-max-nfe", "16",
                               "--device", "cpu", "--no-progress")) == 0
    doc = json.loads((out / "diagnostics.json").read_text())
    res = doc["models"]["elf-reg"]
    e = res["exit_rule"]
    assert e["rule"] == {"check_every": 1, "patience": 1, "min_nfe": 0, "max_nfe": 16, "rho": 2}
    assert [r["nfe"] for r in res["readouts"]] == [4, 16, 32]    # fixed early-stop at the rule's max NFE added
    assert e["fixed_nfe"] == 16 and e["nfe"]["n"] == 6 and 4 <= e["nfe"]["min"] <= e["nfe"]["max"] <= 16
    assert sum(e["nfe"]["histogram"].values()) == 6
    assert e["settled_wrong"] is not None and e["flips_vs_fixed"]["n"] == 6
    assert "Adaptive exit rule on the same paths" in capsys.readouterr().out and "| elf-reg | 1, 1, 0 |" in \
        doc["exit_rule_table"]
    parser = argparse.ArgumentParser(prog="elfreg")
    register_generate(parser.add_subparsers(dest="command", required=True))
    for seed in (0, 1):
        gen = tmp_path / f"gen{seed}.jsonl"
        assert cmd_generate(parser.parse_args([
            "generate", "--model", str(reg), "--prompts", str(prompts_file), "--out", str(gen), "--sampler",
            "adaptive", "--nfe", "16", "--rho", "2", "--check-every", "1", "--patience", "1", "--extract", "text",
            "--seed", str(seed), "--device", "cpu", "--no-progress"])) == 0
        recs = {r["prompt_index"]: r for r in read_records(gen)}
        for s in (s for s in res["samples"] if s["seed"] == seed):
            r = recs[s["prompt_index"]]
            assert s["exit"]["nfe"] == r["nfe_spent"] and s["exit"]["settled"] == r["settled"]
            assert s["exit"]["answer"] == (r["response"].strip() or None)
            assert s["exit"]["t"] == pytest.approx(r["exit_time"])


@pytest.mark.parametrize("extra, match", [
    (["--exit-check-every", "2", "--exit-max-nfe", "12"], "exit_max_nfe: need an integer that divides steps = 32"),
    (["--exit-check-every", "4", "--exit-max-nfe", "8"], "exit_patience: 3 checks every 4 denoiser calls"),
    (["--exit-check-every", "1", "--exit-min-nfe", "40", "--exit-max-nfe", "16"], "exit_min_nfe: 40 exceeds"),
])
def test_bad_exit_rule_fails_before_loading(tmp_path, prompts_file, capsys, extra, match):
    def load(path, device, prompt_format="template"):
        raise AssertionError("must not load")

    argv = ["--model", "m", "--out", str(tmp_path / "o"), "--prompts", str(prompts_file), "--steps", "32",
            "--readouts", "4,8", *extra]
    assert cmd_diagnose(_parse(*argv), load=load) == 2
    assert match in capsys.readouterr().err and not (tmp_path / "o").exists()
