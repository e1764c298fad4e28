"""`elfreg eval run`: generation with a saved elfreg model, then scoring, resumable."""

import json

import pytest
import torch

from elfreg.cli import main
from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
from elfreg.pretrained import ElfModel


def _save_tiny_model(folder, lm_dir, max_len=24, max_prompt_len=16):
    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=max_len, max_prompt_len=max_prompt_len),
                       backbones=BackboneConfig(encoder=str(lm_dir), encoder_layer=2, dtype="float32"))
    torch.manual_seed(0)
    return ElfModel.new(cfg).save_pretrained(folder)


def test_eval_run_generates_scores_and_resumes(tmp_path, tiny_lm_dir):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    data = tmp_path / "gsm.jsonl"
    rows = [{"question": "what is 2 plus 3 ?", "answer": "2 plus 3 is 5\n#### 5"},
            {"question": "what is 1 plus 1 ?", "answer": "#### 2"},
            {"question": "what is 4 minus 1 ?", "answer": "#### 3"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    argv = ["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(data), "--out", str(out),
            "--sampler", "early-stop", "--nfe", "4", "--rho", "2", "--samples", "2", "--no-progress", "--device", "cpu"]
    assert main(argv) == 0
    gens = (out / "generations.jsonl").read_text().splitlines()
    assert len(gens) == 6
    rec = json.loads(gens[0])
    assert rec["nfe_spent"] == 4 and rec["w"] == 3.0  # GSM8K preset of the guidance scale
    summary = json.loads((out / "summary.json").read_text())
    assert summary["generation"]["sampler"] == "early-stop" and summary["generation"]["nfe"] == 4
    assert summary["samples_per_problem"] == 2 and summary["problems"] == 3
    prompts = [json.loads(x) for x in (out / "prompts.jsonl").read_text().splitlines()]
    assert prompts[0]["prompt"] == "what is 2 plus 3 ?"   # the question; the model's template is applied once
    assert rec["prompt_format"] == "template" and rec["prompt_template"] == "Question: {question}\nAnswer:"
    assert summary["generation"]["prompt_template"] == "Question: {question}\nAnswer:"
    # the standard sample file: `completion` for a text benchmark, rescored identically by `eval score`
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6 and set(samples[0]) == {"task_id", "completion", "sample"}
    assert main(["eval", "score", "--benchmark", "gsm8k", "--data", str(data), "--completions",
                 str(out / "samples.jsonl"), "--out", str(tmp_path / "rescore"), "--no-progress"]) == 0
    rescored = json.loads((tmp_path / "rescore" / "summary.json").read_text())
    assert rescored["metrics"]["accuracy"] == summary["metrics"]["accuracy"]
    # a second run resumes: nothing generated again
    assert main(argv) == 0
    assert (out / "generations.jsonl").read_text().splitlines() == gens


def test_eval_run_bad_limit(tmp_path, tiny_lm_dir, capsys):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    assert main(["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--out", str(tmp_path / "r"),
                 "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err


def _gsm_file(tmp_path):
    data = tmp_path / "gsm.jsonl"
    rows = [{"question": "what is 2 plus 3 ?", "answer": "#### 5"},
            {"question": "what is 1 plus 1 ?", "answer": "#### 2"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_eval_run_protocol_settings_are_applied_overridable_and_recorded(tmp_path, tiny_lm_dir):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    out = tmp_path / "run"
    # the paper's GSM8K protocol (early-stop, rho 8, w 3, 16 samples, pass@1 and pass@4) with NFE and samples cut
    argv = ["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(_gsm_file(tmp_path)),
            "--out", str(out), "--protocol", "paper", "--nfe", "3", "--samples", "4", "--no-progress",
            "--device", "cpu"]
    assert main(argv) == 0
    gens = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len(gens) == 2 * 4
    assert {(g["sampler"], g["nfe"], g["rho"], g["w"]) for g in gens} == {("early-stop", 3, 8, 3.0)}
    summary = json.loads((out / "summary.json").read_text())
    ev = summary["evaluation"]
    assert ev["protocol"] == "paper"
    assert ev["origin"] == {"sampler": "protocol:paper", "nfe": "user", "rho": "protocol:paper", "samples": "user",
                            "w": "protocol:paper", "ks": "protocol:paper"}
    assert ev["values"]["ks"] == [1, 4] and summary["pass_at_k"]["ks"] == [1, 4]
    acc = summary["metrics"]["accuracy"]
    assert "pass@4" in acc and 0.0 <= acc["pass@1"] <= acc["pass@4"] <= 1.0
    md = (out / "summary.md").read_text()
    assert "pass@4 (%)" in md and "Protocol: paper" in md and "nfe=3 (user)" in md


def _assert_refused_before_any_work(base: list[str], cases: list[tuple[list[str], str]], tmp_path, capsys) -> None:
    """Each (extra arguments, message): ``elfreg`` + base + extra exits 2, says the message, writes nothing."""
    for i, (extra, msg) in enumerate(cases):
        out = tmp_path / f"r{i}"
        assert main(base + ["--out", str(out)] + extra) == 2
        assert msg in capsys.readouterr().err
        assert not out.exists()  # nothing written, nothing generated


def test_eval_run_bad_protocol_or_k_fails_before_any_work(tmp_path, tiny_lm_dir, capsys):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    base = ["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(_gsm_file(tmp_path)),
            "--device", "cpu", "--no-progress"]
    cases = [(["--protocol", "papr"], "unknown protocol 'papr'"),
             (["--samples", "2", "--k", "1,4"], "pass@4 needs at least 4 samples"),
             (["--protocol", "paper", "--samples", "8", "--k", "10"], "pass@10 needs at least 10 samples"),
             (["--k", "0"], "--k")]
    _assert_refused_before_any_work(base, cases, tmp_path, capsys)


def test_code_samples_are_written_as_solutions(tmp_path):
    from elfreg.eval.completions import Completion, read_completions
    from elfreg.tasks.testsets import load_benchmark
    from elfreg.eval.run_model import write_samples

    bench = load_benchmark("humaneval")
    comps = [Completion("HumanEval/0", 1, "def has_close_elements(n, t):\n    return False\n", 1)]
    write_samples(bench, comps, tmp_path / "samples.jsonl")
    back = read_completions(tmp_path / "samples.jsonl", set(bench.by_id))
    assert [(c.task_id, c.sample, c.completion, c.format) for c in back] == [
        ("HumanEval/0", 1, comps[0].completion, "solution")]


@pytest.mark.slow  # 2 x 16 samples at 128 and 64 NFE: tens of seconds on a loaded 2-core machine
def test_math500_paper_protocol_samples_twice_and_names_each_table(tmp_path, tiny_lm_dir):
    """--protocol paper on MATH-500: a 128-NFE run (pass@1) and a 64-NFE run (pass@1, 10, 16), each in its own
    folder. The file is not the pinned MATH-500, so it is scored by MATH-500's rules as custom data and no number
    stands beside a paper figure (which tables the pinned copy's runs name: tests/eval/test_protocol.py)."""
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"problem": "what is 1 plus 1 ?", "solution": "\\boxed{2}", "answer": "2",
                                "unique_id": "test/x/1.json"}) + "\n")
    out = tmp_path / "run"
    assert main(["eval", "run", "--model", str(model), "--benchmark", "math500", "--data", str(data), "--out",
                 str(out), "--protocol", "paper", "--no-progress", "--device", "cpu", "--batch-size", "16"]) == 0
    for label, nfe, ks in (("nfe-128", 128, [1]), ("nfe-64", 64, [1, 10, 16])):
        gens = [json.loads(x) for x in (out / label / "generations.jsonl").read_text().splitlines()]
        assert len(gens) == 16 and {(g["nfe"], g["nfe_spent"], g["sampler"]) for g in gens} == {
            (nfe, nfe, "early-stop")}
        summary = json.loads((out / label / "summary.json").read_text())
        assert summary["pass_at_k"]["ks"] == ks and summary["evaluation"]["label"] == label
    combined = json.loads((out / "summary.json").read_text())
    assert list(combined["runs"]) == ["nfe-128", "nfe-64"]
    refs = {(r["metric"], r["table"]) for run in combined["runs"].values() for r in run["evaluation"]["paper_refs"]}
    assert refs == set()
    md = (out / "summary.md").read_text()
    assert "### nfe-128: early-stop, 128 NFE, pass@1" in md and "### nfe-64: early-stop, 64 NFE" in md
    assert "vs the paper's" not in md and "Paper figures: none (custom data" in md
    # a second run resumes both folders: nothing generated again
    before = (out / "nfe-64" / "generations.jsonl").read_text()
    assert main(["eval", "run", "--model", str(model), "--benchmark", "math500", "--data", str(data), "--out",
                 str(out), "--protocol", "paper", "--no-progress", "--device", "cpu", "--batch-size", "16"]) == 0
    assert (out / "nfe-64" / "generations.jsonl").read_text() == before


def test_prompts_over_the_model_limit_are_an_error_or_counted_as_wrong(tmp_path, tiny_lm_dir, capsys):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)  # max_prompt_len 16
    data = tmp_path / "gsm.jsonl"
    rows = [{"question": "what is 2 plus 3 ?", "answer": "#### 5"},
            {"question": "what is " + "1 plus " * 12 + "1 ?", "answer": "#### 13"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(data), "--nfe", "3",
            "--samples", "2", "--no-progress", "--device", "cpu"]
    assert main(base + ["--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "1 of 2 gsm8k prompts exceed the model's 16-token prompt limit (longest: gsm8k/1" in err
    assert "--long-prompts skip" in err and not (tmp_path / "e").exists()
    out = tmp_path / "s"
    assert main(base + ["--out", str(out), "--long-prompts", "skip"]) == 0
    assert len((out / "generations.jsonl").read_text().splitlines()) == 2  # only the short question
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prompts_too_long"]["count"] == 1 and summary["prompts_too_long"]["task_ids"] == ["gsm8k/1"]
    assert summary["metrics"]["accuracy"]["problems"] == 2  # the long one counts, as wrong
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert [(s["task_id"], s["completion"]) for s in samples if s["task_id"] == "gsm8k/1"] == [
        ("gsm8k/1", ""), ("gsm8k/1", "")]
    assert "1 problems' prompts exceed the model's 16-token prompt limit" in (out / "summary.md").read_text()


def test_eval_run_on_mmlu_uses_its_protocol_and_prompt(tmp_path, tiny_lm_dir, capsys):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir, max_len=64, max_prompt_len=48)
    data = tmp_path / "mmlu.jsonl"  # MMLU rows short enough for the tiny canvas
    data.write_text("".join(json.dumps({"subject": "sums", "question": q, "choices": c, "answer": a}) + "\n"
                            for q, c, a in [("1 plus 1 ?", ["1", "2", "3", "4"], "B"),
                                            ("2 plus 1 ?", ["3", "2", "1", "4"], "A")]))
    out = tmp_path / "run"
    assert main(["eval", "run", "--model", str(model), "--benchmark", "mmlu", "--data", str(data), "--out", str(out),
                 "--protocol", "paper", "--nfe", "3", "--samples", "4", "--no-progress", "--device", "cpu",
                 "--long-prompts", "skip"]) == 0
    gens = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    prompts = [json.loads(x)["prompt"] for x in (out / "prompts.jsonl").read_text().splitlines()]
    assert prompts[0].startswith("1 plus 1 ?\n(A) 1\n(B) 2\n(C) 3\n(D) 4\nThink step by step")
    summary = json.loads((out / "summary.json").read_text())
    ev = summary["evaluation"]
    assert summary["kind"] == "choice" and {g["sampler"] for g in gens} <= {"full-span"}
    assert ev["values"]["w"] == 2.0 and ev["origin"]["w"] == "protocol:paper" and ev["values"]["ks"] == [1, 4]
    assert ev["paper_refs"] == []  # NFE and samples are not Table 21's: no paper figure beside these numbers
    assert summary["prompts_too_long"]["count"] == 0 and len(gens) == 2 * 4
    small = _save_tiny_model(tmp_path / "small", tiny_lm_dir)  # 16 prompt tokens: no MMLU question fits
    assert main(["eval", "run", "--model", str(small), "--benchmark", "mmlu", "--data", str(data), "--out",
                 str(tmp_path / "none"), "--long-prompts", "skip", "--device", "cpu", "--no-progress"]) == 2
    assert "none is left to generate" in capsys.readouterr().err


def test_eval_run_bad_exit_rule_fails_before_any_work(tmp_path, tiny_lm_dir, capsys):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    base = ["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(_gsm_file(tmp_path)),
            "--device", "cpu", "--no-progress", "--sampler", "adaptive"]
    cases = [(["--nfe", "4"], "patience: 3 checks every 2 denoiser calls"),   # the default rule cannot fire in 4
             (["--protocol", "paper", "--check-every", "0"], "argument --check-every: need an integer in [1, 65536]"),
             (["--min-nfe", "99"], "min_nfe: 99 exceeds nfe = 64"),
             (["--extract", "regex"], "extract: unknown answer extractor 'regex'")]
    _assert_refused_before_any_work(base, cases, tmp_path, capsys)


def test_eval_run_protocol_with_the_adaptive_exit_records_its_settings_and_nfe(tmp_path, tiny_lm_dir):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    out = tmp_path / "run"
    # the paper's GSM8K protocol (64 NFE, rho 8, w 3) with the sampler switched to the adaptive exit (max 64 NFE)
    assert main(["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(_gsm_file(tmp_path)),
                 "--out", str(out), "--protocol", "paper", "--sampler", "adaptive", "--samples", "2",
                 "--check-every", "4", "--patience", "1", "--no-progress", "--device", "cpu"]) == 0
    gens = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert {(g["sampler"], g["nfe"], g["rho"], g["w"], g["check_every"], g["patience"], g["extract"])
            for g in gens} == {("adaptive", 64, 8, 3.0, 4, 1, "gsm8k")}
    assert all(g["nfe_spent"] == g["denoiser_calls"] + g["decoder_calls"] <= 64 for g in gens)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["evaluation"]["origin"]["sampler"] == "user" and summary["evaluation"]["origin"]["nfe"] == \
        "protocol:paper"
    assert summary["generation"]["patience"] == 1 and summary["nfe"]["n"] == 4
    assert sum(summary["nfe"]["histogram"].values()) == 4


def test_eval_run_refuses_an_out_made_with_other_settings(tmp_path, tiny_lm_dir, capsys):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    out = tmp_path / "run"
    base = ["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(_gsm_file(tmp_path)),
            "--out", str(out), "--sampler", "early-stop", "--rho", "2", "--no-progress", "--device", "cpu"]
    assert main([*base, "--nfe", "4"]) == 0
    gens = (out / "generations.jsonl").read_bytes()
    progress, n = capsys.readouterr().err, len(gens.splitlines())   # generation's lines name the command run
    assert f"elfreg eval run: {n} new samples on rank 0 -> {out / 'generations.jsonl'}\n" in progress
    assert f"elfreg eval run: NFE per sample in {out / 'generations.jsonl'}: " in progress
    assert "elfreg generate" not in progress
    assert main([*base, "--nfe", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"elfreg eval run: error: {out / 'generations.jsonl'}: was made with nfe=4, now nfe=3; pass --restart "
                   "to start over, or use another --out"]
    assert (out / "generations.jsonl").read_bytes() == gens
    other = _save_tiny_model(tmp_path / "other", tiny_lm_dir, max_len=28)  # another model into the same folder
    assert main([*base[:3], str(other), *base[4:], "--nfe", "4"]) == 2
    assert "was made with model=" in capsys.readouterr().err
    assert main([*base, "--nfe", "3", "--restart"]) == 0
    assert (tmp_path / next(p.name for p in tmp_path.glob("run.replaced-*")) / "generations.jsonl").read_bytes() == gens
    assert json.loads((out / "summary.json").read_text())["generation"]["nfe"] == 3


def test_bad_input_found_by_generation_names_eval_run_not_generate(tmp_path, tiny_lm_dir, capsys, monkeypatch):
    """eval run calls generate's library function; bad input it finds there is reported under the command the user
    ran: ``elfreg eval run: error: ...``, exit code 2, nothing generated."""
    import elfreg.sampling.generate as generation

    def refuse(need):
        raise ValueError("--batch-size: the grids need more memory than this machine has")

    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    monkeypatch.setattr(generation, "check_fits", refuse)   # eval run's own check (before any work) passes
    out = tmp_path / "run"
    assert main(["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(_gsm_file(tmp_path)),
                 "--out", str(out), "--nfe", "4", "--rho", "2", "--no-progress", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "error" in line] == [
        "elfreg eval run: error: --batch-size: the grids need more memory than this machine has"]
    assert "elfreg generate" not in err and not (out / "generations.jsonl").exists()


def test_eval_run_without_isolation_refuses_before_touching_out(tmp_path, tiny_lm_dir, capsys, monkeypatch):
    monkeypatch.setenv("ELFREG_BWRAP", "/nonexistent/bwrap")
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    out = tmp_path / "run"
    out.mkdir()
    (out / "generations.jsonl").write_text("kept\n")
    assert main(["eval", "run", "--model", str(model), "--benchmark", "humaneval", "--limit", "1", "--out", str(out),
                 "--nfe", "2", "--no-progress", "--device", "cpu", "--restart"]) == 2
    assert "--isolation none" in capsys.readouterr().err
    assert (out / "generations.jsonl").read_text() == "kept\n" and not list(tmp_path.glob("run.replaced-*"))


def test_eval_run_refuses_a_bad_text_limit_before_any_work(tmp_path, tiny_lm_dir, capsys):
    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    out = tmp_path / "run"
    base = ["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(_gsm_file(tmp_path)),
            "--out", str(out), "--nfe", "2", "--no-progress", "--device", "cpu"]
    assert main([*base, "--text-limit", "-1"]) == 2
    assert "argument --text-limit: need a number in [1, 86400] s, got -1.0" in capsys.readouterr().err
    assert main([*base, "--min-time", "100"]) == 2   # each flag in range, the two together not (cap 60 s < floor)
    assert "time_rule.sample_cap_s: 60 s is below min_time_s 100 s" in capsys.readouterr().err
    assert not out.exists()


def test_eval_run_generates_as_generate_does_with_its_sampler_settings_built_once(tmp_path, tiny_lm_dir,
                                                                                  monkeypatch):
    """`eval run` calls generate's own library function (elfreg.sampling.generate.run_generation) with one
    SamplerConfig per run, built once: its generations are `elfreg generate`'s on the same prompts and settings."""
    import elfreg.generate.cli as generate_cli
    import elfreg.sampling.flags as flags
    import elfreg.sampling.generate as generation

    model = _save_tiny_model(tmp_path / "model", tiny_lm_dir)
    data = _gsm_file(tmp_path)
    built, jobs = [], []
    real_config, real_run = flags.sampler_config, generation.run_generation
    monkeypatch.setattr(flags, "sampler_config", lambda **kw: built.append(kw) or real_config(**kw))
    for module in (generation, generate_cli):
        monkeypatch.setattr(module, "run_generation", lambda job, *a: jobs.append(job) or real_run(job, *a))
    out = tmp_path / "run"
    flags = ["--nfe", "4", "--rho", "2", "--samples", "2", "--seed", "3", "--no-progress", "--device", "cpu"]
    assert main(["eval", "run", "--model", str(model), "--benchmark", "gsm8k", "--data", str(data), "--out", str(out),
                 *flags]) == 0
    assert len(built) == 1 and len(jobs) == 1 and jobs[0].cfg.w == 3.0 and jobs[0].cfg.extract == "gsm8k"
    assert main(["generate", "--model", str(model), "--prompts", str(out / "prompts.jsonl"), "--out",
                 str(tmp_path / "g.jsonl"), "--task", "gsm8k", *flags]) == 0
    assert jobs[1].cfg == jobs[0].cfg

    def rows(path):
        keep = ("prompt_id", "sample_index", "response", "response_token_ids", "nfe_spent", "w", "extract", "seed")
        return [{k: r[k] for k in keep} for r in map(json.loads, path.read_text().splitlines())]

    assert rows(out / "generations.jsonl") == rows(tmp_path / "g.jsonl")
