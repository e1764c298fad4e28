"""The demo's models' cards: titled by variant and training seed, with the demo's own results on its test split
(custom data: the run's ``test.jsonl`` by name and sha256, never a public benchmark)."""

from __future__ import annotations

from pathlib import Path

from elfreg.demo.config import DemoConfig


def demo_title(variant: str, seed: int) -> str:
    """The card title of a demo model: ``ELF-REG demo (seed 0)``."""
    return f"{variant} demo (seed {seed})"


def demo_results(evaluation: dict, cfg: DemoConfig, test_file: Path, problems: int) -> list[dict]:
    """Card results of one training seed's evaluation (``elfreg.demo.evaluation.evaluate``): exact-match accuracy
    per sampler and NFE, the mean over its sampling seeds, on the demo's test split."""
    from elfreg.tasks.benchmark import sha256_file

    kind = cfg.task.kind
    data = {"name": f"{test_file.name} (the demo's {kind} test split)", "sha256": sha256_file(test_file)}
    return [{"benchmark": f"demo-{kind}", "data": data, "rules": f"demo-{kind} (exact final line)",
             "metric": "pass@1", "value": float(cell["mean"]), "protocol": "demo", "sampler": cell["sampler"],
             "nfe": cell["nfe"], "rho": cfg.eval.rho, "w": cfg.eval.w, "samples": len(cell["acc"]),
             "seed": list(cfg.eval.seeds), "problems": problems} for cell in evaluation["cells"]]


def write_demo_cards(runs: list[tuple[str, dict, dict]], cfg: DemoConfig, out: Path, problems: int,
                     example_prompt: str | None = None) -> None:
    """Title each (variant, run, evaluation)'s model card, add its demo results and an example prompt of the task
    (elfreg.card.record_results)."""
    from elfreg.card import record_results

    for variant, run, evaluation in runs:
        if run.get("model_dir") and Path(run["model_dir"]).is_dir():
            record_results(run["model_dir"], demo_results(evaluation, cfg, out / "test.jsonl", problems),
                           name=demo_title(variant, run["seed"]), example_prompt=example_prompt)
