"""The demo's report.md and plots: every number from the run's results, every claim checked against them."""

from __future__ import annotations

import json
import math
from pathlib import Path

from elfreg.atomic import atomic_write_text
from elfreg.demo.config import DemoConfig


def _cell(results: dict, variant: str, sampler: str, nfe: int) -> dict | None:
    for c in results["models"][variant]["eval"]["cells"]:
        if c["sampler"] == sampler and c["nfe"] == nfe:
            return c
    return None


def _fmt(c: dict | None) -> str:
    return "—" if c is None else f"{100 * c['mean']:.1f} ± {100 * c['std']:.1f}"


def _paired_se(a: dict, b: dict) -> float | None:
    """Standard error of b's mean minus a's, paired over the test problems; None without per-problem results.

    Each problem's difference is that of its correctness averaged over the seeds, so the spread over seeds and the
    luck of which problems were drawn both enter, and the shared problems cancel out of the comparison.
    """
    ca, cb = a.get("correct"), b.get("correct")
    if not ca or not cb or len({len(r) for r in ca + cb}) != 1 or len(ca[0]) < 2:
        return None
    n = len(ca[0])
    d = [sum(r[i] for r in cb) / len(cb) - sum(r[i] for r in ca) / len(ca) for i in range(n)]
    mean = sum(d) / n
    return math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n)


def _compare(a: dict | None, b: dict | None, sign: int = 1, n_problems: int | None = None) -> tuple[str, str]:
    """Outcome of "b is above a" (sign=1) or "below a" (sign=-1) and its evidence.

    "held" or "did not hold" only when the difference of the means exceeds twice its standard error. With
    per-problem results (``correct``) the error is paired over the problems (``_paired_se``); without them it is
    the spread over seeds of both cells (std / sqrt(seeds)) plus, given ``n_problems``, the binomial error of a
    test set that small. Anything closer, ties included, is "inconclusive": at the demo's size most differences are.
    """
    if a is None or b is None:
        return "not measured", "not measured"
    diff = b["mean"] - a["mean"]
    se = _paired_se(a, b)
    if se is None:
        var = sum(c["std"] ** 2 / max(len(c.get("acc", ())), 1) for c in (a, b))
        if n_problems:
            var += sum(c["mean"] * (1 - c["mean"]) for c in (a, b)) / n_problems
        se = math.sqrt(var)
    margin = 2 * se
    if abs(diff) <= max(margin, 1e-9):
        outcome = "inconclusive"
    else:
        outcome = "held" if sign * diff > 0 else "did not hold"
    return outcome, f"{100 * b['mean']:.1f} vs {100 * a['mean']:.1f} ({100 * diff:+.1f} points, 2 s.e. {100 * margin:.1f})"


def claims(results: dict, cfg: DemoConfig) -> list[tuple[str, str, str]]:
    """(claim, held / did not hold / inconclusive / not measured, evidence) for the paper's claims at this scale."""
    ev = cfg.eval
    n, lo, hi = ev.main_nfe, min(ev.nfes), max(ev.nfes)
    n_problems = results.get("task", {}).get("test")
    rows = []

    def add(text: str, a: tuple[str, str, int], b: tuple[str, str, int], sign: int = 1) -> None:
        """Claim ``text``: cell b = (variant, sampler, NFE) above (sign=1) or below (sign=-1) cell a."""
        rows.append((text, *_compare(_cell(results, *a), _cell(results, *b), sign, n_problems)))

    add(f"ELF-REG beats ELF (early-stop, {n} NFE)", ("ELF", "early-stop", n), ("ELF-REG", "early-stop", n))
    for v in ("ELF", "ELF-REG"):
        add(f"{v}: prefix early-stop beats full-span at {n} NFE", (v, "full-span", n), (v, "early-stop", n))
        add(f"{v}: re-noising beats early-stop at {hi} NFE", (v, "early-stop", hi), (v, "renoise", hi))
        add(f"{v}: re-noising lowers accuracy at {lo} NFE", (v, "early-stop", lo), (v, "renoise", lo), sign=-1)
        add(f"{v}: early-stop accuracy grows from {lo} to {hi} NFE", (v, "early-stop", lo), (v, "early-stop", hi))
    return rows


def task_description(cfg: DemoConfig) -> str:
    """The configured task in words, for the report."""
    t = cfg.task
    if t.kind == "arith":
        return f"single-digit arithmetic chains ({t.ops} dependent + / - steps)"
    return (f"pointer chasing ({t.hops} hops, {t.distractors} distractor chain(s) of {t.distractor_hops} hops)")


def write_report(results: dict, cfg: DemoConfig, out: Path) -> None:
    """report.md, accuracy_vs_nfe.png and learning_curves.png in ``out``."""
    ev = cfg.eval
    lines = ["# elfreg demo report", "",
             f"Task: {task_description(cfg)}; {results['task']['train']} training and {results['task']['test']} "
             f"test problems. Frozen encoder/teacher: SmolLM2-135M-Instruct (encoder layer "
             f"{cfg.backbones.encoder_layer}, teacher layers {cfg.backbones.teacher_repa_layer}/"
             f"{cfg.backbones.teacher_reg_layer}). Student {cfg.student.depth} x {cfg.student.width}; "
             f"{cfg.train.steps} steps of batch {cfg.train.batch_size} for each model, same seeds.", "",
             f"Exact-match accuracy (%) of the final answer, mean ± std over seeds {ev.seeds}, w = {ev.w}, "
             f"rho = {ev.rho}. Example: `{results['task']['example']['prompt']}` → "
             f"`{results['task']['example']['response']!r}`.", ""]
    for sampler in ev.samplers:
        lines += [f"## {sampler}", "", "| NFE | " + " | ".join(results["models"]) + " |",
                  "|---|" + "---|" * len(results["models"])]
        for n in ev.nfes:
            lines.append(f"| {n} | " + " | ".join(_fmt(_cell(results, v, sampler, n)) for v in results["models"]) + " |")
        lines.append("")
    lines += ["## ELF vs ELF-REG at the main setting", "",
              f"| model | early-stop {ev.main_nfe} NFE | worked solution fully right | mean exit time |", "|---|---|---|---|"]
    for v in results["models"]:
        c = _cell(results, v, "early-stop", ev.main_nfe)
        if c:
            lines.append(f"| {v} | {_fmt(c)} | {100 * sum(c['chain_acc']) / len(c['chain_acc']):.1f} | "
                         f"{sum(c['exit_time']) / len(c['exit_time']):.3f} |")
    curves = {v: m.get("curve") or [] for v, m in results["models"].items()}
    steps = sorted({pt["step"] for c in curves.values() for pt in c})
    if steps:
        lines += ["", f"## Test accuracy during training (EMA weights, early-stop {ev.main_nfe} NFE, seed {ev.seeds[0]})",
                  "", "| step | " + " | ".join(curves) + " |", "|---|" + "---|" * len(curves)]
        for st in steps:
            row = [next((f"{100 * pt['acc']:.1f}" for pt in c if pt["step"] == st), "–") for c in curves.values()]
            lines.append(f"| {st} | " + " | ".join(row) + " |")
    lines += ["", "## The paper's claims at this scale", "",
              ("A claim held or did not hold only where the difference exceeds twice its standard error, paired over "
               "the test problems (each problem's correctness averaged over the seeds, so seed spread and the draw "
               "of problems both count); otherwise it is inconclusive at this size."), "",
              "| claim | outcome | evidence |", "|---|---|---|"]
    lines += [f"| {c} | **{o}** | {e} |" for c, o, e in claims(results, cfg)]
    ph = results["phases_seconds"]
    lines += ["", "## Time", "", "| phase | seconds |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in ph.items()]
    lines += ["", f"Threads: {results['threads']}. Plots: `accuracy_vs_nfe.png`, `learning_curves.png`; "
              "raw numbers: `results.json`; settings: `demo_config.yaml`; models: `ELF/model`, `ELF-REG/model`.", ""]
    atomic_write_text(out / "report.md", "\n".join(lines))
    _plots(results, cfg, out)


def _plots(results: dict, cfg: DemoConfig, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from elfreg.atomic import atomic_write

    ev = cfg.eval
    fig, axes = plt.subplots(1, len(ev.samplers), figsize=(4.2 * len(ev.samplers), 3.4), squeeze=False, sharey=True)
    for ax, sampler in zip(axes[0], ev.samplers):
        for v in results["models"]:
            cells = [_cell(results, v, sampler, n) for n in ev.nfes]
            ax.errorbar(ev.nfes, [100 * c["mean"] for c in cells], yerr=[100 * c["std"] for c in cells],
                        marker="o", capsize=3, label=v)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ev.nfes, [str(n) for n in ev.nfes])
        ax.set_title(sampler)
        ax.set_xlabel("NFE")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("exact match (%)")
    axes[0][0].legend()
    fig.tight_layout()
    atomic_write(out / "accuracy_vs_nfe.png", lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(13.5, 3.4))
    for v in results["models"]:
        curve = results["models"][v].get("curve") or []
        axes[2].plot([pt["step"] for pt in curve], [100 * pt["acc"] for pt in curve], marker="o", label=v)
        path = Path(results["models"][v]["model_dir"]).parent / "metrics.jsonl"
        recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
        steps = [r["step"] for r in recs]
        axes[0].plot(steps, [r["loss_elf"] for r in recs], label=v)
        axes[1].plot(steps, [r["loss"] for r in recs], label=v)
    axes[0].set_title("L_ELF (text: l2 + CE)")
    axes[1].set_title("total loss")
    axes[2].set_title(f"test exact match (%), early-stop {ev.main_nfe} NFE")
    for ax in axes:
        ax.set_xlabel("step")
        if ax is not axes[2]:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    atomic_write(out / "learning_curves.png", lambda p: fig.savefig(p, format="png", dpi=110))
    plt.close(fig)
