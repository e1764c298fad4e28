"""The distillation config and the command's bad input: one line, exit code 2."""

import subprocess
import sys

import pytest

from helpers import REPO
from elfreg.configtools import ConfigError
from elfreg.distill.config import DistillConfig, load_distill_config


def test_defaults_are_the_reference_schedule():
    d = DistillConfig()
    assert (d.method, d.rounds, d.teacher_grid, d.epochs_per_round, d.decoder_prob) == ("pd", [16, 8, 4, 2, 1], 64,
                                                                                         1.0, 0.2)
    assert d.stages == [16, 8, 4, 2, 1] and d.default_nfe == 2
    assert DistillConfig(method="flowmap").stages == [1]
    assert DistillConfig(method="flowmap", nfe=4).stages == [3]


@pytest.mark.parametrize("rounds, why", [([16, 8, 0], "out of range"), ([128, 1], "out of range"),
                                         ([16, 5], "do not divide"), ([4, 8], "shrink"), ([], "give the student")])
def test_round_counts_out_of_range_are_refused(rounds, why):
    with pytest.raises(ConfigError, match=f"distill.rounds.*{why}"):
        DistillConfig(rounds=rounds)


def test_the_flow_maps_target_weights_are_online_or_ema():
    assert DistillConfig().target_weights == "online"
    assert load_distill_config(None, ["distill.target_weights=ema"]).distill.target_weights == "ema"
    with pytest.raises(ConfigError, match="distill.target_weights.*online or ema"):
        DistillConfig(target_weights="teacher")


def test_both_parallel_modes_are_accepted_and_others_refused_in_one_line():
    assert load_distill_config(None, ["train.parallel=fsdp"]).train.parallel == "fsdp"
    with pytest.raises(ConfigError, match="train.parallel"):
        load_distill_config(None, ["train.parallel=zero3"])


def test_the_budget_is_given_once_and_per_round():
    with pytest.raises(ConfigError, match="epochs_per_round"):
        DistillConfig(epochs_per_round=1.0, steps_per_round=10)
    with pytest.raises(ConfigError, match="train.steps.*per round"):
        load_distill_config(None, ["train.steps=10"])


def test_presets_take_their_data_from_the_training_config():
    cfg = load_distill_config(REPO / "configs/distill/gsm8k-b.yaml")
    assert cfg.base == "gsm8k/elf-reg-b" and cfg.data.sources[0]["name"] == "openmathinstruct2-gsm8k"
    assert cfg.paper.rows == 2404028 and cfg.distill.rounds == [16, 8, 4, 2, 1]
    code = load_distill_config(REPO / "configs/distill/code-l.yaml", ["distill.method=flowmap"])
    assert code.data.task == "code" and code.distill.method == "flowmap"


def run_cli(*argv, cwd):
    return subprocess.run([sys.executable, "-m", "elfreg", "distill", *argv], capture_output=True, text=True,
                          cwd=cwd, env={**__import__("os").environ, "PYTHONPATH": str(REPO / "src")}, timeout=300)


def test_a_teacher_folder_that_is_not_a_model_is_one_line(tmp_path):
    (tmp_path / "notamodel").mkdir()
    (tmp_path / "notamodel" / "weights.bin").write_text("x")
    r = run_cli("--teacher", str(tmp_path / "notamodel"), "--output", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "notamodel" in lines[0] and "not an elfreg model folder" in lines[0]
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_a_round_count_out_of_range_is_one_line(tmp_path):
    r = run_cli("--config", "demo", "--dry-run", "distill.rounds=[16,8,100]", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "distill.rounds" in lines[0] and "out of range" in lines[0], lines


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "distill").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_distill_preset_loads(path):
    cfg = load_distill_config(path)
    assert cfg.base is not None and cfg.distill.method == "pd" and cfg.distill.rounds == [16, 8, 4, 2, 1]
    if path.stem != "demo":
        assert cfg.data.sources and cfg.paper.rows and cfg.distill.epochs_per_round == 1
