"""The samplers and `elfreg generate` on the project's real ElfStudent / ElfModel (tiny sizes, random weights)."""

import argparse
import json

import pytest
import torch

from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
from elfreg.pretrained import ElfModel
from elfreg.model.student import ElfStudent
from elfreg.generate.cli import cmd_generate, register
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.results_io import read_records
from elfreg.sampling.samplers import sample


def _student(extra_token="reg"):
    torch.manual_seed(0)
    net = ElfStudent(model_preset("tiny", extra_token=extra_token, repa=False)).eval()
    torch.nn.init.normal_(net.final_linear.weight, std=0.1)   # zero-initialised head would make x_hat constant
    return net


def _inputs(net, b):
    cfg = net.config
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, cfg.max_len, cfg.feature_dim, generator=g)
    mask = torch.zeros(b, cfg.max_len, dtype=torch.bool)
    for i in range(b):
        mask[i, : 3 + 2 * i] = True
    return x, mask


@pytest.mark.parametrize("sampler", ["early-stop", "renoise"])
def test_real_student_exact_nfe_and_batch_invariance(sampler):
    net = _student()
    x, mask = _inputs(net, 7)
    keys = [(i, 3) for i in range(7)]
    cfg = SamplerConfig(sampler=sampler, nfe=5, rho=4, seed=2)
    big = sample(net, x, mask, cfg, keys)
    assert big.count.denoiser_calls == 4 and big.count.decoder_calls == 1
    for i in (0, 3, 6):   # first, middle and last row of the batch of 7
        one = sample(net, x[i:i + 1], mask[i:i + 1], cfg, keys[i:i + 1])
        assert torch.equal(one.token_ids[0], big.token_ids[i])
        assert torch.allclose(one.text_state[0], big.text_state[i], atol=1e-5)
    assert big.reg_state is not None and big.reg_state.shape == (7, net.config.reg_dim)


def test_real_student_drop_reg_and_olt():
    net = _student()
    x, mask = _inputs(net, 2)
    keep = sample(net, x, mask, SamplerConfig(nfe=4, rho=2), [(0, 0), (1, 0)])
    drop = sample(net, x, mask, SamplerConfig(nfe=4, rho=2, drop_reg=True), [(0, 0), (1, 0)])
    assert drop.reg_state is None and not torch.allclose(keep.text_state, drop.text_state)
    olt = _student("olt")
    assert sample(olt, x, mask, SamplerConfig(nfe=3, rho=2), [(0, 0), (1, 0)]).reg_state is None


def _saved_model(tmp_path, tiny_lm_dir):
    """A tiny ElfModel on the tiny Qwen3 encoder, saved: (its folder, its config)."""
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=16, max_prompt_len=8),
                       backbones=BackboneConfig(encoder=str(tiny_lm_dir), encoder_layer=2, teacher=None,
                                                dtype="float32"))
    torch.manual_seed(0)
    model = ElfModel.new(cfg)
    torch.nn.init.normal_(model.student.final_linear.weight, std=0.1)
    return model.save_pretrained(tmp_path / "model"), cfg


def test_generate_cli_with_a_saved_elf_model(tmp_path, tiny_lm_dir):
    folder, cfg = _saved_model(tmp_path, tiny_lm_dir)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["what is 3 plus 4 ?", "sort a b c"]))
    parser = argparse.ArgumentParser(prog="elfreg")
    register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "out.jsonl"
    args = parser.parse_args(["generate", "--model", str(folder), "--prompts", str(prompts), "--out", str(out),
                              "--sampler", "renoise", "--nfe", "4", "--rho", "4", "--samples", "3", "--seed", "0",
                              "--batch-size", "4", "--device", "cpu", "--no-progress"])
    assert cmd_generate(args) == 0
    recs = read_records(out)
    assert sorted((r["prompt_index"], r["sample_index"]) for r in recs) == [(p, s) for p in range(2) for s in range(3)]
    assert all(r["nfe_spent"] == 4 and r["sigma"] == cfg.objective.sigma and r["sampler"] == "renoise" for r in recs)
    too_long = tmp_path / "long.jsonl"
    too_long.write_text(json.dumps({"prompt": "what " * 9}) + "\n")
    args = parser.parse_args(["generate", "--model", str(folder), "--prompts", str(too_long), "--out",
                              str(tmp_path / "o2.jsonl"), "--nfe", "4", "--no-progress"])
    assert cmd_generate(args) == 2 and not (tmp_path / "o2.jsonl").exists()


@pytest.mark.parametrize("ratio, used", [(5.0, "fp32"), (0.5, "bf16")])
def test_pipeline_precision_is_measured_applied_and_recorded(monkeypatch, ratio, used):
    from elfreg import precision
    from elfreg.sampling.pipeline import GenerationPipeline

    from ._standin import StandInEncoder, tiny_tokenizer

    seen = []

    def fake(workload, cache_dir=None):  # bf16 takes ``ratio`` x fp32's time on this (fake) CPU
        seen.append(workload)
        return ratio, "measured"
    monkeypatch.setattr(precision, "cached_ratio", fake)
    net = _student()
    tok = tiny_tokenizer()
    enc = StandInEncoder(tok, max_len=net.config.max_len, feature_dim=net.config.feature_dim, max_prompt_len=6)
    pipe = GenerationPipeline(net, enc, tok, SamplerConfig(nfe=3, rho=2), batch_size=4, max_prompt_len=6)
    # row by row (batch invariance): the calls are one sequence each, whatever the batch size
    assert seen == [precision.student_workload(net.config, 1, backward=False)] and pipe.precision.choice == used
    dtypes = []
    net.blocks[0].register_forward_hook(lambda m, i, o: dtypes.append(m.attn.qkv(i[0]).dtype))
    recs = list(pipe.generate(["one plus two is", "four"], samples=1))
    assert set(dtypes) == {torch.bfloat16 if used == "bf16" else torch.float32}
    assert all((r["precision"], r["precision_used"], r["bf16_time_ratio"]) == ("auto", used, ratio) for r in recs)


def test_generate_records_the_precision_in_its_fingerprint(tmp_path, tiny_lm_dir):
    folder, _ = _saved_model(tmp_path, tiny_lm_dir)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "what is 3 plus 4 ?"}) + "\n")
    parser = argparse.ArgumentParser(prog="elfreg")
    register(parser.add_subparsers(dest="command", required=True))
    out = tmp_path / "out.jsonl"
    base = ["generate", "--model", str(folder), "--prompts", str(prompts), "--out", str(out), "--nfe", "3",
            "--device", "cpu", "--no-progress"]
    assert cmd_generate(parser.parse_args(base + ["--precision", "fp32"])) == 0
    fp = json.loads((tmp_path / "out.fingerprint.json").read_text())
    assert fp["settings"]["precision"] == "fp32"
    assert fp["notes"] == {"precision": "fp32", "precision_used": "fp32", "bf16_time_ratio": None}
    assert read_records(out)[0]["precision_used"] == "fp32"
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--precision", "half"])
    assert cmd_generate(parser.parse_args(base + ["--precision", "bf16"])) == 2  # another precision: refused
