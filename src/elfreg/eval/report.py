"""Summary JSON and markdown table that record every setting (spec §6)."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from ..jsontext import dumps
from ..tasks.benchmark import Benchmark

from .codeprep import ALIAS_MODES
from .custom import custom_record
from .metrics import summarize
from .protocol import default_ks, validate_ks


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("tree-sitter", "tree-sitter-python", "math-verify", "elfreg"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _table(bench: Benchmark, rows: list[dict], key) -> dict[str, dict[int, bool]]:
    """task_id -> sample -> correct, over all benchmark problems unless the run is a subset."""
    out: dict[str, dict[int, bool]] = {}
    for r in rows:
        out.setdefault(r["task_id"], {})[r["sample"]] = key(r)
    return out


def build_summary(bench: Benchmark, rows: list[dict], opts, isolation: str | None) -> dict:
    """Metrics per test set and alias mode, plus settings; missing problems count as wrong unless allow_subset."""
    samples = sorted({r["sample"] for r in rows})
    if opts.ks is None:
        ks, dropped = default_ks(bench.name, len(samples))
    else:
        validate_ks(opts.ks, len(samples))
        ks, dropped = tuple(opts.ks), ()
    present = {r["task_id"] for r in rows}
    missing = [p.task_id for p in bench.problems if p.task_id not in present]

    def complete(t: dict[str, dict[int, bool]]) -> dict[str, dict[int, bool]]:
        if not opts.allow_subset:
            for tid in missing:
                t[tid] = {s: False for s in samples}
        for per in t.values():
            for s in samples:
                per.setdefault(s, False)
        return t

    metrics: dict = {}
    if bench.kind == "code":
        for mode in opts.code_modes:
            metrics[mode] = {"base": summarize(complete(_table(bench, rows, lambda r: r[mode].get("base") == "pass")),
                                               ks)}
            if "plus" in bench.code_tests:
                metrics[mode]["plus"] = summarize(complete(_table(
                    bench, rows, lambda r: r[mode].get("base") == "pass" and r[mode].get("plus") == "pass")), ks)
        metrics["aliased_samples"] = sum(bool(r.get("aliased")) for r in rows)
        if opts.alias_helpers:
            metrics["aliased_samples_helpers"] = sum(bool(r.get("aliased_helpers")) for r in rows)
        # `completion` rows that hold a whole answer (fences, prose, their own def): counted, each row says why
        flagged = [r for r in rows if r.get("looks_like_solution")]
        metrics["completions_looking_like_solutions"] = {
            "rows": len(flagged), "failed": sum(r["noalias"].get("base") != "pass" for r in flagged)}
    else:
        metrics["accuracy"] = summarize(complete(_table(bench, rows, lambda r: bool(r["correct"]))), ks)
    opts_d = asdict(opts)
    return {
        "benchmark": bench.name, "kind": bench.kind, "data_file": bench.source, "data_sha256": bench.source_sha256,
        "problems_in_benchmark": len(bench.problems), "problems_scored": len(present),
        "problems_missing": len(missing), "samples": samples, "metrics": metrics,
        "pass_at_k": {"ks": list(ks), "dropped_ks": list(dropped),
                      "ks_from": "ScoreOptions.ks" if opts.ks is not None else "default (the paper's ks)"},
        "settings": {**opts_d, "isolation": isolation, "prompt_format": prompt_home(bench.prompt_formatter),
                     "sanitizer": "elfreg.eval.sanitize (EvalPlus 0.3.1 behaviour)" if bench.kind == "code" else None},
        "versions": _versions(), "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **custom_record(bench),   # a user's file: "custom", its rules, its name and sha256
    }


def prompt_home(formatter: Callable) -> str:
    """Where a benchmark's prompt function lives, for the record: ``elfreg.tasks.formats.gsm8k_prompt``."""
    module, name = getattr(formatter, "__module__", None), getattr(formatter, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(formatter)


def _blocks(met: dict) -> list[tuple[str, str | None, str | None, dict]]:
    """(tests, alias mode, alias label, metrics) per table row: one row for a text benchmark, else per mode/tests."""
    if "accuracy" in met:
        return [("answer", None, "-", met["accuracy"])]
    return [(tests, mode, ALIAS_MODES[mode], m) for mode in ALIAS_MODES if mode in met for tests, m in met[mode].items()]


def paper_lines(summary: dict) -> list[str]:
    """The paper figures the reported numbers compare with (same benchmark, sampler, NFE, ρ, w, samples), each
    naming the paper's table; or why none is shown."""
    ev = summary.get("evaluation")
    if not ev:
        return []
    refs = ev.get("paper_refs") or []
    if summary.get("data"):   # custom: a file of the user's, not the paper's test set
        return ["Paper figures: none (custom data: the paper's figures are for its test sets)."]
    if not refs:
        return ["Paper figures: none for these settings (they are not a sampling run of the paper's protocol)."]
    out = ["Paper figures for the same benchmark, sampler, NFE, rho, w and samples (pass@k in %):"]
    for tests, mode, label, _ in _blocks(summary["metrics"]):
        alias = {"noalias": "off", "alias": "paper"}.get(mode) if mode else None
        for r in refs:
            if r["tests"] == (tests if mode else None) and r["alias"] == alias:
                vals = ", ".join(f"{m} {v:.2f}" for m, v in r["values"]) or "no figure quoted"
                where = f"{tests}, alias {label}: " if mode else ""
                out.append(f"- {where}{r['metric']} vs the paper's {r['table']}: {vals}"
                           + (f" ({r['note']})" if r["note"] else ""))
    if "alias_helpers" in summary["metrics"]:
        out.append("- the helper-tolerant alias rows are elfreg's reading, not the paper's rule: no paper figure")
    return out


def subset_line(summary: dict) -> str | None:
    """The line that says the figures do not cover every problem of the benchmark: how many have no sample, what
    they count as, and the flag that decides it; None when every problem has a sample."""
    missing, total = summary.get("problems_missing", 0), summary.get("problems_in_benchmark", 0)
    if not missing:
        return None
    if summary.get("settings", {}).get("allow_subset"):
        return (f"**Subset:** {total - missing} of {total} {summary['benchmark']} problems scored; the {missing} "
                "with no sample are left out of every figure (--allow-subset).")
    return (f"**{missing} of {total} {summary['benchmark']} problems have no sample and count as wrong** in every "
            "figure below; pass --allow-subset to score only the problems in the file.")


def markdown_table(summary: dict) -> str:
    """A markdown table of the headline numbers (one column per reported pass@k), the paper figures they compare
    with, and the settings."""
    met = summary["metrics"]
    blocks = _blocks(met)
    ks = [k for k in blocks[0][3].get("ks", []) if k != 1]
    title = summary.get("run_label")
    lines = [f"### {title}", ""] if title else []
    subset = subset_line(summary)
    lines += [subset, ""] if subset else []
    lines += ["| benchmark | tests | alias | pass@1 (%) | std across seeds | "
              + "".join(f"pass@{k} (%) | " for k in ks) + "problems | samples |",
              "|---|---|---|---|---|" + "---|" * len(ks) + "---|---|"]
    for tests, _, alias, m in blocks:
        lines.append(f"| {summary['benchmark']} | {tests} | {alias} | {100 * m['pass@1']:.2f} | "
                     f"{100 * m['pass@1_std_across_seeds']:.2f} | "
                     + "".join(f"{100 * m[f'pass@{k}']:.2f} | " for k in ks)
                     + f"{m['problems']} | {m['samples_per_problem']} |")
    lines.append("")
    pk = summary.get("pass_at_k", {})
    if pk.get("dropped_ks"):
        lines.append(f"Not reported (k > {blocks[0][3]['samples_per_problem']} samples): "
                     + ", ".join(f"pass@{k}" for k in pk["dropped_ks"]))
    long = summary.get("prompts_too_long") or {}
    if long.get("count"):
        lines.append(f"{long['count']} problems' prompts exceed the model's {long['limit']}-token prompt limit "
                     f"(longest {long['longest']}): not generated, scored wrong (--long-prompts skip)")
    looks = met.get("completions_looking_like_solutions")
    if looks and looks["rows"]:
        lines.append(f"{looks['rows']} `completion` rows look like self-contained `solution`s ({looks['failed']} of "
                     "them failed); each row's detail says why. Save whole programs in the `solution` field.")
    lines += paper_lines(summary)
    ev = summary.get("evaluation")
    if ev:
        lines.append(f"Protocol: {ev['protocol']}; " + ", ".join(
            f"{k}={v} ({ev['origin'][k]})" for k, v in ev["values"].items() if k in ev["origin"]))
    if summary.get("nfe"):   # eval run: the NFE each sample spent (adaptive exit: check decodes included)
        from elfreg.sampling.exit import format_nfe_summary

        lines.append(f"NFE per sample: {format_nfe_summary(summary['nfe'])}")
    lines.append("Settings: " + ", ".join(f"{k}={v}" for k, v in summary["settings"].items()))
    lines.append(f"Data: {summary['data_file']} (sha256 {summary['data_sha256']}); "
                 f"missing problems: {summary['problems_missing']}; versions: {summary['versions']}")
    return "\n".join(lines) + "\n"


def combined_markdown(summary: dict) -> str:
    """The markdown of a run with several sampling runs (``summary["runs"]``): one section per run."""
    return "\n".join(markdown_table(s) for s in summary["runs"].values())


def write_reports(summary: dict, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` atomically into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    md = combined_markdown(summary) if "runs" in summary else markdown_table(summary)
    for name, text in (("summary.json", dumps(summary, indent=2)), ("summary.md", md)):
        tmp = out / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
        paths.append(out / name)
    return paths[0], paths[1]
