import argparse
import json

import pytest

from elfreg.sampling.cli import LoadedModel, cmd_generate, register
from elfreg.sampling.results_io import read_records

from ._fixtures import bundle, write_prompts


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
    (["--nfe", "1"], "nfe: need an integer N >= 2"),
    (["--rho", "0"], "rho: need an integer rho >= 1"),
    (["--sampler", "ddim"], "sampler: unknown sampler 'ddim'"),
    (["--samples", "0"], "--samples"),
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
