"""Summary JSON and markdown table that record every setting (spec §6)."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path

from .benchmark import Benchmark
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
        for mode in ("noalias", "alias"):
            metrics[mode] = {"base": summarize(complete(_table(bench, rows, lambda r: r[mode].get("base") == "pass")),
                                               ks)}
            if "plus" in bench.code_tests:
                metrics[mode]["plus"] = summarize(complete(_table(
                    bench, rows, lambda r: r[mode].get("base") == "pass" and r[mode].get("plus") == "pass")), ks)
        metrics["aliased_samples"] = sum(bool(r.get("aliased")) for r in rows)
    else:
        metrics["accuracy"] = summarize(complete(_table(bench, rows, lambda r: bool(r["correct"]))), ks)
    opts_d = asdict(opts)
    return {
        "benchmark": bench.name, "kind": bench.kind, "data_file": bench.source, "data_sha256": bench.source_sha256,
        "problems_in_benchmark": len(bench.problems), "problems_scored": len(present),
        "problems_missing": len(missing), "samples": samples, "metrics": metrics,
        "pass_at_k": {"ks": list(ks), "dropped_ks": list(dropped),
                      "ks_from": "ScoreOptions.ks" if opts.ks is not None else "default (the paper's ks)"},
        "settings": {**opts_d, "isolation": isolation, "prompt_format": f"elfreg.eval.prompts ({bench.name})",
                     "sanitizer": "elfreg.eval.sanitize (EvalPlus 0.3.1 behaviour)" if bench.kind == "code" else None},
        "versions": _versions(), "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def markdown_table(summary: dict) -> str:
    """A markdown table of the headline numbers (one column per reported pass@k) followed by the settings."""
    met = summary["metrics"]
    blocks = [("answer", "-", met["accuracy"])] if "accuracy" in met else [
        (tests, "on" if mode == "alias" else "off", m)
        for mode in ("noalias", "alias") for tests, m in met[mode].items()]
    ks = [k for k in blocks[0][2].get("ks", []) if k != 1]
    lines = ["| benchmark | tests | alias | pass@1 (%) | std across seeds | "
             + "".join(f"pass@{k} (%) | " for k in ks) + "problems | samples |",
             "|---|---|---|---|---|" + "---|" * len(ks) + "---|---|"]
    for tests, alias, m in blocks:
        lines.append(f"| {summary['benchmark']} | {tests} | {alias} | {100 * m['pass@1']:.2f} | "
                     f"{100 * m['pass@1_std_across_seeds']:.2f} | "
                     + "".join(f"{100 * m[f'pass@{k}']:.2f} | " for k in ks)
                     + f"{m['problems']} | {m['samples_per_problem']} |")
    lines.append("")
    pk = summary.get("pass_at_k", {})
    if pk.get("dropped_ks"):
        lines.append(f"Not reported (k > {blocks[0][2]['samples_per_problem']} samples): "
                     + ", ".join(f"pass@{k}" for k in pk["dropped_ks"]))
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


def write_reports(summary: dict, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` atomically into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in (("summary.json", json.dumps(summary, indent=2)), ("summary.md", markdown_table(summary))):
        tmp = out / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
        paths.append(out / name)
    return paths[0], paths[1]
