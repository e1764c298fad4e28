"""The "Train on your JSONL" walk-through (docs/training.md) on four short-answer tasks, as a user would run it.

Writes four tasks in GSM8K's format (a question, a worked line, ``#### answer``), 1,000 training rows and 100
held-out rows each (no held-out question is a training question):

- ``letters``: "What is letter number 3 of the word 'cnsot'?" / "How many times does the letter 'o' appear in
  'rooks'?" (random words of 4 to 6 letters);
- ``units``: "How many hours are in 3180 minutes?" (x or / 3, 7, 12, 24, 60, 100 or 1000; numbers up to 60,000);
- ``sums``: "Sam has 34 marbles and gets 7 more. How many marbles does Sam have now?" (a two-digit number plus or
  minus a one-digit one);
- ``extremes``: "Which is the largest of the numbers 55, 18 and 65?" (the largest or smallest of three two-digit
  numbers; the task written after the recipe was fixed).

With ``--train``, runs the walk-through's commands on each task and training seed, one after another: the dry run
that names the canvas, then ``elfreg train --config small-cpu ... data.validation=held.jsonl`` with the canvas it
named (all rows), and prints a table of the steps each run's minutes gave, its held-out accuracy (the validation at
the last step: early-stop, 16 NFE, EMA weights), the seconds its budget counted and the command's wall time.
Finished runs are skipped when asked again (their ``summary.json``). Accuracy depends on the machine's speed (the
steps a budget gives), so run it alone on the machine whose figures you want.

    python benchmarks/own_data_tasks.py --out runs/own                      # the data only
    python benchmarks/own_data_tasks.py --out runs/own --train --tasks sums units --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

TASKS = ("letters", "units", "sums", "extremes")
NAMES = ["Sam", "Ana", "Li", "Omar", "Kate", "Ravi", "Mia", "Tom", "Zoe", "Ben"]
THINGS = ["marbles", "apples", "stickers", "pencils", "coins", "cards", "books", "shells"]
# (larger unit, smaller unit, how many smaller units make one larger)
UNITS = [("yard", "feet", 3), ("week", "days", 7), ("foot", "inches", 12), ("day", "hours", 24),
         ("hour", "minutes", 60), ("minute", "seconds", 60), ("meter", "centimeters", 100),
         ("kilometer", "meters", 1000), ("kilogram", "grams", 1000)]
PLURAL = {"yard": "yards", "week": "weeks", "foot": "feet", "day": "days", "hour": "hours", "minute": "minutes",
          "meter": "meters", "kilometer": "kilometers", "kilogram": "kilograms"}
UP_TO = 60_000


def letters(rng: random.Random) -> tuple[str, str]:
    word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 6)))
    spelled = " ".join(word)
    if rng.random() < 0.5:
        k = rng.randint(1, len(word))
        return (f"What is letter number {k} of the word '{word}'?",
                f"The letters of {word} are {spelled}. Letter {k} is {word[k - 1]}.\n#### {word[k - 1]}")
    c = rng.choice(word) if rng.random() < 0.8 else rng.choice("abcdefghijklmnopqrstuvwxyz")
    n = word.count(c)
    return (f"How many times does the letter '{c}' appear in '{word}'?",
            f"The letters of {word} are {spelled}. The letter {c} appears {n} time{'' if n == 1 else 's'}.\n#### {n}")


def units(rng: random.Random) -> tuple[str, str]:
    big, small, f = rng.choice(UNITS)
    k = rng.randint(1, UP_TO // f)
    if rng.random() < 0.5:   # larger -> smaller: multiply
        return (f"How many {small} are in {k} {PLURAL[big] if k != 1 else big}?",
                f"1 {big} is {f} {small}, so {k} {PLURAL[big] if k != 1 else big} is {k} x {f} = {k * f} {small}."
                f"\n#### {k * f}")
    return (f"How many {PLURAL[big]} are in {k * f} {small}?",
            f"1 {big} is {f} {small}, so {k * f} {small} is {k * f} / {f} = {k} {PLURAL[big]}.\n#### {k}")


def sums(rng: random.Random) -> tuple[str, str]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(10, 99), rng.randint(1, 9)
    if rng.random() < 0.5:
        return (f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?",
                f"{name} has {a} + {b} = {a + b} {thing}.\n#### {a + b}")
    return (f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have left?",
            f"{name} has {a} - {b} = {a - b} {thing}.\n#### {a - b}")


def extremes(rng: random.Random) -> tuple[str, str]:
    xs = [rng.randint(10, 99) for _ in range(3)]
    which, pick = (("largest", max(xs)) if rng.random() < 0.5 else ("smallest", min(xs)))
    listed = f"{xs[0]}, {xs[1]} and {xs[2]}"
    return (f"Which is the {which} of the numbers {listed}?", f"The {which} of {listed} is {pick}.\n#### {pick}")


MAKERS = {"letters": letters, "units": units, "sums": sums, "extremes": extremes}


def write_task(folder: Path, task: str, rows: int, held: int, seed: int) -> None:
    """``folder``/train.jsonl and held.jsonl: ``rows`` and ``held`` rows, no held-out question among the training
    ones (the held-out rows are drawn first; a training draw that repeats one is drawn again)."""
    rng = random.Random(f"{task}-{seed}")
    make = MAKERS[task]
    held_rows: dict[str, str] = {}
    while len(held_rows) < held:
        q, a = make(rng)
        held_rows.setdefault(q, a)
    train_rows: list[tuple[str, str]] = []
    while len(train_rows) < rows:
        q, a = make(rng)
        if q not in held_rows:
            train_rows.append((q, a))
    folder.mkdir(parents=True, exist_ok=True)
    for name, items in (("train.jsonl", train_rows), ("held.jsonl", list(held_rows.items()))):
        with open(folder / name, "w") as f:
            for q, a in items:
                f.write(json.dumps({"question": q, "answer": a}) + "\n")


def source(path: Path) -> str:
    return (f"data.sources=[{{name: mine, task: math, path: {path}, format: jsonl, "
            f"columns: {{prompt: question, response: answer}}}}]")


def canvas_from(text: str) -> tuple[int, int] | None:
    """(max_prompt_len, max_len) for all rows, from the dry run's refusal ("these rows need model.max_prompt_len=P
    model.max_len=L") or its plan ("canvas the rows need (all / 99 %)  max_prompt_len P / p, max_len L / l")."""
    m = (re.search(r"these rows need model\.max_prompt_len=(\d+) model\.max_len=(\d+)", text)
         or re.search(r"canvas the rows need[^\n]*?max_prompt_len (\d+)[^\n]*?max_len (\d+)", text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def canvas(elfreg: list[str], train: Path) -> tuple[int, int]:
    """The canvas the dry run names for all rows."""
    out = subprocess.run([*elfreg, "train", "--config", "small-cpu", "--dry-run", source(train)],
                         capture_output=True, text=True)
    found = canvas_from(out.stdout + out.stderr)
    if found is None:
        raise SystemExit(f"the dry run on {train} named no canvas:\n{out.stdout}{out.stderr}")
    return found


def train(elfreg: list[str], folder: Path, seed: int, extra: list[str]) -> dict:
    """One walk-through training run (skipped if its summary exists); its figures."""
    out = folder / f"seed{seed}"
    summary_path = out / "summary.json"
    wall = None
    if not summary_path.is_file():
        p, length = canvas(elfreg, folder / "train.jsonl")
        cmd = [*elfreg, "train", "--config", "small-cpu", "--output", str(out), "--no-progress",
               f"model.max_prompt_len={p}", f"model.max_len={length}", f"train.seed={seed}",
               f"data.validation={folder / 'held.jsonl'}", source(folder / "train.jsonl"), *extra]
        print("$", " ".join(cmd), flush=True)
        t0 = time.monotonic()
        subprocess.run(cmd, check=True)
        wall = time.monotonic() - t0
        (out / "wall_s.txt").write_text(f"{wall:.1f}\n")
    elif (out / "wall_s.txt").is_file():
        wall = float((out / "wall_s.txt").read_text())
    summary = json.loads(summary_path.read_text())
    tb = summary.get("time_budget") or {}
    return {"task": folder.name, "seed": seed, "steps": summary["steps"],
            "accuracy": summary.get("validation", {}).get("val_acc"), "budget_s": tb.get("seconds"),
            "minutes": tb.get("minutes"), "decisions": tb.get("decisions"), "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--held", type=int, default=100)
    ap.add_argument("--data-seed", type=int, default=0, help="the rows' seed (not the training seed)")
    ap.add_argument("--train", action="store_true", help="run the walk-through on each task and --seeds")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--override", action="append", default=[], help="one more key=value for elfreg train")
    args = ap.parse_args()
    for task in args.tasks:
        folder = args.out / task
        if not (folder / "train.jsonl").is_file():
            write_task(folder, task, args.rows, args.held, args.data_seed)
    if not args.train:
        print(f"wrote {', '.join(args.tasks)} under {args.out}")
        return
    elfreg = [sys.executable, "-m", "elfreg"]
    results = [train(elfreg, args.out / task, seed, args.override) for task in args.tasks for seed in args.seeds]
    print(f"\n{'task':<10} {'seed':>4} {'steps':>6} {'held-out':>9} {'budget s':>9} {'wall s':>7} {'decisions':>9}")
    for r in results:
        acc = "n/a" if r["accuracy"] is None else f"{100 * r['accuracy']:.0f} %"
        print(f"{r['task']:<10} {r['seed']:>4} {r['steps']:>6,} {acc:>9} {r['budget_s'] or 0:>9.0f} "
              f"{r['wall_s'] or 0:>7.0f} {r['decisions'] or 0:>9}")
    for task in args.tasks:
        accs = [100 * r["accuracy"] for r in results if r["task"] == task and r["accuracy"] is not None]
        if len(accs) > 1:
            print(f"{task}: {statistics.mean(accs):.1f} +- {statistics.stdev(accs):.1f} % over {len(accs)} seeds")


if __name__ == "__main__":
    main()
