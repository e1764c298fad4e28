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

UTILS = """from elfreg.demo.answers import extract_answer


def final_answers(resps, docs):
    return [[(extract_answer(r) or "[no answer]").strip() for r in rs] for rs in resps]
"""


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
