"""Text in, text out: ElfModel.generate against `elfreg generate`, inline prompts, stdin and stdout."""

import io
import json
import sys

import pytest

from elfreg.cli import main
from elfreg.pretrained import ElfModel
from elfreg.sampling.results_io import read_records
from helpers import make_tiny_elf_model

PROMPTS = ["what is 3 plus 4 ?", "sort a b c", "what is 9 minus 2 ?"]
FLAGS = ["--nfe", "6", "--rho", "2", "--seed", "3", "--no-progress"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_lm_dir):
    return make_tiny_elf_model(tmp_path_factory.mktemp("textgen") / "model", tiny_lm_dir)


@pytest.fixture(scope="module")
def model(folder):
    return ElfModel.from_pretrained(folder)


def _prompts_file(path, prompts=PROMPTS):
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    return path


def test_generate_returns_the_clis_responses_for_the_same_keys(model, folder, tmp_path):
    out = tmp_path / "o.jsonl"
    argv = ["generate", "--model", str(folder), "--prompts", str(_prompts_file(tmp_path / "p.jsonl")), "--out",
            str(out), "--samples", "2", "--batch-size", "4", *FLAGS]
    assert main(argv) == 0
    by_key = {(r["prompt_index"], r["sample_index"]): r["response"] for r in read_records(out)}
    texts = model.generate(PROMPTS, nfe=6, rho=2, seed=3, samples=2)
    assert texts == [[by_key[(p, s)] for s in range(2)] for p in range(len(PROMPTS))]
    assert any(t.strip() for row in texts for t in row)   # the untrained model says something
    # samples=1 is a flat list: the first sample of each prompt (noise is f(seed, prompt, sample))
    assert model.generate(PROMPTS, nfe=6, rho=2, seed=3) == [row[0] for row in texts]
    # another seed, other noise
    assert model.generate(PROMPTS, nfe=6, rho=2, seed=4, samples=2) != texts


def test_answers_stop_at_the_response_and_eos(model):
    from elfreg.sampling.text import model_pipeline, model_sampler_config

    pipe = model_pipeline(model, model_sampler_config(model, nfe=4, rho=2))
    recs = pipe.run_batch(PROMPTS, [(i, 0) for i in range(len(PROMPTS))])
    eos = model.tokenizer.eos_token_id
    prompt_len = [len(ids) for ids in model.prompt_token_ids(PROMPTS)]
    for rec, n in zip(recs, prompt_len):
        assert eos not in rec["response_token_ids"]
        assert len(rec["response_token_ids"]) <= model.config.model.max_len - n
    assert model.generate(PROMPTS, nfe=4, rho=2) == [r["response"] for r in recs]


def test_inline_prompt_prints_the_answer(model, folder, capsys):
    assert main(["generate", "--model", str(folder), "--prompt", PROMPTS[1], *FLAGS]) == 0
    out, err = capsys.readouterr()
    assert out == model.generate([PROMPTS[1]], nfe=6, rho=2, seed=3)[0] + "\n"
    assert "1 samples -> stdout" in err


def test_stdin_prompts_give_jsonl_on_stdout_equal_to_the_out_file(folder, tmp_path, capsys, monkeypatch):
    path = _prompts_file(tmp_path / "p.jsonl")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert main(["generate", "--model", str(folder), "--prompts", "-", *FLAGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    streamed = [json.loads(x) for x in lines]
    out = tmp_path / "o.jsonl"
    assert main(["generate", "--model", str(folder), "--prompts", str(path), "--out", str(out), *FLAGS]) == 0
    timing = ("encoder_seconds", "sampler_seconds")
    strip = [{k: v for k, v in r.items() if k not in timing} for r in streamed]
    assert strip == [{k: v for k, v in r.items() if k not in timing} for r in read_records(out)]
    assert [r["batch_invariant"] for r in streamed] == [True] * len(PROMPTS)


def test_bad_stdin_line_is_one_line_naming_stdin(folder, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"prompt": "a"}\nnot json\n')))
    assert main(["generate", "--model", str(folder), "--prompts", "-", *FLAGS]) == 2
    assert "<stdin>:2: not valid JSON" in capsys.readouterr().err


def test_format_needs_stdout_and_inline_prompt_resumes_into_out(folder, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    assert main(["generate", "--model", str(folder), "--prompt", "copy d", "--out", str(out), "--format", "text",
                 *FLAGS]) == 2
    assert "--format" in capsys.readouterr().err and not out.exists()
    argv = ["generate", "--model", str(folder), "--prompt", "copy d", "--prompt", "2 times 3", "--out", str(out),
            *FLAGS]
    assert main(argv) == 0 and main(argv) == 0
    assert len(read_records(out)) == 2   # the second run resumed: nothing repeated
    argv[argv.index("copy d")] = "copy c"
    assert main(argv) == 2   # other prompts: refused, naming them
    assert "prompts=" in capsys.readouterr().err


def test_no_batch_invariant_is_recorded_with_the_batch_size(folder, tmp_path, capsys):
    out = tmp_path / "o.jsonl"
    argv = ["generate", "--model", str(folder), "--prompt", "copy d", "--out", str(out), *FLAGS]
    assert main([*argv, "--no-batch-invariant"]) == 0
    assert read_records(out)[0]["batch_invariant"] is False
    assert main(argv) == 2
    assert "batch_invariant=false" in capsys.readouterr().err
    assert main([*argv, "--no-batch-invariant", "--batch-size", "3"]) == 2   # samples depend on it now
    assert "batch_size=16" in capsys.readouterr().err


@pytest.mark.parametrize("call, match", [
    (lambda m: m.generate("what is 3 plus 4 ?"), "give a list of prompts"),
    (lambda m: m.generate(PROMPTS, temperature=0.7), "temperature: not a sampler setting"),
    (lambda m: m.generate(PROMPTS, samples=0), "samples: need an integer >= 1"),
    (lambda m: m.generate(PROMPTS, task="gsm9k"), "task: unknown task 'gsm9k'"),
    (lambda m: m.generate(PROMPTS, nfe=1), r"nfe: need an integer in \[2, 65536\]"),
    (lambda m: m.generate(["what is 3 plus 4 ?", " "]), "prompt:1: empty prompt"),
    (lambda m: m.generate([" ".join(["a"] * 40)]), "prompt:0: prompt has"),
])
def test_bad_arguments_name_the_field(model, call, match):
    with pytest.raises(ValueError, match=match):
        call(model)
