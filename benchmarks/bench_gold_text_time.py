"""How long the text work of a correct answer takes: the floor under ``--text-limit`` (elfreg.eval.scoring).

Run: PYTHONPATH=src python benchmarks/bench_gold_text_time.py [--benchmark math500] [--top 5]
Scores every gold answer of the shipped benchmark, written as a model would write it (MATH: ``\\boxed{gold}``;
GSM8K: ``The answer is gold``), with the same per-sample function the text pool runs, after one warm-up call (the
imports a pool worker makes before its first task). Prints the slowest samples and how many gold answers were
scored wrong (must be 0). A ``--text-limit`` under the slowest time would fail correct answers on timing alone;
elfreg's lower bound of 1 s keeps a margin over it for a loaded machine.
"""

from __future__ import annotations

import argparse
import time

from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, _text_verdict

WRITTEN = {"math": "The answer is \\boxed{{{}}}.", "gsm8k": "The answer is {}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="math500", help="a text benchmark: math500, gsm8k")
    ap.add_argument("--top", type=int, default=5, help="slowest samples to print")
    args = ap.parse_args()
    bench = load_benchmark(args.benchmark)
    written = WRITTEN[bench.kind]
    timeout = ScoreOptions.math_timeout_s
    _text_verdict(bench.kind, None, timeout, written.format(bench.problems[0].answer), bench.problems[0].answer)
    times = []
    for p in bench.problems:
        t0 = time.perf_counter()
        verdict = _text_verdict(bench.kind, None, timeout, written.format(p.answer), p.answer)
        times.append((time.perf_counter() - t0, p.task_id, verdict["correct"]))
    times.sort(reverse=True)
    print(f"{args.benchmark}: {len(times)} gold answers, {sum(not ok for _, _, ok in times)} scored wrong; "
          f"text limit floor {ScoreOptions.__dataclass_fields__['text_limit_s'].default:g} s default, 1 s lowest")
    for seconds, task_id, _ in times[:args.top]:
        print(f"  {seconds:.3f} s  {task_id}")


if __name__ == "__main__":
    main()
