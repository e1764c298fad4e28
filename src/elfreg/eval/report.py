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
            metrics[mode] = {"base": summarize(complete(_table(bench, rows, lambda r: r[mode].get("base") == "pass")))}
            if "plus" in bench.code_tests:
                metrics[mode]["plus"] = summarize(complete(_table(
                    bench, rows, lambda r: r[mode].get("base") == "pass" and r[mode].get("plus") == "pass")))
        metrics["aliased_samples"] = sum(bool(r.get("aliased")) for r in rows)
    else:
        metrics["accuracy"] = summarize(complete(_table(bench, rows, lambda r: bool(r["correct"]))))
    opts_d = asdict(opts)
    return {
        "benchmark": bench.name, "kind": bench.kind, "data_file": bench.source, "data_sha256": bench.source_sha256,
        "problems_in_benchmark": len(bench.problems), "problems_scored": len(present),
        "problems_missing": len(missing), "samples": samples, "metrics": metrics,
        "settings": {**opts_d, "isolation": isolation, "prompt_format": f"elfreg.eval.prompts ({bench.name})",
                     "sanitizer": "elfreg.eval.sanitize (EvalPlus 0.3.1 behaviour)" if bench.kind == "code" else None},
        "versions": _versions(), "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def markdown_table(summary: dict) -> str:
    """A markdown table of the headline numbers followed by the settings."""
    lines = ["| benchmark | tests | alias | pass@1 (%) | std across seeds | pass@k (%) | problems | samples |",
             "|---|---|---|---|---|---|---|---|"]

    def row(tests: str, alias: str, m: dict) -> None:
        ks = ", ".join(f"@{k.split('@')[1]}={100 * v:.2f}" for k, v in m.items()
                       if k.startswith("pass@") and k != "pass@1" and not k.startswith("pass@1_"))
        lines.append(f"| {summary['benchmark']} | {tests} | {alias} | {100 * m['pass@1']:.2f} | "
                     f"{100 * m['pass@1_std_across_seeds']:.2f} | {ks or '-'} | {m['problems']} | "
                     f"{m['samples_per_problem']} |")

    met = summary["metrics"]
    if "accuracy" in met:
        row("answer", "-", met["accuracy"])
    else:
        for mode in ("noalias", "alias"):
            for tests, m in met[mode].items():
                row(tests, "on" if mode == "alias" else "off", m)
    lines.append("")
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
