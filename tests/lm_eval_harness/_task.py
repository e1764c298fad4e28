"""A local lm-eval task over the demo's arithmetic test problems (JSON lines + YAML, no network)."""

import json
from pathlib import Path

TASK = "elfreg_demo_arith"

# The answer is read by elfreg's own extractor (a custom lm-eval filter, utils.py beside the YAML): a plain regex
# filter on "#### X" misses the extractor's fallbacks ("The answer is X", \\boxed{X}) and scores differently.
YAML = """task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
test_split: test
repeats: {repeats}
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["Question:"]
filter_list:
  - name: final
    filter:
      - function: custom
        filter_fn: !function utils.final_answers
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""

UTILS = """from elfreg.tasks.synthetic import extract_answer


def final_answers(resps, docs):
    return [[(extract_answer(r) or "[no answer]").strip() for r in rs] for rs in resps]
"""


def tiny_model(lm_dir: Path, max_len: int, max_prompt_len: int, **new_kwargs):
    """A tiny random ElfModel over the tiny Qwen3 encoder (``new_kwargs`` go to ``ElfModel.new``)."""
    import torch

    from elfreg.config import BackboneConfig, ElfRegConfig, model_preset
    from elfreg.pretrained import ElfModel

    cfg = ElfRegConfig(model=model_preset("tiny", feature_dim=32, reg_dim=32, teacher_dim=32, vocab_size=32,
                                          max_len=max_len, max_prompt_len=max_prompt_len),
                       backbones=BackboneConfig(encoder=str(lm_dir), encoder_layer=2, dtype="float32"))
    torch.manual_seed(0)
    return ElfModel.new(cfg, **new_kwargs)


def fixed_answers(texts: list[str]):
    """An lm-eval model that answers document d with ``texts[d]`` (to compare filters and scorers on known texts)."""
    from lm_eval.api.model import LM

    class FixedAnswers(LM):
        def loglikelihood(self, requests):
            raise NotImplementedError

        loglikelihood_rolling = loglikelihood

        def generate_until(self, requests):
            return [texts[r.doc_id] for r in requests]

    return FixedAnswers()


def write_task(folder: Path, rows: list[dict], repeats: int = 1) -> Path:
    """Write test.jsonl ({id, question, answer} per line, as `elfreg demo` writes it) and the task YAML; returns folder."""
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "utils.py").write_text(UTILS)
    (folder / f"{TASK}.yaml").write_text(YAML.format(task=TASK, data=data, cache=folder / "hf_cache", repeats=repeats))
    return folder


def evaluate(task_dir: Path, model, model_args=None, **kw) -> dict:
    """lm_eval.simple_evaluate on the local task, samples logged; offline."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    return lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=[TASK],
                                   task_manager=TaskManager(include_path=str(task_dir), include_defaults=False), log_samples=True,
                                   bootstrap_iters=0, **kw)
