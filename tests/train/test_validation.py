"""Validation while training (data.validation, train.validate_every, train.keep_best) and the vocabulary head
restricted to the training responses (train.head_vocab), on the tiny Qwen3 and the sums file."""

import hashlib
import json

import pytest
import torch
from huggingface_hub import ModelCard

from helpers import REPO
from _tiny import sum_rows, tiny_overrides
from elfreg.backbones import Backbones
from elfreg.data.vocab import head_token_ids
from elfreg.pretrained import ElfModel
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.samplers import sample
from elfreg.train.config import load_run_config
from elfreg.train.metrics import read_metrics
from elfreg.train.trainer import train
from elfreg.train.validation import answers_match

CONFIG = str(REPO / "configs/tiny-smoke.yaml")   # not relative: the tests may start anywhere


def cfg(lm, data, **over):
    return load_run_config(CONFIG, tiny_overrides(lm, data, **{"train.steps": 7, "train.save_every": 4,
                                                                "train.log_every": 5, **over}))


def val_steps(out):
    return [r["step"] for r in read_metrics(out / "metrics.jsonl") if "val_loss" in r]


@pytest.fixture
def held_jsonl(tmp_path):
    path = tmp_path / "held.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in sum_rows(seed=1)[:6]))
    return path


@pytest.mark.parametrize("every_s, drawn_at", [(60.0, [1, "end"]), (0.0, [1, 2, 3, 4, "end"])])
def test_the_curve_is_drawn_at_the_first_checkpoint_then_at_most_every_plot_every_s(tmp_path, tiny_lm_dir, sums_jsonl,
                                                                                   monkeypatch, every_s, drawn_at):
    import elfreg.train.metrics as metrics
    import elfreg.train.trainer as trainer

    steps, drawn = [0], []
    monkeypatch.setattr(trainer, "PLOT_EVERY_S", every_s)
    monkeypatch.setattr(metrics, "plot_learning_curve", lambda out: drawn.append(steps[0]))

    def at(step):
        steps[0] = step

    train(cfg(tiny_lm_dir, sums_jsonl, **{"train.steps": 4, "train.save_every": 1}), tmp_path / "run",
          hooks=[at])
    # the hooks run after a step's checkpoint: a drawing at step k's checkpoint is recorded under k - 1
    assert [d + 1 for d in drawn[:-1]] + ["end"] == drawn_at


def test_validation_is_scored_at_exactly_the_asked_steps(tmp_path, tiny_lm_dir, sums_jsonl, held_jsonl):
    curves = []

    def curve_after_first_checkpoint(step):
        if step == 4:
            curves.append((tmp_path / "run" / "learning_curve.png").is_file())

    res = train(cfg(tiny_lm_dir, sums_jsonl, **{"data.validation": held_jsonl, "train.validate_every": 3,
                                               "train.validate_nfe": 2}),
                tmp_path / "run", hooks=[curve_after_first_checkpoint])
    assert val_steps(tmp_path / "run") == [3, 6, 7]   # every 3 steps and the last
    rec = {r["step"]: r for r in read_metrics(tmp_path / "run" / "metrics.jsonl")}
    assert rec[3]["val_rows"] == 6 and 0 <= rec[3]["val_acc"] <= 1 and rec[3]["val_loss"] > 0
    assert "loss" in rec[3]   # a validation step is a logged step
    assert curves == [True]   # the curve is drawn at the first checkpoint, not only at the end
    v = res.summary["validation"]
    assert v["step"] == 7 and v["val_acc"] == rec[7]["val_acc"] and v["val_loss"] == rec[7]["val_loss"]
    # the model card says the last validation: the user's file by name and sha256 (never its path), its step
    sha = hashlib.sha256(held_jsonl.read_bytes()).hexdigest()
    card = ModelCard.load(tmp_path / "run" / "model" / "README.md")
    t = card.data.to_dict()["elfreg"]["training"]["validation"]
    assert t == {"file": "held.jsonl", "sha256": sha, "rows": 6, "loss_rows": rec[7]["val_loss_rows"],
                 "answers_unwritable": 0, "step": 7,
                 "accuracy": rec[7]["val_acc"], "loss": rec[7]["val_loss"], "sampler": "early-stop", "nfe": 2}
    assert (f"**Held-out validation while training** (the file held.jsonl, sha256 {sha}; 6 rows): accuracy "
            f"{100 * rec[7]['val_acc']:.1f} % at step 7") in card.text
    assert str(held_jsonl) not in card.text and "GSM8K" not in card.text
    # the checkpoint at step 4 records the validation scored before it (step 3)
    ckpt = ModelCard.load(tmp_path / "run" / "ckpt-00000004" / "model" / "README.md")
    assert ckpt.data.to_dict()["elfreg"]["training"]["validation"]["step"] == 3
    # 0: at every checkpoint (4) and the last step
    train(cfg(tiny_lm_dir, sums_jsonl, **{"data.validation": held_jsonl, "train.validate_nfe": 2}), tmp_path / "ck")
    assert val_steps(tmp_path / "ck") == [4, 7]


def test_resumed_run_keeps_the_validation_points(tmp_path, tiny_lm_dir, sums_jsonl, held_jsonl):
    over = {"data.validation": held_jsonl, "train.validate_every": 2, "train.validate_nfe": 2,
            "train.keep_best": True, "train.save_every": 3}
    ref = tmp_path / "ref"
    train(cfg(tiny_lm_dir, sums_jsonl, **over), ref)

    def crash(step):
        if step == 5:
            raise RuntimeError("killed")

    out = tmp_path / "resumed"
    with pytest.raises(RuntimeError, match="killed"):
        train(cfg(tiny_lm_dir, sums_jsonl, **over), out, hooks=[crash])
    assert val_steps(out) == [2, 4]
    train(cfg(tiny_lm_dir, sums_jsonl, **over), out)   # from the checkpoint at step 3
    assert val_steps(out) == val_steps(ref) == [2, 4, 6, 7]
    pick = lambda d: [(r["step"], r["val_acc"], r["val_loss"]) for r in read_metrics(d / "metrics.jsonl")  # noqa: E731
                      if "val_loss" in r]
    assert pick(out) == pick(ref)
    best = json.loads((out / "best.json").read_text())
    assert best == json.loads((ref / "best.json").read_text())
    assert best["val_acc"] == max(a for _, a, _ in pick(ref))
    assert ElfModel.from_pretrained(out / "best").config.model.max_len == 24


def test_held_out_fraction_leaves_training(tmp_path, tiny_lm_dir, sums_jsonl):
    res = train(cfg(tiny_lm_dir, sums_jsonl, **{"data.validation": 0.25, "train.validate_nfe": 2,
                                               "data.features": "cached"}), tmp_path / "run")
    rows = res.summary["validation"]["val_rows"]
    assert 0 < rows < len(sum_rows())
    assert res.summary["overflow_rows_read"] + rows == len(sum_rows())   # the held-out rows are not trained on


def test_restricted_head_keeps_the_training_responses_tokens(tmp_path, tiny_lm_dir, sums_jsonl):
    res = train(cfg(tiny_lm_dir, sums_jsonl, **{"train.head_vocab": "responses", "train.steps": 4}), tmp_path / "run")
    model = ElfModel.from_pretrained(res.model_dir)   # the kept set is saved with the model and reloads
    backbones = Backbones(model.config.backbones)
    tok = backbones.tokenizer
    kept = model.config.model.head_token_ids
    assert kept == head_token_ids(tok, sum_rows(), "math")
    assert model.student.head_u.shape[1] == len(kept) < len(tok)
    model.attach_backbones(backbones)
    # a prompt of words the head does not hold ("what", "?", "reverse") is fine: the encoder reads it
    outside = [w for w in ("what", "?", "reverse") if tok.convert_tokens_to_ids(w) not in kept]
    assert len(outside) == 3
    x, mask, _ = model.encode_prompts(["what is 3 plus 4 ? reverse", "reverse ?"])
    out = sample(model.student, x, mask, SamplerConfig(sampler="early-stop", nfe=4, rho=2), [(0, 0), (1, 0)])
    assert set(out.token_ids[~mask].tolist()) <= set(kept)   # decoding never writes a token outside the kept set
    assert len(model.generate(["what is 3 plus 4 ? reverse"], nfe=4)) == 1


@pytest.mark.parametrize("text, gold, right", [
    ("3 plus 4 is 7\n#### 7", "7", True), ("#### 7.0", "7", True), ("#### 1,000", "1000", True),
    ("#### 8", "7", False), ("no answer", "7", False), ("#### e", "e", True), ("#### 7 apples", "7", True),
    # a word answer: the final line's text, never a number read elsewhere in the response
    ("Letter 1 is j.\n#### j", "j", True), ("Letter 1 is j.\n#### k", "j", False), ("Letter 1 is j.", "j", False),
    ("The letters are a b.\n#### a b", "a b", True),
])
def test_answers_match_the_final_line(text, gold, right):
    """Validation judges as `elfreg eval run --benchmark custom --task math` does on a GSM8K-format file (GSM8K's
    rule: the first number after ####, "7 apples" is 7; a gold that is not a number, the final line's text)."""
    from elfreg.tasks.answers import verdict

    assert answers_match("math", text, gold) is right
    assert verdict("gsm8k", None, 5, text, gold)["correct"] is right
    assert answers_match("code", text, gold) is None


def test_the_summary_line_says_the_validation_and_the_best_model():
    from elfreg.train.cli import validation_line

    v = {"step": 1100, "val_acc": 0.62, "val_loss": 1.234, "val_rows": 100, "skipped_rows": 0,
         "best": {"step": 825, "val_acc": 0.64, "model": "runs/mine/best"}}
    assert validation_line(v) == ("validation at step 1100: accuracy 62.0% of 100 held-out rows, loss 1.234; "
                                  "best 64.0% at step 825: runs/mine/best")
    assert "accuracy -" in validation_line({**v, "val_acc": None, "best": None})


def test_a_held_out_response_the_restricted_head_cannot_write_is_scored_without_a_loss(tmp_path, tiny_lm_dir,
                                                                                      sums_jsonl, caplog):
    held = tmp_path / "held.jsonl"
    rows = sum_rows(seed=1)[:3] + [{"prompt": "what is 2 times 3 ?", "response": "2 times 3 is 6", "answer": "6"},
                                   {"prompt": "what is the answer ?", "response": "the answer is copy", "answer": "copy"}]
    # "times", "the", "answer", "copy": in no training response; only the last row's final answer ("copy") is one
    held.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="elfreg.train.trainer"):
        res = train(cfg(tiny_lm_dir, sums_jsonl, **{"train.head_vocab": "responses", "data.validation": held,
                                                   "train.validate_nfe": 2, "train.steps": 3}), tmp_path / "run")
    v = res.summary["validation"]
    assert (v["val_rows"], v["val_loss_rows"]) == (5, 3) and v["val_loss"] > 0
    assert ("data.validation: 2 of 5 held-out responses use a token that no training response uses" in caplog.text
            and "1 of them in the final answer itself, which can then never be right" in caplog.text)
    card = ModelCard.load(tmp_path / "run" / "model" / "README.md")
    assert card.data.to_dict()["elfreg"]["training"]["validation"]["answers_unwritable"] == 1
    assert ("1 held-out row's final answer uses a token the vocabulary head lacks (no training response uses it), "
            "so it can never be right") in card.text


def test_unwritable_answers_reads_the_final_answer_tokens(tiny_lm_dir):
    from elfreg.backbones import load_tokenizer
    from elfreg.train.validation import unwritable_answers, unwritable_line

    tok = load_tokenizer(str(tiny_lm_dir))
    kept = set(tok("0 1 2 3 4 5 6 7 8 9 is plus", add_special_tokens=False)["input_ids"])
    responses = ["2 times 3 is 6", "the answer is copy", "copy is 6", "what is it"]
    # the last "copy" / "6" is the answer; a gold the response does not hold is not counted
    assert unwritable_answers(tok, responses, ["6", "copy", "6", "sort"], kept) == 1
    assert unwritable_answers(tok, responses, ["times", "answer", "copy", None], kept) == 3
    assert unwritable_line(100, 31, 0).endswith("; none in the final answer itself")
    assert "(train.head_vocab: responses)" in unwritable_line(100, 31, None)
