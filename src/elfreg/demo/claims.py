"""The demo's claims checked against its results: each paper claim at this scale held, did not hold or is
inconclusive, by the difference of two cells against twice its standard error (paired over the test problems and
training seeds), and how many training seeds would decide an inconclusive one."""

from __future__ import annotations

import math
from dataclasses import dataclass

from elfreg.demo.config import DemoConfig


def find_cell(results: dict, variant: str, sampler: str, nfe: int) -> dict | None:
    """The evaluated cell of ``variant`` at (``sampler``, ``nfe``) in a demo's results, or None (not evaluated)."""
    for c in results["models"][variant]["eval"]["cells"]:
        if c["sampler"] == sampler and c["nfe"] == nfe:
            return c
    return None


def fmt_cell(c: dict | None) -> str:
    """A cell's accuracy as ``mean ± std`` in percent (a dash for a cell not evaluated)."""
    return "—" if c is None else f"{100 * c['mean']:.1f} ± {100 * c['std']:.1f}"


def _by_train_seed(c: dict) -> dict[int, list[float]] | None:
    """{training seed: each problem's correctness averaged over that seed's sampling seeds}, or None."""
    rows = c.get("correct")
    if not rows:
        return None
    tags = c.get("train_seed") or [0] * len(rows)
    if len(tags) != len(rows):
        return None
    groups: dict[int, list[list[int]]] = {}
    for tag, r in zip(tags, rows):
        groups.setdefault(tag, []).append(r)
    return {s: [sum(col) / len(g) for col in zip(*g)] for s, g in groups.items()}


def _var(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def _paired_parts(a: dict, b: dict) -> tuple[float, int, float] | None:
    """(v_seed, S, v_problem) with se^2 = v_seed / S + v_problem (``_paired_se``), or None without per-problem
    results; v_seed is var_s(mean_i d[s][i]) (0 with one training seed), v_problem var_i(mean_s d[s][i]) / n."""
    ga, gb = _by_train_seed(a), _by_train_seed(b)
    if ga is None or gb is None or set(ga) != set(gb):
        return None
    seeds = sorted(ga)
    n = {len(v) for v in list(ga.values()) + list(gb.values())}
    if len(n) != 1 or n.pop() < 2:
        return None
    d = [[yb - ya for ya, yb in zip(ga[s], gb[s])] for s in seeds]
    per_problem = [sum(col) / len(seeds) for col in zip(*d)]
    v_seed = _var([sum(r) / len(r) for r in d]) if len(seeds) >= 2 else 0.0
    return v_seed, len(seeds), _var(per_problem) / len(per_problem)


def _paired_se(a: dict, b: dict) -> float | None:
    """Standard error of b's mean minus a's, paired over training seeds and test problems; None without
    per-problem results.

    d[s][i] is problem i's correctness under b minus under a, for training seed s, each averaged over the sampling
    seeds. With one training seed the error is that of the mean over problems, sqrt(var_i(d_i) / n): the spread
    over sampling seeds and the luck of which problems were drawn both enter, the shared problems cancel out. With
    S >= 2 training seeds (paired: seed s of a against seed s of b) the training noise enters too, as in a crossed
    seeds x problems design: se^2 = var_s(mean_i d[s][i]) / S + var_i(mean_s d[s][i]) / n (which slightly
    over-counts the seed x problem interaction, so it errs on the side of "inconclusive").
    """
    parts = _paired_parts(a, b)
    if parts is None:
        return None
    v_seed, n_seeds, v_problem = parts
    return math.sqrt(v_seed / n_seeds + v_problem)


def seeds_to_decide(diff: float, v_seed: float, v_problem: float, factor: float = 2.0) -> int | None:
    """The fewest training seeds S' for which ``factor`` se(S') < |diff|, se(S')^2 = v_seed / S' + v_problem.

    The problem term is kept as it is (conservative: more seeds average out its sampling part, not the problems'
    own differences), so only the seed term shrinks. None when no number of training seeds gets there: no effect,
    or the problem term alone is too wide (more test problems would be needed: task.n_test).
    """
    room = (diff / factor) ** 2 - v_problem
    if diff == 0 or room <= 0:
        return None
    n = max(2, math.floor(v_seed / room))  # then checked with the claims' own rule: decided when margin < |diff|
    while factor * math.sqrt(v_seed / n + v_problem) >= abs(diff):
        n += 1
    return n


@dataclass
class Claim:
    """One paper claim checked at this scale: outcome, evidence, and for an inconclusive one how many training
    seeds would decide it at the measured effect (None: none would, see ``note``)."""

    text: str
    outcome: str
    evidence: str
    seeds_needed: int | None = None
    note: str = ""
    kind: str = ""  # "model" (ELF-REG vs ELF), "sampler" (NFE and samplers), "reach" (Fig. 3)

    def __iter__(self):  # (claim, outcome, evidence), as the report's table rows
        return iter((self.text, self.outcome, self.evidence))


def compare(a: dict | None, b: dict | None, sign: int = 1, n_problems: int | None = None, against: float = 0.0,
            units: str = "test problems", knob: str = "task.n_test") -> tuple[str, str, int | None, str]:
    """Outcome of "b is above a" (sign=1) or "below a" (sign=-1), its evidence, and for an inconclusive outcome the
    training seeds that would decide it at the measured effect (``seeds_to_decide``) or why none would.
    ``against`` moves the line the difference is tested against: "b is at most 3 points below a" is sign=1,
    against=-0.03. ``units``, ``knob``: what the notes call the paired units and the setting that adds more of them.

    "held" or "did not hold" only when the difference of the means exceeds twice its standard error. With
    per-problem results (``correct``) the error is paired over the problems (``_paired_se``); without them it is
    the spread over seeds of both cells (std / sqrt(seeds)) plus, given ``n_problems``, the binomial error of a
    test set that small. Anything closer, ties included, is "inconclusive": at the demo's size most differences are.
    The evidence gives the effect with its interval (difference +- 2 s.e.).
    """
    if a is None or b is None:
        return "not measured", "not measured", None, ""
    diff = b["mean"] - a["mean"]
    parts = _paired_parts(a, b)
    if parts is not None:
        se = math.sqrt(parts[0] / parts[1] + parts[2])
    else:
        var = sum(c["std"] ** 2 / max(len(c.get("acc", ())), 1) for c in (a, b))
        if n_problems:
            var += sum(c["mean"] * (1 - c["mean"]) for c in (a, b)) / n_problems
        se = math.sqrt(var)
    margin = 2 * se
    needed, note = None, ""
    gap = diff - against
    if abs(gap) <= max(margin, 1e-9):
        outcome = "inconclusive"
        if parts is None:
            note = "no per-problem results to size it"
        elif parts[1] < 2:
            note = "one training seed: the seed spread is unknown"
        else:
            needed = seeds_to_decide(gap, parts[0], parts[2])
            if needed is None:
                note = ("no effect measured" if abs(gap) < 1e-12 else
                        f"the {units} alone leave a wider interval: more {units} ({knob}) would be needed")
    else:
        outcome = "held" if sign * gap > 0 else "did not hold"
    evidence = (f"{100 * b['mean']:.1f} vs {100 * a['mean']:.1f} ({100 * diff:+.1f} points, 2 s.e. {100 * margin:.1f}; "
                f"interval [{100 * (diff - margin):+.1f}, {100 * (diff + margin):+.1f}])")
    return outcome, evidence, needed, note


def claims(results: dict, cfg: DemoConfig) -> list[Claim]:
    """The paper's claims at this scale: held / did not hold / inconclusive / not measured, with their evidence."""
    ev = cfg.eval
    n, lo, hi = ev.main_nfe, min(ev.nfes), max(ev.nfes)
    n_problems = results.get("task", {}).get("test")
    rows = []

    def add(text: str, a: tuple[str, str, int], b: tuple[str, str, int], sign: int = 1, kind: str = "sampler") -> None:
        """Claim ``text``: cell b = (variant, sampler, NFE) above (sign=1) or below (sign=-1) cell a."""
        rows.append(Claim(text, *compare(find_cell(results, *a), find_cell(results, *b), sign, n_problems), kind=kind))

    add(f"ELF-REG beats ELF (early-stop, {n} NFE)", ("ELF", "early-stop", n), ("ELF-REG", "early-stop", n),
        kind="model")
    for v in ("ELF", "ELF-REG"):
        add(f"{v}: prefix early-stop beats full-span at {n} NFE", (v, "full-span", n), (v, "early-stop", n))
        add(f"{v}: re-noising beats early-stop at {hi} NFE", (v, "early-stop", hi), (v, "renoise", hi))
        add(f"{v}: re-noising lowers accuracy at {lo} NFE", (v, "early-stop", lo), (v, "renoise", lo), sign=-1)
        add(f"{v}: early-stop accuracy grows from {lo} to {hi} NFE", (v, "early-stop", lo), (v, "early-stop", hi))
    return rows + reach_claims(results, cfg)


def reach_step(curve: list[dict], threshold: float) -> int | None:
    """The first curve step whose test accuracy is at least ``threshold``, or None if it never gets there."""
    return next((pt["step"] for pt in curve if pt["acc"] >= threshold - 1e-12), None)


def reach_thresholds(runs: dict[str, dict[int, list[dict]]], cfg: DemoConfig) -> list[tuple[float, str]]:
    """(accuracy, how it was chosen) of each Fig. 3 threshold: ``eval.reach`` as given, then each fraction of
    ``eval.reach_of_peak`` times the lowest peak of the runs' curves (every run reaches those: the thresholds follow
    the students' own range, and the lowest peak is symmetric in the two models, so neither is favoured)."""
    low = min(max(pt["acc"] for pt in c) for v in runs.values() for c in v.values())
    return [(x, "") for x in cfg.eval.reach] + [(f * low, f" ({100 * f:.0f} % of the lowest peak, {100 * low:.1f} %)")
                                                for f in cfg.eval.reach_of_peak]


def reach_seeds_to_decide(mean: float, var_d: float, c: int, limit: int = 1000) -> int | None:
    """The fewest training seeds S' >= 2 whose Student-t margin t(0.975, S' - 1) sqrt((var(d) + c^2 / 6) / S') is
    below |mean| (``reach_claims``' rule at the measured lead and spread), or None (no lead, or beyond ``limit``)."""
    from scipy.stats import t as student_t

    if mean == 0:
        return None
    return next((n for n in range(2, limit + 1)
                 if student_t.ppf(0.975, n - 1) * math.sqrt((var_d + c * c / 6) / n) < abs(mean)), None)


def reach_claims(results: dict, cfg: DemoConfig) -> list[Claim]:
    """Fig. 3 at this scale: "ELF-REG reaches accuracy X in fewer steps than ELF", one claim per threshold
    (``reach_thresholds``).

    Per training seed s, the first curve step each model reaches X (a run that never does counts as one curve
    interval past its last point: a lower bound). The S paired differences d = ELF - ELF-REG over training seeds
    decide, with a Student-t margin on S - 1 degrees of freedom, margin = t(0.975, S - 1) se: the seeds are the only
    replication here (2 s.e. would be a ~70 % interval with two seeds, not ~95 %). Held when the mean exceeds the
    margin and no ELF-REG run was censored; did not hold when it is below minus the margin and no ELF run was
    censored; else inconclusive (always with fewer than 2 paired seeds). Steps are only known to the curve's
    interval c = eval.curve_every (the crossing lies in (step - c, step]), so se counts that too:
    se^2 = var(d) / S + c^2 / (6 S), a uniform error of variance c^2 / 12 on each of the two steps of a pair;
    without it, seeds that land in the same intervals would give se = 0.
    """
    from scipy.stats import t as student_t

    runs = {v: {r["seed"]: r.get("curve") or [] for r in results["models"].get(v, {}).get("runs", [])}
            for v in ("ELF", "ELF-REG")}
    seeds = sorted(set(runs["ELF"]) & set(runs["ELF-REG"]))
    if not seeds or not all(runs[v][s] for v in runs for s in seeds):
        texts = [f"{100 * x:.0f} % test accuracy" for x in cfg.eval.reach]
        texts += [f"{100 * f:.0f} % of the lowest peak accuracy" for f in cfg.eval.reach_of_peak]
        return [Claim(f"ELF-REG reaches {t} in fewer steps than ELF (Fig. 3)", "not measured", "no accuracy curves",
                      kind="reach")
                for t in texts]
    rows = []
    for x, how in reach_thresholds({v: {s: runs[v][s] for s in seeds} for v in runs}, cfg):
        text = f"ELF-REG reaches {100 * x:.0f} % test accuracy{how} in fewer steps than ELF (Fig. 3)"
        if x <= 0:
            rows.append(Claim(text, "not measured", "a run's curve never rose above 0 %: no threshold to reach",
                              kind="reach"))
            continue
        steps, censored = {}, {}
        for v in runs:
            got = [reach_step(runs[v][s], x) for s in seeds]
            last = [runs[v][s][-1]["step"] for s in seeds]
            censored[v] = any(g is None for g in got)
            steps[v] = [g if g is not None else lst + cfg.eval.curve_every for g, lst in zip(got, last)]
        d = [e - r for e, r in zip(steps["ELF"], steps["ELF-REG"])]
        mean = sum(d) / len(d)
        c, n = cfg.eval.curve_every, len(d)
        se = math.sqrt(_var(d) / n + c * c / (6 * n)) if n >= 2 else None
        q = student_t.ppf(0.975, n - 1) if se is not None else None
        if se is None or abs(mean) <= max(q * se, 1e-9):
            outcome = "inconclusive"
        elif mean > 0:
            outcome = "held" if not censored["ELF-REG"] else "inconclusive"
        else:
            outcome = "did not hold" if not censored["ELF"] else "inconclusive"

        def fmt(v: str) -> str:
            return ", ".join(f"{st}" if st <= runs[v][s][-1]["step"] else f">{runs[v][s][-1]['step']}"
                             for st, s in zip(steps[v], seeds))
        margin = "n/a (one training seed)" if se is None else f"{q * se:.0f} = t(0.975, {n - 1}) {q:.2f} x s.e. {se:.0f}"
        needed, note = None, ""
        if outcome == "inconclusive":
            if n < 2:
                note = "one training seed: the seed spread is unknown"
            else:
                needed = reach_seeds_to_decide(mean, _var(d), c)
                if needed is None:
                    note = "no lead measured" if mean == 0 else "more than 1,000 training seeds at this lead"
            if censored["ELF-REG" if mean > 0 else "ELF"]:
                note = (note + "; " if note else "") + "some runs never reached it: longer runs too (train.steps)"
        rows.append(Claim(text, outcome, f"steps per training seed {seeds}: ELF-REG {fmt('ELF-REG')}; ELF {fmt('ELF')} "
                                         f"(ELF - ELF-REG {mean:+.0f} steps, margin {margin})", needed, note, "reach"))
    return rows
