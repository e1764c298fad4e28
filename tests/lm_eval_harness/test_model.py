"""The lm-eval model type ``elfreg`` on a tiny saved model: noise keys, batching, sharding, until / max_gen_toks,
the no-likelihood error, model_args validation, chat rendering, the command line's argv."""

import json

import pytest
import torch

pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install "elfreg[lm-eval]"')

from lm_eval.api.instance import Instance  # noqa: E402

from elfreg.lm_eval.cli import lm_eval_argv, main as lm_eval_main  # noqa: E402
from elfreg.lm_eval.model import ElfLM, cut_at_stop  # noqa: E402
from elfreg.sampling.decode import detokenize  # noqa: E402

from ._task import TASK, evaluate, fixed_answers, tiny_model, write_task  # noqa: E402

PROMPTS = ["what is 2 plus 3 ?", "what is 1 plus 1 ?", "what is 4 minus 1 ?", "sort the list", "what is 2 plus 3 ?"]
SETTINGS = dict(sampler="early-stop", nfe=4, rho=2, seed=5, device="cpu")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_lm_dir):
    m = tiny_model(tiny_lm_dir, 24, 16, prompt_template="question : {question} answer :")
    torch.nn.init.normal_(m.student.final_linear.weight, std=0.5)   # responses of several tokens, not EOS at once
    return m.save_pretrained(tmp_path_factory.mktemp("lm") / "model")


def _requests(prompts, task="t", repeats=1, **gen):
    return [Instance("generate_until", {}, (p, {"until": [], **gen}), 0, (task, i, repeats))
            for i, p in enumerate(prompts)]


def _cloned(reqs):
    """What lm-eval's evaluator passes: each request repeated ``repeats`` times, the same object."""
    return [r for r in reqs for _ in range(r.repeats)]


def test_generations_equal_elfreg_generate_and_do_not_depend_on_batch_or_ranks(model_dir, tmp_path):
    from elfreg.cli import main

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    out = tmp_path / "g.jsonl"
    assert main(["generate", "--model", str(model_dir), "--prompts", str(prompts), "--out", str(out), "--samples", "2",
                 "--sampler", "early-stop", "--nfe", "4", "--rho", "2", "--seed", "5", "--device", "cpu",
                 "--batch-size", "3", "--no-progress"]) == 0
    gen = {(r["prompt_index"], r["sample_index"]): r["response"] for r in map(json.loads, out.open())}
    assert len(set(gen.values())) > 2   # the tiny model says different things to different keys

    lm = ElfLM(pretrained=str(model_dir), prompt_format="template", batch_size=4, **SETTINGS)
    reqs = _requests(PROMPTS, repeats=2)
    got = lm.generate_until(_cloned(reqs))
    assert got == [gen[(i, k)] for i in range(len(PROMPTS)) for k in (0, 1)]
    # batch size 1 and two "ranks" (lm-eval shards docs, keeping their global doc ids) give the same texts
    assert ElfLM(pretrained=str(model_dir), prompt_format="template", batch_size=1, **SETTINGS).generate_until(
        _cloned(reqs)) == got
    shard = {r: lm.generate_until(_cloned([q for q in reqs if q.doc_id % 2 == r])) for r in (0, 1)}
    by_doc = {q.doc_id: shard[q.doc_id % 2][2 * j: 2 * j + 2] for r in (0, 1)
              for j, q in enumerate(q for q in reqs if q.doc_id % 2 == r)}
    assert [t for i in range(len(PROMPTS)) for t in by_doc[i]] == got
    # prompt_format=raw encodes the context unchanged: the templated text gives the same responses
    raw = ElfLM(pretrained=str(model_dir), batch_size=4, **SETTINGS)
    assert raw.generate_until(_cloned(_requests([f"question : {p} answer :" for p in PROMPTS], repeats=2))) == got
    assert raw.generate_until(_cloned(_requests(PROMPTS, repeats=2))) != got


def test_until_and_max_gen_toks_apply_to_the_decoded_text(model_dir):
    lm = ElfLM(pretrained=str(model_dir), prompt_format="template", batch_size=8, **SETTINGS)
    full = lm.pipeline.run_rows(PROMPTS[:3], [(i, 0) for i in range(3)])
    assert all(len(r["response_token_ids"]) >= 3 for r in full)
    capped = lm.generate_until(_requests(PROMPTS[:3], max_gen_toks=2))
    assert capped == [detokenize(lm.model.tokenizer, [r["response_token_ids"][:2]])[0] for r in full]
    stop = full[0]["response"].split()[1]
    cut = lm.generate_until(_requests(PROMPTS[:1], until=[stop, "never"]))
    assert cut == [full[0]["response"][: full[0]["response"].find(stop)]]
    assert cut_at_stop("a b c d", ["c", "b"]) == "a " and cut_at_stop("abc", []) == "abc"


def test_request_longer_than_the_canvas_is_an_error_or_a_counted_truncation(model_dir, caplog):
    lm = ElfLM(pretrained=str(model_dir), prompt_format="template", **SETTINGS)
    room = 24 - len(lm.model.prompt_token_ids([PROMPTS[0]])[0])
    with pytest.raises(ValueError, match=rf"request 0 \(task t, doc 0\): max_gen_toks=256 but .* at most {room} "
                                         "response tokens"):
        lm.generate_until(_requests(PROMPTS[:1], max_gen_toks=256))
    lm = ElfLM(pretrained=str(model_dir), prompt_format="template", long_requests="truncate", **SETTINGS)
    assert lm.generate_until(_requests(PROMPTS[:1], max_gen_toks=256)) == lm.generate_until(_requests(PROMPTS[:1]))
    assert "1 of 1 requests asked for more tokens than the canvas holds" in caplog.text
    with pytest.raises(ValueError, match="prompt has 21 tokens.*at most 16 prompt tokens"):  # 17 + template 4
        lm.generate_until(_requests(["what " * 17]))
    with pytest.raises(ValueError, match="unsupported generation_kwargs"):
        lm.generate_until(_requests(PROMPTS[:1], min_new_tokens=3))


def test_likelihood_requests_name_why_and_which_tasks(model_dir):
    lm = ElfLM(pretrained=str(model_dir), **SETTINGS)
    reqs = [Instance("loglikelihood", {}, ("2 plus 3 is", " 5"), 0, ("arc_easy", 0, 1))]
    with pytest.raises(NotImplementedError, match=r"no tractable likelihood.*multiple_choice.*task\(s\): arc_easy"):
        lm.loglikelihood(reqs)
    with pytest.raises(NotImplementedError, match="loglikelihood_rolling.*no tractable likelihood"):
        lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("text",), 0, ("wikitext", 0, 1))])


def test_a_multiple_choice_task_fails_with_that_error_through_lm_eval(model_dir, tmp_path):
    data = tmp_path / "mc.jsonl"
    data.write_text(json.dumps({"q": "what is 1 plus 1 ?", "choices": ["2", "3"], "label": 0}) + "\n")
    (tmp_path / "mc.yaml").write_text(
        f"task: elfreg_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        f"  cache_dir: {tmp_path / 'hf'}\ntest_split: test\noutput_type: multiple_choice\ndoc_to_text: \"{{{{q}}}}\"\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n")
    import lm_eval
    from lm_eval.tasks import TaskManager

    with pytest.raises(NotImplementedError, match="no tractable likelihood.*task\\(s\\): elfreg_mc"):
        lm_eval.simple_evaluate(model="elfreg", model_args={"pretrained": str(model_dir), "device": "cpu"},
                                tasks=["elfreg_mc"], task_manager=TaskManager(include_path=str(tmp_path),
                                                                              include_defaults=False))


@pytest.mark.parametrize("kwargs, match", [
    ({"nfe": 1}, r"nfe: need an integer in \[2, 65536\]"),
    ({"w": "nan"}, r"w: need a number in \[0, 100\] \(guidance scale\), got nan"),
    ({"nfe": "4.5"}, "model_args nfe: expected int"),
    ({"sampler": "ddim"}, "unknown sampler 'ddim'"),
    ({"prompt_format": "chat"}, "model_args prompt_format: expected one of raw, template"),
    ({"long_requests": "drop"}, "long_requests"),
    ({"batch_size": "auto"}, "integer batch size"),
    ({"temperature": 0.7}, "unknown argument.*temperature"),
    ({"task": "poetry"}, "no w preset"),
])
def test_bad_model_args_fail_before_loading(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ElfLM(pretrained="/no/such/model", **kwargs)   # a load would fail with FileNotFoundError instead


def test_model_args_strings_and_sampler_settings(model_dir):
    lm = ElfLM(pretrained=str(model_dir), nfe="8", rho="4", w="2.5", p="0.25", eta="1", drop_reg="true", seed="7",
               sampler="renoise", device="cpu")
    cfg = lm.sampler_config
    assert (cfg.nfe, cfg.rho, cfg.w, cfg.p, cfg.eta, cfg.drop_reg, cfg.seed, cfg.sampler) == (
        8, 4, 2.5, 0.25, 1.0, True, 7, "renoise")
    assert cfg.sigma == lm.model.config.objective.sigma          # the model's training sigma unless given
    assert ElfLM(pretrained=str(model_dir), task="math", device="cpu").sampler_config.w == 2.0
    assert (lm.rank, lm.world_size) == (0, 1)


def test_chat_rendering_uses_the_model_template(model_dir):
    lm = ElfLM(pretrained=str(model_dir), device="cpu")
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is 1 plus 1 ?"},
            {"role": "assistant", "content": "2"}, {"role": "user", "content": " what is 2 plus 3 ? "}]
    assert lm.apply_chat_template(chat) == ("be brief\n\nquestion : what is 1 plus 1 ? answer : 2\n\n"
                                            "question : what is 2 plus 3 ? answer :")
    assert "question : {question} answer :" in lm.tokenizer_name
    with pytest.raises(ValueError, match="applied twice"):
        ElfLM(pretrained=str(model_dir), device="cpu", prompt_format="template").apply_chat_template(chat)


def test_lm_eval_exact_match_equals_elfreg_scorer_on_the_same_texts(tmp_path):
    """The local task's filter + exact_match agree with elfreg's demo-arith scorer, right and wrong answers alike."""
    from elfreg.tasks import arith
    from elfreg.eval.demo_benchmarks import load_demo_arith
    from elfreg.eval.completions import Completion
    from elfreg.eval.scoring import ScoreOptions, score_completions

    probs = arith.make_split(6, 0, "test")
    rows = [{"id": f"arith/{i}", "question": arith.format_prompt(p), "answer": p.answer} for i, p in enumerate(probs)]
    texts = [arith.reference_response(probs[0]), "#### 99", f"{arith.worked_steps(probs[2])}\n#### {probs[2].answer}",
             f"The answer is: {probs[3].answer}", f"#### {probs[4].answer}\nmore\n#### 1", f"#### {probs[5].answer} "]

    res = evaluate(write_task(tmp_path / "task", rows), fixed_answers(texts))
    lm_scores = [s["exact_match"] for s in sorted(res["samples"][TASK], key=lambda s: s["doc_id"])]
    bench = load_demo_arith(str(tmp_path / "task" / "test.jsonl"))
    summary = score_completions(bench, [Completion(r["id"], 0, t, i) for i, (r, t) in enumerate(zip(rows, texts))],
                                tmp_path / "results.jsonl", ScoreOptions(workers=1, progress=False))
    ours = {r["task_id"]: r["correct"] for r in map(json.loads, (tmp_path / "results.jsonl").open())}
    assert [float(ours[r["id"]]) for r in rows] == lm_scores
    assert 0 < sum(lm_scores) < len(rows) and summary is not None


def test_command_line_turns_a_model_folder_into_model_args(capsys):
    assert lm_eval_argv(["--model", "runs/m", "--tasks", "gsm8k"]) == [
        "--model", "elfreg", "--tasks", "gsm8k", "--device", "cpu", "--model_args", "pretrained=runs/m"]
    assert lm_eval_argv(["--model", "runs/m", "--model_args", "nfe=16,seed=1", "--tasks", "gsm8k", "--device",
                         "cuda:1"]) == ["--model", "elfreg", "--model_args", "pretrained=runs/m,nfe=16,seed=1",
                                        "--tasks", "gsm8k", "--device", "cuda:1"]
    same = ["--model", "elfreg", "--model_args", "pretrained=x", "--tasks", "t", "--device", "cpu"]
    assert lm_eval_argv(same) == same
    with pytest.raises(ValueError, match="both name the model"):
        lm_eval_argv(["--model", "runs/m", "--model_args", "pretrained=x"])
    assert lm_eval_main(["--tasks", "gsm8k"]) == 2
    assert "--model: give an elfreg model folder" in capsys.readouterr().err


def _rank_worker(rank, world, store, task_dir, model_dir, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        res = evaluate(task_dir, "elfreg", {"pretrained": model_dir, "prompt_format": "template", **SETTINGS},
                       batch_size=2)
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"samples": res["samples"][TASK], "score": res["results"][TASK]["exact_match,final"]}, f,
                          default=float)
    finally:
        dist.destroy_process_group()


def _tiny_rows():
    return [{"id": f"t/{i}", "question": q, "answer": str(i % 3)} for i, q in enumerate(PROMPTS)]


@pytest.mark.slow
@pytest.mark.dist
def test_two_ranks_under_lm_eval_give_the_single_process_samples(model_dir, tmp_path):
    import torch.multiprocessing as mp

    task_dir = write_task(tmp_path / "task", _tiny_rows(), repeats=2)     # 5 docs: ranks get 3 and 2 (padded)
    single = evaluate(task_dir, "elfreg", {"pretrained": str(model_dir), "prompt_format": "template", **SETTINGS},
                      batch_size=4)
    out = tmp_path / "ranks.json"
    mp.spawn(_rank_worker, args=(2, str(tmp_path / "store"), task_dir, str(model_dir), str(out)), nprocs=2, join=True)
    got = json.loads(out.read_text())
    # lm-eval pads the shorter rank with copies of its last request and appends their responses to that request
    # (doc 3 here; its metric reads the first): compare the `repeats` responses every doc asked for
    by_doc = {s["doc_id"]: s["resps"][0][:2] for s in got["samples"]}
    assert sorted(by_doc) == list(range(len(PROMPTS)))
    assert {s["doc_id"]: s["resps"][0] for s in single["samples"][TASK]} == by_doc
    assert got["score"] == pytest.approx(single["results"][TASK]["exact_match,final"])


@pytest.mark.slow
def test_elfreg_lm_eval_command_writes_lm_eval_results(model_dir, tmp_path):
    from elfreg.cli import main

    task_dir = write_task(tmp_path / "task", _tiny_rows())
    out = tmp_path / "out"
    assert main(["lm-eval", "--model", str(model_dir), "--model_args", "nfe=4,rho=2,seed=5,prompt_format=template",
                 "--tasks", TASK, "--include_path", str(task_dir), "--output_path", str(out), "--log_samples",
                 "--batch_size", "2"]) == 0
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    assert results["config"]["model"] == "elfreg" and results["results"][TASK]["exact_match,final"] >= 0
    samples = [json.loads(x) for x in next(out.rglob(f"samples_{TASK}_*.jsonl")).read_text().splitlines()]
    lm = ElfLM(pretrained=str(model_dir), prompt_format="template", **SETTINGS)
    texts = lm.generate_until(_requests(PROMPTS, until=["Question:"]))
    assert [s["resps"][0][0] for s in sorted(samples, key=lambda s: s["doc_id"])] == texts


ADAPTIVE = ["--sampler", "adaptive", "--nfe", "12", "--rho", "2", "--check-every", "1", "--patience", "1",
            "--seed", "5"]


def test_adaptive_exit_gives_the_same_samples_and_nfe_through_eval_run_generate_and_lm_eval(model_dir, tmp_path):
    from elfreg.cli import main

    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"question": p, "answer": "#### 5"}) + "\n" for p in PROMPTS[:4]))
    run = tmp_path / "run"
    assert main(["eval", "run", "--model", str(model_dir), "--benchmark", "gsm8k", "--data", str(data), "--out",
                 str(run), "--samples", "2", "--device", "cpu", "--no-progress", *ADAPTIVE]) == 0
    evaluated = {(r["prompt_index"], r["sample_index"]): r for r in map(json.loads, (run / "generations.jsonl").open())}
    assert {r["extract"] for r in evaluated.values()} == {"gsm8k"}   # the benchmark's own answer extractor
    summary = json.loads((run / "summary.json").read_text())
    assert summary["generation"]["sampler"] == "adaptive" and summary["generation"]["check_every"] == 1
    assert summary["nfe"]["n"] == 8 and summary["nfe"]["mean"] == pytest.approx(
        sum(r["nfe_spent"] for r in evaluated.values()) / 8)
    assert "NFE per sample: mean" in (run / "summary.md").read_text()

    gen = tmp_path / "gen.jsonl"
    assert main(["generate", "--model", str(model_dir), "--prompts", str(run / "prompts.jsonl"), "--out", str(gen),
                 "--samples", "2", "--task", "gsm8k", "--device", "cpu", "--batch-size", "3", "--no-progress",
                 *ADAPTIVE]) == 0
    generated = {(r["prompt_index"], r["sample_index"]): r for r in map(json.loads, gen.open())}
    keep = ("response", "nfe_spent", "denoiser_calls", "decoder_calls", "settled", "exit_time", "extract")
    assert {k: {f: r[f] for f in keep} for k, r in generated.items()} == \
        {k: {f: r[f] for f in keep} for k, r in evaluated.items()}
    nfe = [r["nfe_spent"] for r in generated.values()]
    assert len(set(nfe)) > 1 and max(nfe) <= 12   # rows stop at different points (not a degenerate case)

    questions = [json.loads(x)["prompt"] for x in (run / "prompts.jsonl").open()]
    lm = ElfLM(pretrained=str(model_dir), prompt_format="template", batch_size=4, sampler="adaptive", nfe=12, rho=2,
               check_every=1, patience=1, seed=5, task="gsm8k", device="cpu")
    assert lm.sampler_config.extract == "gsm8k"
    got = lm.generate_until(_cloned(_requests(questions, repeats=2)))
    assert got == [generated[(i, k)]["response"] for i in range(4) for k in (0, 1)]
    assert lm.nfe_spent == [generated[(i, k)]["nfe_spent"] for i in range(4) for k in (0, 1)]


@pytest.mark.parametrize("kwargs, match", [
    ({"sampler": "adaptive", "check_every": "two"}, "model_args check_every: expected int"),
    ({"sampler": "adaptive", "patience": 0}, "^patience: need an integer >= 1"),
    ({"sampler": "adaptive", "nfe": 6, "check_every": 4}, "^patience: .* could never fire"),
    ({"sampler": "adaptive", "min_nfe": 100}, "^min_nfe: 100 exceeds nfe = 64"),
    ({"sampler": "adaptive", "extract": "regex"}, "^extract: unknown answer extractor 'regex'"),
])
def test_bad_exit_rule_model_args_fail_before_loading(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ElfLM(pretrained="/no/such/model", **kwargs)
