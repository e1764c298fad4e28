"""Growth of the scorer's text work on hostile samples (issue 28): each case at size n and 4n, in one run.

Run: PYTHONPATH=src python benchmarks/bench_hostile.py [--n 20000] [--repeat 3]

Prints, per case, the fastest time at n and at 4n and their ratio: about 4 for linear work, 16 for quadratic
(before the fixes these cases were quadratic or worse: the seconds the issue measured are in the docstrings
below). The fastest of the repeats, because the shared machine's load only ever adds time. Each case is the
function the scorer calls on the hostile text, not a whole `eval score` run (tests/eval/test_hostile_samples.py
and tests/sandbox/test_hostile_costs.py run those end to end).

Then the memory of text work against the input size (issue 32: two GSM8K completions of ``'12 ' * 50Mi``, 157 MB
each, made the process tree of `eval score` reach 6.7 GB of RSS, one worker 3.5 GB). Per size, two such rows are
scored end to end (``load_completions`` + ``score_completions``, 2 workers) in a fresh process under three
settings: no limits (the behaviour before: no completion size bound, no worker memory limit), the worker memory
limit alone (the size bound raised out of the way), and the defaults. The per-sample time limit is raised to 10
minutes, so what the table shows is memory (on a loaded machine the 30 s limit can end extraction first). The peak RSS of the whole process tree
(summed; pages shared after fork count once per process, as ``ps`` shows them) and of its largest process are
polled from /proc every 20 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from elfreg.tasks.answers import extract_choice, extract_gsm8k
from elfreg.eval.codeprep import looks_like_solution
from elfreg.eval.sanitize import sanitize
from elfreg.sandbox.inside.codec import CostError, check_nesting, decode_text
from elfreg.sandbox.records import parse_record

P = 2 ** 61 - 1  # hash(k * P) == 0 for every int k


def _refused(fn: Callable, *args) -> None:
    """Run ``fn``; refusing the input (ValueError, CostError) is the expected, fast outcome."""
    try:
        fn(*args)
    except (ValueError, CostError):
        pass


def unterminated_record(n: int) -> None:
    """A result line of n escaped quotes with no closing quote (before: 80 KB took 40 s)."""
    _refused(parse_record, b'{"i":0,"v":"' + b'\\"' * n)


def unterminated_nesting(n: int) -> None:
    """check_nesting on n escaped quotes in an open string (before: 40 KB took 10.8 s)."""
    _refused(check_nesting, '{"$s":["' + '\\"' * n)


def colliding_set(n: int) -> None:
    """An output set of n hash-colliding ints (before: 90k ints took 170 s). Refused once the colliding keys'
    comparisons pass a fixed budget (codec.MAX_KEY_WORK): past it, time grows with the text only."""
    _refused(decode_text, '{"$s":[' + ",".join(str(k * P) for k in range(n)) + "]}")


def deep_expression(n: int) -> None:
    """A first line ``x = ---...1`` (before: 3,000 dashes crashed the run with RecursionError)."""
    looks_like_solution("x = " + "-" * n + "1\n", "f")


def mmlu_spaces(n: int) -> None:
    """'answer' followed by n spaces (before: 313 bytes took 45 s, ~n^4)."""
    extract_choice("The answer is (B).\nanswer" + " " * n + "x")


def gsm8k_spaces(n: int) -> None:
    """n spaces between numbers (before: 20,000 spaces took 3.4 s, quadratic)."""
    extract_gsm8k("total 3" + " " * n + "-$" + " " * n + "done")


def junk_lines(n: int) -> None:
    """n // 10 junk lines around a function (before: 3,000 lines took > 150 s, ~cubic)."""
    junk = "\n".join(f"??? step {i} $" for i in range(n // 10))
    sanitize(f"{junk}\ndef f():\n    return 1\n{junk}", "f")


FUNCTION = "def f(numbers, threshold):\n    return any(abs(a - b) < threshold for a in numbers for b in numbers)\n"


def prose_after_code(n: int) -> None:
    """A function in a python fence, then n // 10 identical prose lines (issue 32; before: 400 lines took 16.8 s,
    about n^2.3)."""
    sanitize(f"```python\n{FUNCTION}```\n" + "\n".join(["The function compares every pair of numbers."] * (n // 10)),
             "f")


def junk_lines_cr(n: int) -> None:
    """junk_lines with one lone \\r in the junk (issue 36; before: 600 lines took 140 s)."""
    junk = "\n".join(f"??? step {i} $" for i in range(n // 10))
    sanitize(f"{junk}\r\ndef f():\n    return 1\n{junk}\rx", "f")


def junk_lines_breaks(n: int) -> None:
    """junk_lines with every character that str.splitlines() breaks at and Python's tokenizer does not."""
    junk = [f"??? step {i} $" for i in range(n // 10)]
    for k, char in enumerate("\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"):
        junk[k * len(junk) // 8] += char
    sanitize("\n".join([*junk, "def f():", "    return 1", *junk]), "f")


def unfinished_try(n: int) -> None:
    """A try block of n // 10 lines that never gets its except, then a function: every span from the try line is
    incomplete, so only the span search's work budget bounds it (without it, cubic; past it, the search keeps the
    longest span found so far: here none, and the function after it is not reached)."""
    sanitize("try:\n" + "    x = 1\n" * (n // 10) + FUNCTION, "f")


def blank_lines(n: int) -> None:
    """10 n newlines before a function: the fence regex (before: 200,000 took ~70 s, quadratic)."""
    looks_like_solution("\n" * (10 * n) + "def f():\n    return 1\n", "f")


CASES = [unterminated_record, unterminated_nesting, colliding_set, deep_expression, mmlu_spaces, gsm8k_spaces,
         junk_lines, blank_lines, prose_after_code, junk_lines_cr, junk_lines_breaks, unfinished_try]


def fastest(fn: Callable[[int], None], n: int, repeat: int) -> float:
    """The fastest of ``repeat`` timed calls, after one untimed call (imports, parser set-up)."""
    fn(n)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t)
    return best


_SCORE = """
import json, sys
from elfreg.eval.completions import load_completions
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions

cfg = json.loads(sys.argv[1])
bench = load_benchmark("gsm8k")
rows = load_completions(cfg["path"], bench.by_id, ("completion",), cfg["max_completion_bytes"]).rows
opts = ScoreOptions(workers=2, allow_subset=True, progress=False, max_completion_bytes=cfg["max_completion_bytes"],
                    text_memory_bytes=cfg["text_memory_bytes"], text_limit_s=600)
score_completions(bench, rows, cfg["results"], opts)
"""

# (name, --max-completion-bytes, text worker memory limit); None: the default
SETTINGS = [("no limits (before)", 1 << 30, "off"), ("memory limit only", 1 << 30, None), ("defaults", None, None)]


def _tree_memory(root: int) -> tuple[int, int, int]:
    """(summed RSS, summed PSS, largest RSS) in bytes of ``root`` and its descendants, read from /proc. RSS counts
    the pages a forked worker shares with its parent in both (as ``ps`` does); PSS splits them (the memory used)."""
    page = os.sysconf("SC_PAGE_SIZE")
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
        rss[int(name)] = int(fields[21]) * page
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    pss = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss += sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
        except OSError:
            continue
    sizes = [rss.get(pid, 0) for pid in tree]
    return sum(sizes), pss, max(sizes)


def text_memory(mb: float, setting: tuple, folder: Path) -> dict:
    """Score two GSM8K rows of ``'12 ' * (mb MiB / 3)`` under ``setting`` in a fresh process; its peak memory (tree
    RSS and PSS, largest process RSS), wall time and the rows' details."""
    from elfreg.eval.scoring import ScoreOptions

    _, max_bytes, memory = setting
    path, results = folder / f"c{mb:g}.jsonl", folder / f"r{mb:g}-{SETTINGS.index(setting)}.jsonl"
    if not path.exists():
        text = "12 " * int(mb * (1 << 20) / 3)
        path.write_text("".join(json.dumps({"task_id": f"gsm8k/{i}", "completion": text}) + "\n" for i in range(2)))
    cfg = {"path": str(path), "results": str(results),
           "max_completion_bytes": max_bytes or ScoreOptions.max_completion_bytes,
           "text_memory_bytes": None if memory == "off" else memory or ScoreOptions.text_memory_bytes}
    t0 = time.perf_counter()
    log = folder / "stderr.txt"
    with open(log, "w") as err_file:
        proc = subprocess.Popen([sys.executable, "-c", _SCORE, json.dumps(cfg)], stderr=err_file)
    peak = {"rss": 0, "pss": 0, "largest": 0}
    while proc.poll() is None:
        for key, value in zip(peak, _tree_memory(proc.pid)):
            peak[key] = max(peak[key], value)
        time.sleep(0.02)
    err = log.read_text().strip().splitlines()
    details = sorted({json.loads(line).get("detail") or "scored" for line in results.read_text().splitlines()}) \
        if results.exists() else [f"refused: {err[-1].split('.jsonl:1: ')[-1] if err else proc.returncode}"]
    return {"seconds": time.perf_counter() - t0, **peak, "details": details}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000, help="the smaller size of every case (default 20000)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats per size; the fastest counts (default 3)")
    ap.add_argument("--memory-mb", default="0.001,16,64",
                    help="sizes (MiB) of each of the two GSM8K rows of the memory table, comma-separated; '' skips "
                         "it (default 0.001,16,64; the issue's case is 157)")
    args = ap.parse_args()
    print(f"| case | n = {args.n} | 4n = {4 * args.n} | ratio (linear ~4, quadratic ~16) |")
    print("| --- | --- | --- | --- |")
    for case in CASES:
        small, large = fastest(case, args.n, args.repeat), fastest(case, 4 * args.n, args.repeat)
        print(f"| {case.__name__} | {small * 1e3:.1f} ms | {large * 1e3:.1f} ms | {large / small:.1f} |")
    sizes = [float(x) for x in args.memory_mb.split(",") if x.strip()]
    if not sizes:
        return
    print("\n| input: 2 GSM8K rows of | setting | peak RSS, tree | peak PSS, tree | largest process RSS | time | rows |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for mb in sizes:
            for setting in SETTINGS:
                r = text_memory(mb, setting, Path(tmp))
                gib = {k: f"{r[k] / 2 ** 30:.2f} GiB" for k in ("rss", "pss", "largest")}
                print(f"| {mb:g} MiB | {setting[0]} | {gib['rss']} | {gib['pss']} | {gib['largest']} "
                      f"| {r['seconds']:.1f} s | {'; '.join(r['details'])} |", flush=True)


if __name__ == "__main__":
    main()
