"""lm-eval's own MMLU generation tasks on a local copy (no network): which run with the `elfreg` model type, and how
their answer filters compare with elfreg's letter extraction on the same rationales (docs/lm_eval.md, "MMLU")."""

import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason='lm-eval is not installed: pip install "elfreg[lm-eval]"')

import lm_eval  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from elfreg.tasks.answers import extract_choice  # noqa: E402
from elfreg.tasks.testsets import load_benchmark  # noqa: E402
from elfreg.lm_eval.model import ElfLM  # noqa: E402

from ._task import fixed_answers, tiny_model  # noqa: E402

MMLU_TASKS = Path(lm_eval.__file__).parent / "tasks" / "mmlu"
# lm-eval's MMLU variants: the template file of each, its output type, and the split it scores
GENERATION = {"mmlu_generative": ("generative/_default_template_yaml", "test"),
              "mmlu_flan_cot_zeroshot": ("flan_cot_zeroshot/_mmlu_flan_cot_zeroshot_template_yaml", "validation"),
              "mmlu_flan_n_shot_generative": ("flan_n_shot/generative/_mmlu_flan_generative_template_yaml", "test")}
LIKELIHOOD = {"mmlu": "default/_default_template_yaml",
              "mmlu_continuation": "continuation/_continuation_template_yaml",
              "mmlu_flan_n_shot_loglikelihood": "flan_n_shot/loglikelihood/_mmlu_flan_loglikelihood_template_yaml"}


def test_the_installed_mmlu_variants_are_the_documented_ones():
    """Guards the docs' table: the generation variants are generate_until, the others need likelihoods."""
    import yaml

    def output_type(rel):
        text = (MMLU_TASKS / rel).read_text()
        return yaml.safe_load(text.replace("!function", ""))["output_type"]

    assert {name: output_type(rel) for name, (rel, _) in GENERATION.items()} == dict.fromkeys(GENERATION,
                                                                                             "generate_until")
    assert {name: output_type(rel) for name, rel in LIKELIHOOD.items()} == dict.fromkeys(LIKELIHOOD, "multiple_choice")
    cot = yaml.safe_load((MMLU_TASKS / GENERATION["mmlu_flan_cot_zeroshot"][0]).read_text())
    assert "test_split" not in cot and cot["validation_split"] == "validation"  # it scores the 1,531 validation rows


def _local_copy(folder: Path, task: str, n: int = 6) -> tuple[str, list]:
    """A local copy of lm-eval's ``task``: its own template file, with the data taken from elfreg's shipped MMLU dev
    set in the Hugging Face cais/mmlu form (integer answers)."""
    rel, split = GENERATION[task]
    probs = load_benchmark("mmlu_dev").problems[:n]
    data = folder / f"{task}.jsonl"
    data.write_text("".join(json.dumps({"question": p.question, "subject": p.extra["subject"],
                                        "choices": p.extra["choices"], "answer": "ABCD".index(p.answer)}) + "\n"
                            for p in probs))
    name = f"local_{task}"
    (folder / f"{name}.yaml").write_text(
        f"include: {MMLU_TASKS / rel}\ntask: {name}\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    {split}: {data}\n  cache_dir: {folder / 'hf'}\n"
        f"{split}_split: {split}\nfewshot_split: {split}\n")
    return name, probs


def _evaluate(folder, task, model, **kw):
    return lm_eval.simple_evaluate(model=model, tasks=[task], bootstrap_iters=0, log_samples=True,
                                   task_manager=TaskManager(include_path=str(folder), include_defaults=False), **kw)


def test_cot_zeroshot_filters_agree_with_elfreg_on_canonical_rationales(tmp_path):
    """Rationales that end in elfreg's canonical "The answer is (X)." score the same under lm-eval's strict-match
    and flexible-extract filters and under elfreg's extractor; the documented difference: lm-eval's strict filter
    misses "Answer: X", which elfreg reads."""
    task, probs = _local_copy(tmp_path, "mmlu_flan_cot_zeroshot")
    wrong = lambda p: "ABCD"[("ABCD".index(p.answer) + 1) % 4]  # noqa: E731
    texts = [f"Step by step: the options differ.\nThe answer is ({p.answer})." if i % 2 == 0 else
             f"Reasoning.\nThe answer is ({wrong(p)})." for i, p in enumerate(probs)]
    texts[-1] = f"Answer: {probs[-1].answer}"
    res = _evaluate(tmp_path, task, fixed_answers(texts))
    samples = sorted(res["samples"][task], key=lambda s: s["doc_id"])
    by_filter = {f: [s["exact_match"] for s in samples if s["filter"] == f] for f in ("strict-match",
                                                                                       "flexible-extract")}
    ours = [float(extract_choice(t) == p.answer) for t, p in zip(texts, probs)]
    assert by_filter["strict-match"][:-1] == by_filter["flexible-extract"][:-1] == ours[:-1] == [1, 0, 1, 0, 1]
    assert ours[-1] == 1.0 and by_filter["strict-match"][-1] == 0.0


@pytest.fixture(scope="module")
def mmlu_sized_model(tmp_path_factory, tiny_lm_dir):
    """A tiny random model whose canvas holds an MMLU question (prompts of up to 240 word-tokenizer tokens)."""
    return tiny_model(tiny_lm_dir, 256, 240).save_pretrained(tmp_path_factory.mktemp("mmlu_model") / "model")


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(GENERATION))
def test_elfreg_model_type_runs_the_mmlu_generation_tasks(variant, mmlu_sized_model, tmp_path):
    """Each generation variant runs end to end with `elfreg` (a random model: the point is that it runs, with the
    task's own prompt, stops and filters); its responses are elfreg's sampler's for the same contexts."""
    task, probs = _local_copy(tmp_path, variant, n=3)
    args = {"pretrained": str(mmlu_sized_model), "device": "cpu", "sampler": "full-span", "nfe": 4, "seed": 1}
    res = _evaluate(tmp_path, task, "elfreg", model_args=args, batch_size=3)
    samples = sorted(res["samples"][task], key=lambda s: s["doc_id"])
    assert sorted({s["doc_id"] for s in samples}) == [0, 1, 2]
    lm = ElfLM(**args)
    for s in samples:
        ctx, gen = s["arguments"][0]
        want = lm.generate_until([Instance("generate_until", s["doc"], (ctx, gen), 0, (task, s["doc_id"], 1))])
        assert s["resps"][0] == want
    assert any(k.startswith("exact_match") for k in res["results"][task])
