"""Metrics: JSONL lines (one per logged step, appended atomically), a progress bar, TensorBoard or W&B."""

from __future__ import annotations

import json
from pathlib import Path

from elfreg.jsontext import dumps, finite_or_null

from elfreg.atomic import append_line, atomic_write_text


class MetricsLog:
    """Writes ``metrics.jsonl`` in the run folder (main rank only); optional TensorBoard / W&B mirrors."""

    def __init__(self, output: Path, enabled: bool, total_steps: int, start_step: int, progress: bool = True,
                 tensorboard: bool = False, wandb_project: str | None = None, config: dict | None = None,
                 desc: str = "train") -> None:
        self.path = Path(output) / "metrics.jsonl"
        self.enabled = enabled
        self.bar = self.tb = self.wandb = None
        if not enabled:
            return
        if self.path.is_file():  # resumed: drop lines from steps after the checkpoint
            keep = [ln for ln in self.path.read_text().splitlines()
                    if ln.strip() and json.loads(ln).get("step", 0) <= start_step]
            atomic_write_text(self.path, "".join(k + "\n" for k in keep))
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, initial=start_step, desc=desc, dynamic_ncols=True)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

            self.tb = SummaryWriter(str(Path(output) / "tensorboard"))
        if wandb_project:
            import wandb  # optional dependency

            self.wandb = wandb.init(project=wandb_project, config=config, dir=str(output), resume="allow")

    def log(self, step: int, values: dict) -> None:
        if not self.enabled:
            return
        append_line(self.path, dumps(finite_or_null({"step": step, **values})))  # a log line: null, not NaN
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{values.get('loss', float('nan')):.4f}")
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
