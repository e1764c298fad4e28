"""A CPU setting where the teacher's quality depends on NFE, and what distillation makes of it (a pilot, one seed).

The task: "say one digit three times ?" -> "d d d" with d uniform over 0-9 (10 equally likely answers, checked by a
verifier: the three digits agree). One denoiser call predicts each position's mean over the modes, so its argmaxes
can disagree ("9 7 9"); more steps commit to one mode. The script writes the data, trains the teacher
(configs/small-cpu.yaml at the demo's width 64, 800 steps), scores it over NFE, distils it with the `demo` preset
(PD, and the flow map) and scores the students; every step is skipped when its output folder exists (so a rerun
only scores).

    PYTHONPATH=src python benchmarks/measure_distill_repeat.py --out /tmp/repeat [--seed 0] [--nfes 2,3,5,16]
        [--score-only]   # score what is there: a PD run cut short is scored at its last finished round

The PD run is the slow part (its last round runs the teacher 64 times per row: docs/distill.md, "Cost").
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
from pathlib import Path

PROMPT = "say one digit three times ?"


def write_data(out: Path, seed: int, rows: int = 3000) -> Path:
    rng = random.Random(seed)
    path = out / "train.jsonl"
    if not path.is_file():
        lines = []
        for _ in range(rows):
            d = rng.randint(0, 9)
            lines.append(json.dumps({"prompt": PROMPT, "response": f"{d} {d} {d}\n#### {d}", "answer": str(d)}))
        path.write_text("\n".join(lines) + "\n")
    return path


def elfreg(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "elfreg", *argv], check=True)


def valid(text: str) -> bool:
    m = re.match(r"\s*(\d) (\d) (\d)\s*$", text.split("\n")[0])
    return bool(m and m.group(1) == m.group(2) == m.group(3))


def score(model: Path, nfes: list[int], problems: int = 100, **sampler) -> dict[int, tuple[float, int]]:
    """(share of valid answers, distinct digits among them) over ``problems`` samples (prompt indices
    0..problems-1, generation seed 0): validity alone would reward a model that always says "5 5 5"."""
    import torch

    from elfreg.pretrained import ElfModel

    torch.set_num_threads(1)
    m = ElfModel.from_pretrained(model)
    out = {}
    for nfe in nfes:
        texts = m.generate([PROMPT] * problems, nfe=nfe, seed=0, batch_size=50, **sampler)
        ok = [t for t in texts if valid(t)]
        out[nfe] = (len(ok) / problems, len({t.split()[0] for t in ok}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0, help="training seed of the teacher and the distillations")
    ap.add_argument("--nfes", default="2,3,5,16")
    ap.add_argument("--score-only", action="store_true", help="train and distil nothing; score the folders there")
    args = ap.parse_args()
    nfes = [int(x) for x in args.nfes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    data = write_data(args.out, args.seed)
    teacher = args.out / "teacher"
    if not args.score_only and not (teacher / "model" / "config.json").is_file():
        elfreg("train", "--config", "small-cpu", "--output", str(teacher), "model.max_prompt_len=14",
               "model.max_len=28", "model.width=64", "train.steps=800", "train.progress=false",
               f"train.seed={args.seed}",
               f"data.sources=[{{name: repeat, task: math, path: '{data}', format: jsonl, "
               "columns: {prompt: prompt, response: response, answer: answer}}]")
    rows = {"teacher, full-span uniform": score(teacher / "model", nfes, sampler="full-span", grid="uniform"),
            "teacher, early-stop": score(teacher / "model", nfes, sampler="early-stop")}
    for method in ("pd", "flowmap"):
        out = args.out / method
        if not args.score_only and not (out / "model" / "distill.json").is_file():
            elfreg("distill", "--teacher", str(teacher / "model"), "--output", str(out), "--config", "demo",
                   "--method", method, "--no-progress", f"train.seed={args.seed}")
        model = out / "model"
        if not model.is_dir():   # a PD run cut short: its last finished round's model
            done = sorted((p for p in out.glob("round-*") if (p / "summary.json").is_file()),
                          key=lambda p: int(p.name.split("-")[1]))
            if not done:
                continue
            model = done[-1] / "model"
        rows[f"{method} student {model.parent.name if model.parent != out else ''} (full-span uniform)"] = \
            score(model, nfes)
    print(f"valid answers of {PROMPT!r} (100 samples, generation seed 0, training seed {args.seed}); in brackets "
          "the distinct digits among them (of 10)")
    print("| model | " + " | ".join(f"NFE {n}" for n in nfes) + " |")
    print("|---|" + "---|" * len(nfes))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{100 * r[n][0]:.0f} % ({r[n][1]})" for n in nfes) + " |")


if __name__ == "__main__":
    main()
