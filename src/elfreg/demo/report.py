"""The demo's report.md and plots: every number from the run's results, every claim checked against them
(:mod:`.claims`)."""

from __future__ import annotations

import json
from pathlib import Path

from elfreg.atomic import atomic_write_text
from elfreg.demo.claims import Claim, claims, compare, find_cell, fmt_cell
from elfreg.demo.config import DemoConfig
from elfreg.moved import moved


def adaptive_section(results: dict, cfg: DemoConfig) -> list[str]:
    """The adaptive exit's cells against prefix early-stop at the same max NFE (the same paths, paired)."""
    from elfreg.sampling.exit import DEFAULT_EXIT

    ev = cfg.eval
    if not ev.adaptive_nfes:
        return []
    lines = ["## Adaptive exit (answer stability)", "",
             (f"Prefix early-stop on the master grid of rho x max NFE points that stops each sample once its final "
              f"answer (the '#### X' line) has repeated at {DEFAULT_EXIT['patience']} consecutive checks, one check "
              f"(a decoder call, counted as 1 NFE) every {DEFAULT_EXIT['check_every']} denoiser calls, after at least "
              f"{DEFAULT_EXIT['min_nfe']} NFE; a sample that never settles stops at the max NFE (docs/sampling.md). "
              "Mean NFE: what each sample spent, check decodes included, mean over samples and seeds. The "
              "comparison is paired with early-stop at the max NFE, which runs the same path to its end."), "",
             "| model | max NFE | mean NFE spent | adaptive (%) | early-stop at max NFE (%) | difference (2 s.e.) |",
             "|---|---|---|---|---|---|"]
    n_problems = results.get("task", {}).get("test")
    for v in results["models"]:
        for n in ev.adaptive_nfes:
            a, fixed = find_cell(results, v, "adaptive", n), find_cell(results, v, "early-stop", n)
            if a is None:
                continue
            spent = sum(a["nfe_mean"]) / len(a["nfe_mean"])
            evidence = compare(fixed, a, 1, n_problems)[1] if fixed else "early-stop not measured at this NFE"
            lines.append(f"| {v} | {n} | {spent:.2f} | {fmt_cell(a)} | {fmt_cell(fixed)} | {evidence} |")
    return lines + [""]


def task_description(cfg: DemoConfig) -> str:
    """The configured task in words, for the report."""
    t = cfg.task
    if t.kind == "arith":
        return f"single-digit arithmetic chains ({t.ops} dependent + / - steps)"
    return (f"pointer chasing ({t.hops} hops, {t.distractors} distractor chain(s) of {t.distractor_hops} hops)")


def smoke_line(cfg: DemoConfig) -> list[str]:
    """One line when the runs are shorter than the task needs to learn (``--quick``): the cells test the pipeline."""
    t = cfg.train
    if t.steps >= t.min_steps:
        return []
    return [f"**Smoke test**: {t.steps} steps per run, below the {t.min_steps:,} this task needs to learn "
            "(`train.min_steps`, docs/demo.md), so the models cannot learn it: the cells below check that every stage "
            "runs end to end, not what the method does (accuracy near 0 is expected).", ""]


def _header(results: dict, cfg: DemoConfig) -> list[str]:
    ev, t = cfg.eval, cfg.train
    schedule = t.lr_schedule if t.lr_schedule == "constant" else (
        f"{t.lr_schedule} decay to {t.min_lr_ratio:g} lr over the last {100 * t.decay_fraction:.0f} % of the steps")
    return ["# elfreg demo report", "", *smoke_line(cfg),
            f"Task: {task_description(cfg)}; {results['task']['train']} training and {results['task']['test']} "
            f"test problems. Frozen encoder/teacher: SmolLM2-135M-Instruct (encoder layer "
            f"{cfg.backbones.encoder_layer}, teacher layers {cfg.backbones.teacher_repa_layer}/"
            f"{cfg.backbones.teacher_reg_layer}). Student {cfg.student.depth} x {cfg.student.width}; "
            f"{t.steps} steps of batch {t.batch_size} for each model and each training seed {t.seeds} (same seeds "
            f"for both models: initialisation, data order and draws); {t.optimizer}, lr {t.lr:g} after "
            f"{t.warmup_steps} warm-up steps, then {schedule}; EMA {t.ema_decay:g}.", "",
            f"Exact-match accuracy (%) of the final answer, mean ± std over training seeds {t.seeds} x "
            f"sampling seeds {ev.seeds}, w = {ev.w}, rho = {ev.rho}. Example: "
            f"`{results['task']['example']['prompt']}` → `{results['task']['example']['response']!r}`.", ""]


def _budget(results: dict, cfg: DemoConfig) -> list[str]:
    """What the budget cut (``elfreg.demo.budget``), what that does to the claims, and the estimate against the
    time taken."""
    from elfreg.demo.budget import consequences

    plan = results.get("plan")
    if not plan:
        return []
    budget, total = plan["budget_s"], results.get("phases_seconds", {}).get("total")
    steps = plan["timing"]["step"]
    took = f"; it took {total / 60:.1f} min" if total is not None else ""
    est = plan["estimate_s"]["total"]
    lines = ["## Budget", "",
             (f"Budget {budget / 60:g} min (`--budget`)" if budget is not None else "No budget (`--budget 0`)")
             + f". Before training each lane timed {plan['timing']['steps_timed']} steps ("
             + ", ".join(f"{v} {1000 * x:.0f} ms" for v, x in steps.items())
             + f" per step) and the plan was estimated at {est / 60:.1f} min{took}"
             + (" (the estimate of the first attempt: this demo resumed its runs)" if plan.get("resumed") else "")
             + "."]
    if not plan["cuts"]:
        return lines + ["", "Nothing was cut: the run is the one asked for.", ""]
    lines += ["", f"As asked, the run was estimated at {plan['estimate_asked_s'] / 60:.1f} min, so it was cut "
                  "(training seeds first, then sampling seeds, then steps):", "",
              "| setting | asked | ran |", "|---|---|---|"]
    lines += [f"| `{c['key']}` | {c['asked']} | {c['ran']} |" for c in plan["cuts"]]
    lines += [""] + [f"- {line}" for line in consequences(plan, cfg)]
    if plan["over_budget"]:
        lines += ["", "Even cut to the smallest run this task learns in, the estimate was over the budget: it ran "
                      "anyway, later than asked."]
    lines += ["", "The same command with `--budget 0` (no limit) or a larger budget runs it as asked."]
    return lines + [""]


def _accuracy_tables(results: dict, cfg: DemoConfig) -> list[str]:
    lines = []
    for sampler in cfg.eval.samplers:
        lines += [f"## {sampler}", "", "| NFE | " + " | ".join(results["models"]) + " |",
                  "|---|" + "---|" * len(results["models"])]
        for n in cfg.eval.nfes:
            lines.append(f"| {n} | " + " | ".join(fmt_cell(find_cell(results, v, sampler, n)) for v in results["models"]) + " |")
        lines.append("")
    return lines


def _main_setting(results: dict, cfg: DemoConfig) -> list[str]:
    n = cfg.eval.main_nfe
    lines = ["## ELF vs ELF-REG at the main setting", "",
             f"| model | early-stop {n} NFE | worked solution fully right | mean exit time |", "|---|---|---|---|"]
    for v in results["models"]:
        c = find_cell(results, v, "early-stop", n)
        if c:
            lines.append(f"| {v} | {fmt_cell(c)} | {100 * sum(c['chain_acc']) / len(c['chain_acc']):.1f} | "
                         f"{sum(c['exit_time']) / len(c['exit_time']):.3f} |")
    return lines + [""]


def _curves(results: dict, cfg: DemoConfig) -> list[str]:
    runs = {v: m.get("runs") or [] for v, m in results["models"].items()}
    steps = sorted({pt["step"] for rs in runs.values() for r in rs for pt in r.get("curve") or []})
    if not steps:
        return []
    lines = [f"## Test accuracy during training (EMA weights, early-stop {cfg.eval.main_nfe} NFE, sampling seed "
             f"{cfg.eval.seeds[0]}; per training seed)", "",
             "| step | " + " | ".join(f"{v} seed {r['seed']}" for v, rs in runs.items() for r in rs) + " |",
             "|---|" + "---|" * sum(len(rs) for rs in runs.values())]
    for st in steps:
        row = [next((f"{100 * pt['acc']:.1f}" for pt in r.get("curve") or [] if pt["step"] == st), "–")
               for rs in runs.values() for r in rs]
        lines.append(f"| {st} | " + " | ".join(row) + " |")
    return lines + [""]


def _terms(results: dict, cfg: DemoConfig) -> list[str]:
    """What each term of the objective does in these runs: the text loss L_ELF near the end (the same batches and
    draws for both students of a seed) and the auxiliary terms' gradient shares at the blocks."""
    from elfreg.demo.ablations import fmt_mean_std

    runs = {v: m.get("runs") or [] for v, m in results["models"].items()}
    if not any(r.get("loss_elf") is not None for rs in runs.values() for r in rs):
        return []
    lines = ["## What each term does", "",
             "L_ELF: the text loss averaged over the last 10 % of each run, mean ± std over training seeds (a seed "
             "gives both students the same batches and draws). Gradient shares: each weighted auxiliary term's "
             "gradient at the student's blocks, its norm relative to L_ELF's and its cosine with L_ELF's, averaged "
             f"over the second half of each run (measured every {cfg.train.grad_share_every} steps: "
             "`train.grad_share_every`). A share that stays large with a cosine near 0 takes part of each update "
             "away from the text. `elfreg demo --ablations` trains the whole ladder (REPA only, REG only, REG "
             "removed at inference, one learnable token, and settings for REG) over the training seeds "
             "(docs/demo.md).", "",
             "| model | L_ELF, last 10 % | REPA grad / L_ELF's | cosine | REG grad / L_ELF's | cosine |",
             "|---|---|---|---|---|---|"]
    for v, rs in runs.items():
        cells = [fmt_mean_std([r.get(k) for r in rs], 1.0, 3 if k == "loss_elf" else 2)
                 for k in ("loss_elf", "grad_rel_repa", "grad_cos_repa", "grad_rel_reg", "grad_cos_reg")]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return lines + [""]


def changed_settings(cfg: DemoConfig) -> list[str]:
    """The run's settings that differ from ``elfreg demo``'s defaults, as ``key=value`` overrides."""
    from elfreg.configtools import to_dict
    from elfreg.demo.config import DemoConfig as Defaults

    out = []

    def walk(a: dict, b: dict, prefix: str) -> None:
        for k, v in a.items():
            if isinstance(v, dict):
                walk(v, b.get(k, {}), f"{prefix}{k}.")
            elif v != b.get(k):
                out.append(f"{prefix}{k}={json.dumps(v, separators=(',', ':'))}")
    walk(to_dict(cfg), to_dict(Defaults()), "")
    return out


def decide_command(cfg: DemoConfig, seeds: int) -> str:
    """The ``elfreg demo`` command that reruns this run's settings with training seeds 0 .. seeds - 1 (no budget:
    one would cut the seeds again)."""
    keep = [o for o in changed_settings(cfg) if not o.startswith("train.seeds=")]
    return " ".join(["elfreg demo --budget 0", *keep, f"train.seeds=[{','.join(str(s) for s in range(seeds))}]"])


def _minutes(results: dict, cfg: DemoConfig, seeds: int) -> str:
    """This run's time with ``seeds`` training seeds: training and evaluation scale with the seeds, the rest not."""
    ph = results.get("phases_seconds", {})
    if "total" not in ph:
        return "—"
    per_seed = ph.get("train", 0.0) + ph.get("evaluate", 0.0)
    total = ph["total"] + per_seed * (seeds / len(cfg.train.seeds) - 1)
    return f"~{total / 60:.0f} min"


def setting_note(results: dict, cfg: DemoConfig, rows: list[Claim]) -> list[str]:
    """What this setting shows about NFE and the samplers: the claims on them it decides, how far accuracy moved from
    the lowest to the highest NFE, and, for the default task, the setting where they differ (``--preset harder``)."""
    from elfreg.demo.config import HARDER

    sampler_rows = [c for c in rows if c.kind == "sampler"]
    decided = [c for c in sampler_rows if c.outcome in ("held", "did not hold")]
    line = (f"What this setting shows about NFE and the samplers: {len(decided)} of the {len(sampler_rows)} claims on "
            f"them {'is' if len(decided) == 1 else 'are'} decided here"
            + (" (" + "; ".join(f"{c.text}: {c.outcome}" for c in decided) + ")" if decided else "") + ".")
    lo, hi = min(cfg.eval.nfes), max(cfg.eval.nfes)
    moves = [abs(a["mean"] - b["mean"]) for v in results["models"] for sm in cfg.eval.samplers
             if (a := find_cell(results, v, sm, lo)) and (b := find_cell(results, v, sm, hi))]
    if moves:
        line += (f" From {lo} to {hi} NFE accuracy moves by at most {100 * max(moves):.1f} points (any sampler, "
                 "either model).")
    if cfg.task.kind == "arith" and cfg.task.ops < HARDER["task"]["ops"]:
        line += (" `elfreg demo --preset harder` (three dependent steps; its numbers in docs/demo.md) is the setting "
                 "where NFE and the samplers differ.")
    return ["", line]


def _claims_section(results: dict, cfg: DemoConfig) -> list[str]:
    rows = claims(results, cfg)
    lines = ["## The paper's claims at this scale", "",
             ("A claim held or did not hold only where the difference exceeds twice its standard error, paired over "
              "the training seeds (seed s of one model against seed s of the other) and the test problems (each "
              "problem's correctness averaged over the sampling seeds), so training noise, sampling noise and the "
              "draw of problems all count; otherwise it is inconclusive at this size. The Fig. 3 claims compare "
              "the first curve step at which each model reaches an accuracy, paired over the training seeds, "
              "whose count is the only replication there: their margin is a Student-t interval on (seeds - 1) "
              "degrees of freedom (with 2 seeds only a large lead decides), and a step is known only to the "
              "curve's interval, which the standard error counts too."), "",
             "| claim | outcome | evidence |", "|---|---|---|"]
    lines += [f"| {c.text} | **{c.outcome}** | {c.evidence} |" for c in rows]
    lines += setting_note(results, cfg, rows)
    open_rows = [c for c in rows if c.outcome == "inconclusive"]
    if open_rows:
        lines += ["", "### How many training seeds would decide the inconclusive claims", "",
                  ("If the effect measured here is the true one, this many training seeds would put it outside its "
                   "margin (for the accuracy claims only the seed part of the error shrinks with more seeds, the "
                   "test problems' part is kept as measured, so the count errs high); each command reruns this "
                   "demo's settings with those seeds."), "",
                  "| claim | training seeds | command | its time here (estimate) |", "|---|---|---|---|"]
        for c in open_rows:
            if c.seeds_needed is None:
                lines.append(f"| {c.text} | none: {c.note} | — | — |")
            else:
                extra = f" ({c.note})" if c.note else ""
                lines.append(f"| {c.text} | {c.seeds_needed}{extra} | `{decide_command(cfg, c.seeds_needed)}` | "
                             f"{_minutes(results, cfg, c.seeds_needed)} |")
    return lines + [""]


def _reproducibility(results: dict, cfg: DemoConfig) -> list[str]:
    m = results.get("machine")
    if not m:
        return []
    lines = ["## Reproducibility", "",
             ("Every number here comes back bit for bit on the same machine type (CPU model and vector extensions), "
              "the same torch build and the same thread counts, whatever the machine's load and however many runs "
              "train side by side (each run's numbers depend only on its own thread count). Another CPU, torch "
              "build or thread count picks other kernels and reduction orders: its numbers differ, within the spread "
              "over training seeds above."), "",
             "| | |", "|---|---|",
             f"| CPU | {m['cpu']} ({m['cpu_count']} logical cores) |",
             f"| vector extensions | {' '.join(m['vector_extensions']) or 'unknown'} |",
             f"| torch | {m['torch']} (git {str(m.get('torch_git'))[:10]}), CPU kernels {m['torch_cpu_capability']}, "
             f"BLAS {m['torch_blas']}, oneDNN {'yes' if m['mkldnn'] else 'no'} |",
             f"| threads | {m['threads']} in all; {m['lanes']} run(s) side by side with {m['threads_per_run']} intra-op "
             f"thread(s) each (training and evaluation); {m['interop_threads']} inter-op |",
             f"| Python, OS | {m['python']}, {m['os']} |"]
    if m.get("precision"):
        lines.append(f"| training precision | {m['precision']['summary']} |")
    if m.get("env"):
        lines.append(f"| environment | {' '.join(f'{k}={v}' for k, v in m['env'].items())} |")
    return lines + [""]


def _time(results: dict, cfg: DemoConfig) -> list[str]:
    lines = ["## Time", "", "| phase | seconds |", "|---|---|"]
    for k, v in results["phases_seconds"].items():
        lines.append(f"| {k} | {v:.1f} |")
        if k == "train":  # runs side by side: each run's own wall time
            lines += [f"| · {var} seed {r['seed']} | {r['train_seconds']:.1f} |"
                      for var, m in results["models"].items() for r in m["runs"]]
    lanes = results.get("lanes", 1)
    pipelined = lanes > 1 and results.get("lane_mode") == "processes"
    return lines + ["", f"Threads: {results['threads']}"
                    + (f", training {lanes} runs side by side with {results['threads'] // lanes} each" if lanes > 1
                       else "")
                    + ("; a model's evaluation starts as soon as it is trained, in a lane whose training runs are "
                       "done: \"train\" ends with the last training run, \"evaluate\" is what came after it"
                       if pipelined else "")
                    + ". Plots: `accuracy_vs_nfe.png`, `learning_curves.png` (every training seed); raw numbers: "
                    "`results.json`; settings: `demo_config.yaml`; models: `ELF/seed-<s>/model`, "
                    "`ELF-REG/seed-<s>/model`.", ""]


# The report's sections in order, each (results, cfg) -> markdown lines; a new section is one function here.
SECTIONS = [_header, _budget, _accuracy_tables, _main_setting, _curves, _terms, adaptive_section, _claims_section,
            _reproducibility, _time]


def write_report(results: dict, cfg: DemoConfig, out: Path) -> None:
    """report.md (``SECTIONS``), accuracy_vs_nfe.png and learning_curves.png in ``out``."""
    lines = [line for section in SECTIONS for line in section(results, cfg)]
    atomic_write_text(out / "report.md", "\n".join(lines))
    _plots(results, cfg, out)


def _plots(results: dict, cfg: DemoConfig, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from elfreg.atomic import atomic_write
    from elfreg.train.metrics import read_metrics

    ev = cfg.eval
    fig, axes = plt.subplots(1, len(ev.samplers), figsize=(4.2 * len(ev.samplers), 3.4), squeeze=False, sharey=True)
    for ax, sampler in zip(axes[0], ev.samplers):
        for v in results["models"]:
            cells = [find_cell(results, v, sampler, n) for n in ev.nfes]
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
    colors = {v: f"C{i}" for i, v in enumerate(results["models"])}
    for v in results["models"]:
        for j, run in enumerate(results["models"][v].get("runs") or []):
            label = v if j == 0 else None  # one legend entry per model; one line per training seed
            curve = run.get("curve") or []
            axes[2].plot([pt["step"] for pt in curve], [100 * pt["acc"] for pt in curve], marker="o", ms=3,
                         color=colors[v], alpha=0.8, label=label)
            recs = read_metrics(Path(run["model_dir"]).parent / "metrics.jsonl")
            steps = [r["step"] for r in recs]
            axes[0].plot(steps, [r["loss_elf"] for r in recs], color=colors[v], alpha=0.7, label=label)
            axes[1].plot(steps, [r["loss"] for r in recs], color=colors[v], alpha=0.7, label=label)
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


# names this module held before the claims moved to a module of their own (three of them renamed)
__getattr__ = moved(__name__, {"_cell": "elfreg.demo.claims:find_cell", "_fmt": "elfreg.demo.claims:fmt_cell",
                               "_compare": "elfreg.demo.claims:compare",
                               **dict.fromkeys(("_by_train_seed", "_var", "_paired_parts", "_paired_se",
                                                "seeds_to_decide", "reach_step", "reach_thresholds",
                                                "reach_seeds_to_decide", "reach_claims"), "elfreg.demo.claims")})
