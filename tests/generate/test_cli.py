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


def _elfreg_generate(tmp_path, *argv, stdin=b""):
    """`elfreg generate` as a user runs it (argv items may be bytes: what a shell passes through unchanged)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "elfreg.cli", "generate", "--model", str(tmp_path / "no-model"),
                           *argv], input=stdin, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(repo / "src")})


@pytest.mark.parametrize("argv, stdin, says", [
    (["--prompts", "-"], b'{"prompt": "fine"}\n{"prompt": "a \\ud800 b"}\n',
     b"<stdin>:2: prompt: text that cannot be encoded as UTF-8 (U+D800 at character 3"),
    (["--prompts", "-"], b'{"prompt": "fine"}\n\n{"prompt": "caf\xe9"}\n',
     b"<stdin>:3: not UTF-8 (byte 16 of the line is 0xe9); save the file as UTF-8"),
    (["--prompts", "-"], b'{"prompt": "x", "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
     b"<stdin>:1: not valid JSON here (nested too deeply)"),
    (["--prompts", "-"], b'{"prompt": "x", "id": ' + b"7" * 5000 + b"}\n", b"<stdin>:1: not valid JSON here"),
    ([b"--prompt", b"fine", b"--prompt", b"caf\xe9 au lait"],
     b"", b"--prompt:2: text that cannot be encoded as UTF-8 (0xe9 at character 4"),
])
def test_inputs_that_cannot_be_encoded_are_one_line_exit_2(tmp_path, argv, stdin, says):
    run = _elfreg_generate(tmp_path, *argv, stdin=stdin)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(b"elfreg generate: error: ") and run.stderr.count(b"\n") == 1, run.stderr
    assert says in run.stderr, run.stderr


def test_a_prompts_file_with_a_lone_surrogate_names_its_line(tmp_path, capsys):
    p = tmp_path / "p.jsonl"
    p.write_bytes(b'{"prompt": "one"}\n{"prompt": "\\udc80"}\n')
    assert cmd_generate(_args("--model", "m", "--prompts", str(p), "--out", str(tmp_path / "o.jsonl")),
                        load=_loader(calls := [])) == 2
    assert f"{p}:2: prompt: text that cannot be encoded as UTF-8" in capsys.readouterr().err and calls == []
