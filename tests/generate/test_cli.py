import argparse
import json

import pytest

from elfreg.sampling.generate import LoadedModel
from elfreg.generate.cli import cmd_generate, register
from elfreg.sampling.results_io import read_records

from sampling._fixtures import bundle, write_prompts


def _args(*argv):
    parser = argparse.ArgumentParser(prog="elfreg")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["generate", *argv])


def _loader(calls):
    def load(model_dir, device, prompt_format="template"):
        calls.append(model_dir)
        net, enc, tok, mpl = bundle()
        return LoadedModel(net, enc, tok, mpl)
    return load


def test_generate_end_to_end_and_resume(tmp_path, capsys):
    prompts = write_prompts(tmp_path / "p.jsonl")
    out = tmp_path / "o.jsonl"
    argv = ["--model", "m", "--prompts", str(prompts), "--out", str(out), "--sampler", "early-stop",
            "--nfe", "4", "--rho", "8", "--samples", "2", "--seed", "0", "--task", "math", "--no-progress"]
    args = _args(*argv)
    assert args.func is cmd_generate
    calls = []
    assert cmd_generate(args, load=_loader(calls)) == 0
    recs = read_records(out)
    assert len(recs) == 10 and all(r["w"] == 2.0 and r["rho"] == 8 and r["nfe_spent"] == 4 for r in recs)
    assert cmd_generate(_args(*argv), load=_loader(calls)) == 0
    assert len(read_records(out)) == 10  # nothing repeated


@pytest.mark.parametrize("extra, match", [
    (["--sampler", "ddim"], "sampler: unknown sampler 'ddim'"),
    (["--sampler", "adaptive", "--nfe", "4"], "patience: 3 checks every 2 denoiser calls"),
])
def test_bad_settings_fail_before_loading(tmp_path, capsys, extra, match):
    prompts = write_prompts(tmp_path / "p.jsonl")
    calls = []
    args = _args("--model", "m", "--prompts", str(prompts), "--out", str(tmp_path / "o.jsonl"), *extra)
    assert cmd_generate(args, load=_loader(calls)) == 2
    assert match in capsys.readouterr().err and calls == []
    assert not (tmp_path / "o.jsonl").exists()


def test_empty_prompt_file_fails_before_loading(tmp_path, capsys):
    empty = tmp_path / "p.jsonl"
    empty.write_text("")
    calls = []
    assert cmd_generate(_args("--model", "m", "--prompts", str(empty), "--out", str(tmp_path / "o.jsonl")),
                        load=_loader(calls)) == 2
    assert "prompts file is empty" in capsys.readouterr().err and calls == []


def test_too_long_prompt_fails_before_generation(tmp_path, capsys):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"prompt": "one two"}) + "\n" + json.dumps({"prompt": "one " * 9}) + "\n")
    out = tmp_path / "o.jsonl"
    assert cmd_generate(_args("--model", "m", "--prompts", str(p), "--out", str(out), "--nfe", "3"),
                        load=_loader([])) == 2
    err = capsys.readouterr().err
    assert "p.jsonl:2: prompt has 9 tokens" in err and not out.exists()


def test_generate_refuses_an_out_made_with_other_settings(tmp_path, capsys):
    prompts = write_prompts(tmp_path / "p.jsonl")
    out = tmp_path / "o.jsonl"
    base = ["--model", "m", "--prompts", str(prompts), "--out", str(out), "--rho", "2", "--no-progress"]
    assert cmd_generate(_args(*base, "--nfe", "4"), load=_loader([])) == 0
    before = out.read_bytes()
    capsys.readouterr()
    calls = []
    assert cmd_generate(_args(*base, "--nfe", "3"), load=_loader(calls)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"elfreg generate: error: {out}: was made with nfe=4, now nfe=3; pass --restart to start over, "
                   "or use another --out"]
    assert calls == [] and out.read_bytes() == before
    # another prompts file (same name, other bytes) and another seed are refused too, naming them
    write_prompts(prompts, ["a different question"])
    assert cmd_generate(_args(*base, "--nfe", "4", "--seed", "1"), load=_loader(calls)) == 2
    assert "was made with prompts=" in (msg := capsys.readouterr().err) and "seed=0" in msg and "seed=1" in msg
    # --restart moves the old results aside and starts over
    assert cmd_generate(_args(*base, "--nfe", "3", "--restart"), load=_loader(calls)) == 0
    moved = list(tmp_path.glob("o.jsonl.replaced-*"))
    assert len(moved) == 1 and moved[0].read_bytes() == before
    assert {r["nfe"] for r in read_records(out)} == {3}


def test_generate_more_samples_extends_the_run(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl")
    out = tmp_path / "o.jsonl"
    base = ["--model", "m", "--prompts", str(prompts), "--out", str(out), "--nfe", "4", "--rho", "2", "--no-progress"]
    assert cmd_generate(_args(*base, "--samples", "1", "--batch-size", "3"), load=_loader([])) == 0
    first = read_records(out)
    assert cmd_generate(_args(*base, "--samples", "2", "--batch-size", "16"), load=_loader([])) == 0
    recs = read_records(out)
    assert recs[:len(first)] == first and len(recs) == 2 * len(first)


def test_generate_refuses_results_with_no_fingerprint(tmp_path, capsys):
    prompts = write_prompts(tmp_path / "p.jsonl")
    out = tmp_path / "o.jsonl"
    argv = ["--model", "m", "--prompts", str(prompts), "--out", str(out), "--nfe", "4", "--rho", "2", "--no-progress"]
    assert cmd_generate(_args(*argv), load=_loader([])) == 0
    (tmp_path / "o.fingerprint.json").unlink()  # results from an older elfreg
    assert cmd_generate(_args(*argv), load=_loader([])) == 2
    assert "no record of the settings that made them" in capsys.readouterr().err
