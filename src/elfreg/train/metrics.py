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
        self.shown: dict[str, str] = {}
        if not enabled:
            return
        if self.path.is_file():  # resumed: drop lines from steps after the checkpoint (and a torn last line)
            keep = [r for r in read_metrics(self.path) if r.get("step", 0) <= start_step]
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in keep))
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
            if "val_loss" in values:   # the last validation stays on the line until the next
                acc = values.get("val_acc")
                self.shown = {"val_acc": "-" if acc is None else f"{acc:.1%}", "val_loss": "-" if values["val_loss"] is None else f"{values['val_loss']:.4f}"}
            shares = share_summary(values)
            if shares:   # the last measured gradient shares stay on the line until the next
                self.shown["grad/elf"] = shares
            self.bar.set_postfix(loss=f"{values.get('loss', float('nan')):.4f}", **self.shown)
        if self.tb is not None:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def set_total(self, total_steps: int) -> None:
        """The run's length changed (train.minutes decided it): the progress bar's total."""
        if self.bar is not None:
            self.bar.total = total_steps
            self.bar.refresh()

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


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a ``metrics.jsonl`` (none when it is missing); a torn last line from a kill is dropped."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise ValueError(f"{path}:{i + 1}: not a JSON line") from None
    return out


# the per-term gradient shares (elfreg.train.gradshare) a learning curve and the progress line show
SHARE_TERMS = (("repa", "weighted L_REPA"), ("reg", "weighted L_REG"))


def share_summary(values: dict) -> str:
    """The progress line's gradient shares, e.g. ``repa 0.08 (cos +0.10) reg 0.41 (cos -0.02)``: each auxiliary
    term's gradient norm at the blocks relative to L_ELF's and its cosine with it; empty when none was measured."""
    parts = []
    for name, _ in SHARE_TERMS:
        rel, cos = values.get(f"grad_rel_{name}"), values.get(f"grad_cos_{name}")
        if isinstance(rel, (int, float)) and isinstance(cos, (int, float)):
            parts.append(f"{name} {rel:.2f} (cos {cos:+.2f})")
    return " ".join(parts)


# the loss terms a learning curve shows, with their names in the paper's objective (spec §4)
CURVE_TERMS = (("loss", "total loss"), ("loss_elf", "L_ELF"), ("loss_repa", "L_REPA"), ("loss_reg", "L_REG"))


def plot_learning_curve(output: str | Path, name: str = "learning_curve.png") -> Path | None:
    """``<output>/<name>``: the logged loss and its terms (log scale), the learning rate and, with data.validation,
    the validation accuracy and loss against the step, from the run's metrics.jsonl; None when nothing was logged."""
    records = read_metrics(Path(output) / "metrics.jsonl")
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from elfreg.atomic import atomic_write

    steps = [r["step"] for r in records]
    val = [r for r in records if "val_loss" in r]
    shared = [r for r in records if any(f"grad_rel_{n}" in r for n, _ in SHARE_TERMS)]
    n_axes = 2 + bool(val) + bool(shared)
    fig, axes = plt.subplots(1, n_axes, figsize=(5 * n_axes, 3.4))
    ax_loss, ax_lr = axes[0], axes[1]
    for key, label in CURVE_TERMS:
        values = [r.get(key) for r in records]
        if any(isinstance(v, (int, float)) and v > 0 for v in values):
            ax_loss.plot(steps, [v if isinstance(v, (int, float)) and v > 0 else float("nan") for v in values],
                         marker="o" if len(steps) < 20 else None, ms=3, label=label)
    ax_loss.set_yscale("log")
    ax_loss.set_title("training loss (logged steps)")
    ax_loss.legend()
    ax_lr.plot(steps, [r.get("lr", float("nan")) for r in records], color="C4")
    ax_lr.set_title("learning rate")
    if val:
        ax_val = axes[2]
        vsteps = [r["step"] for r in val]
        marker = "o" if len(val) < 30 else None
        if any(r.get("val_acc") is not None for r in val):
            ax_val.plot(vsteps, [r["val_acc"] if r.get("val_acc") is not None else float("nan") for r in val],
                        marker=marker, ms=3, color="C2", label="accuracy")
            ax_val.set_ylim(0, 1)
            ax_val.set_ylabel("accuracy")
        ax_vl = ax_val.twinx()
        ax_vl.plot(vsteps, [float("nan") if r["val_loss"] is None else r["val_loss"] for r in val], marker=marker, ms=3, color="C3", label="loss")
        ax_vl.set_ylabel("loss")
        ax_val.set_title(f"validation ({val[-1].get('val_rows', '?')} held-out rows)")
        lines = ax_val.get_lines() + ax_vl.get_lines()
        ax_val.legend(lines, [ln.get_label() for ln in lines], loc="center right")
    if shared:
        ax_share = axes[-1]
        ssteps = [r["step"] for r in shared]
        for i, (term, label) in enumerate(SHARE_TERMS):
            rel = [r.get(f"grad_rel_{term}") for r in shared]
            if not any(isinstance(v, (int, float)) for v in rel):
                continue
            num = [v if isinstance(v, (int, float)) else float("nan") for v in rel]
            cos = [r.get(f"grad_cos_{term}") for r in shared]
            ax_share.plot(ssteps, num, marker="o", ms=3, color=f"C{i + 2}", label=f"{label}: norm / L_ELF's")
            ax_share.plot(ssteps, [v if isinstance(v, (int, float)) else float("nan") for v in cos], ls="--",
                          marker="x", ms=3, color=f"C{i + 2}", label=f"{label}: cosine with L_ELF's")
        ax_share.axhline(0, color="0.6", lw=0.8)
        ax_share.set_title("gradient at the blocks, per term")
        ax_share.legend(fontsize=7)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(output) / name
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)
    return path
