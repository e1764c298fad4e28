"""Figure-2-style panels (spec §9): acceleration vs t; error, stability, agreement, accuracy vs NFE."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")   # files only, no display

import matplotlib.pyplot as plt  # noqa: E402


def _positive(xs, ys):
    """Points with y > 0 (log axes cannot show 0, e.g. the end point's error)."""
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None and y > 0]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_diagnostics(models: Mapping[str, Mapping[str, Any]], path: str | Path, early_nfe: int) -> Path:
    """Write a 5-panel PNG comparing the models (label -> diagnose_model() result); returns the path."""
    fig, axes = plt.subplots(1, 5, figsize=(22, 4.2))
    ax_acc, ax_err, ax_stab, ax_agree, ax_pass = axes
    for i, (label, res) in enumerate(models.items()):
        color = f"C{i}"
        rows = res["readouts"]
        nfe = [r["nfe"] for r in rows]
        accel = res.get("acceleration")
        if accel:
            key = "joint_mean" if "joint_mean" in accel[0] else "text_mean"
            ax_acc.plot(*_positive([a["t"] for a in accel], [a[key] for a in accel]), color=color, label=label)
        ax_err.plot(*_positive(nfe, [r["text_error_mean"] for r in rows]), "o-", color=color, label=label)
        ax_stab.plot(nfe, [r["stable_token_fraction"] for r in rows], "o-", color=color, label=label)
        ax_agree.plot(nfe, [r["response_agreement"] for r in rows], "o-", color=color, label=f"{label}: full text")
        ax_agree.plot(nfe, [r["answer_agreement"] for r in rows], "s--", color=color, label=f"{label}: answer")
        if rows[0]["accuracy"] is not None:
            ax_pass.plot(nfe, [r["accuracy"] for r in rows], "o-", color=color, label=label)
            ex = res.get("exit_rule")
            if ex and ex["accuracy_exit"] is not None:   # the adaptive exit at its mean NFE (checks counted)
                ax_pass.plot([ex["nfe"]["mean"]], [ex["accuracy_exit"]], "*", color=color, markersize=12,
                             label=f"{label}: adaptive exit")
    ax_acc.set(title="(a) acceleration ||a_t|| (uniform grid)", xlabel="t", yscale="log")
    titles = ["(b) text end-point error ||d_j - y_end||", "(c) stable-token fraction",
              "(d) agreement with the end", "(e) accuracy"]
    ticks = sorted({r["nfe"] for res in models.values() for r in res["readouts"]})
    for ax, title in zip((ax_err, ax_stab, ax_agree, ax_pass), titles):
        ax.set(title=title, xlabel="NFE")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(n) for n in ticks])
        ax.minorticks_off()
        ax.axvline(early_nfe, color="gray", linestyle=":", linewidth=1)
    ax_err.set_yscale("log")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110, format="png")   # format explicit: out may be a temporary name
    plt.close(fig)
    return out
