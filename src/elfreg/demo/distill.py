"""``elfreg demo --distill``: few-step generation on a task where the teacher needs its steps (docs/distill.md,
"The distillation demo").

On the demo's own task the teacher is as good at NFE 2 as at 16, so distillation has nothing to show there. This
study uses a task where one network call is not enough: "say one digit three times ?" answered by "d d d", d
uniform over the ten digits, checked by a verifier (the three digits agree). One denoiser call predicts each
position's mixture over the ten answers and its argmaxes can disagree ("9 7 9"); more steps commit to one answer.

For each training seed: the teacher (``configs/small-cpu.yaml`` at the demo's width, on ``rows`` rows of the task),
its progressive distillation and its flow map (``configs/distill/demo.yaml``; the flow map gets as many optimiser
steps as PD's rounds together), then ``samples`` answers of every model at every NFE (full-span, uniform grid,
generation seed 0; sample i is noise key (i, 0) in every model, so the cells are paired). Every folder is kept and
skipped on a rerun: a cut run resumes where it stopped. The report (``distill.md``, ``distill.json``) gives each
cell's valid share as mean ± std over the training seeds, the distinct answers among the valid ones, and the
issue's targets judged by the demo's rule (``elfreg.demo.claims.compare``: the difference against twice its
standard error, paired over seeds and samples).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from elfreg.atomic import atomic_write_text
from elfreg.bounds import SEED, Range, check_ranges
from elfreg.configtools import apply_overrides, check, from_dict
from elfreg.demo.config import KINDS, VARIANTS
from elfreg.jsontext import dumps

PROMPT = "say one digit three times ?"
ANSWER = re.compile(r"\s*(\d) (\d) (\d)\s*$")
METHODS = ("pd", "flowmap")
NAMES = {"teacher": "teacher", "pd": "PD", "flowmap": "flow map"}
# the settings that make the models: a folder made under others is refused (seeds, methods, nfes and samples only
# add folders or scores)
MODEL_SETTINGS = ("rows", "teacher_steps", "width", "student", "teacher_config", "teacher_overrides", "pd_overrides",
                  "flowmap_overrides")
# the canvas of the task under SmolLM2's chat template: the prompt's tokens and prompt + "d d d\n#### d" + EOS
PROMPT_LEN, CANVAS_LEN = 14, 28
RESULTS, REPORT = "distill.json", "distill.md"


@dataclass
class DistillDemo:
    """Settings of the distillation study (``key=value`` overrides of ``elfreg demo --distill``)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])   # training seeds: teacher and distillations
    rows: int = 3000           # training rows of the task (data seed 0)
    teacher_steps: int = 800   # the teacher's optimiser steps (small-cpu's schedule)
    width: int = 64            # the teacher's width (the demo's student)
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    nfes: list[int] = field(default_factory=lambda: [2, 3, 5, 16])
    samples: int = 400         # answers per model and NFE (cheap: the paired units of every comparison)
    student: str = "ELF-REG"   # the teacher's kind: ELF-REG (the paper's) or ELF (no REPA, no REG)
    teacher_config: str = "small-cpu"   # the teacher's training config (a shipped name or a YAML file)
    teacher_overrides: list[str] = field(default_factory=list)   # more key=value for the teacher's run
    pd_overrides: list[str] = field(default_factory=list)        # more key=value for the PD run
    flowmap_overrides: list[str] = field(default_factory=list)   # more key=value for the flow-map run

    def __post_init__(self) -> None:
        check_ranges(self, {"rows": Range(32, 2 ** 24, integer=True),
                            "teacher_steps": Range(1, 2 ** 31, integer=True),
                            "width": Range(8, 4096, integer=True), "samples": Range(2, 2 ** 16, integer=True)})
        check(isinstance(self.seeds, list) and len(self.seeds) > 0 and len(set(self.seeds)) == len(self.seeds),
              "seeds", f"give distinct training seeds, e.g. [0, 1, 2]; got {self.seeds!r}")
        for s in self.seeds:
            SEED.check(s, "seeds")
        check(self.student in VARIANTS, "student", f"choose from {list(VARIANTS)}; got {self.student!r}")
        check(isinstance(self.methods, list) and len(self.methods) > 0 and set(self.methods) <= set(METHODS),
              "methods", f"choose from {list(METHODS)}; got {self.methods!r}")
        check(isinstance(self.nfes, list) and len(self.nfes) > 0 and 16 in self.nfes, "nfes",
              f"the NFEs to score, 16 among them (the teacher's reference point); got {self.nfes!r}")
        for n in self.nfes:
            check(isinstance(n, int) and not isinstance(n, bool) and 2 <= n <= 1024, "nfes",
                  f"{n!r}: an NFE is 2 .. 1024 (one denoiser call and the decoder's is NFE 2)")


def study_config(overrides: list[str]) -> DistillDemo:
    """The study's settings: defaults, then ``key=value`` overrides (ConfigError naming the key)."""
    return from_dict(DistillDemo, apply_overrides(asdict(DistillDemo()), list(overrides)))


def task_rows(rows: int, seed: int = 0) -> list[dict]:
    """``rows`` training rows of the task: the prompt, "d d d\\n#### d" and the answer d, d uniform over 0-9."""
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        d = rng.randint(0, 9)
        out.append({"prompt": PROMPT, "response": f"{d} {d} {d}\n#### {d}", "answer": str(d)})
    return out


def answer_digit(text: str) -> str | None:
    """The verifier: the digit when the answer's first line is three equal digits ("7 7 7"), else None."""
    m = ANSWER.match(text.split("\n")[0])
    return m.group(1) if m and m.group(1) == m.group(2) == m.group(3) else None


def claim_folder(out: Path, cfg: DistillDemo) -> None:
    """Record the settings that make the models in ``out``; a folder holding models made under other settings is
    refused in one line naming them (``elfreg.fingerprint.claim``; ``--restart`` moves it aside)."""
    from elfreg.fingerprint import claim

    settings = {k: getattr(cfg, k) for k in MODEL_SETTINGS}
    claim(out / "fingerprint.json", settings, sorted(out.glob("seed-*")), where=out, aside=[])


def write_data(out: Path, cfg: DistillDemo) -> Path:
    """The task's training file in ``out`` (written once; ``claim_folder`` keeps its row count)."""
    path = out / "train.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in task_rows(cfg.rows))
    if not path.is_file() or path.read_text() != text:
        atomic_write_text(path, text)
    return path


def teacher_settings(cfg: DistillDemo, seed: int, data: Path, cache: Path, progress: bool) -> list[str]:
    """``elfreg train --config <teacher_config>`` overrides of one seed's teacher."""
    return [f"model.max_prompt_len={PROMPT_LEN}", f"model.max_len={CANVAS_LEN}", f"model.width={cfg.width}",
            f"train.steps={cfg.teacher_steps}", "train.minutes=null", f"train.seed={seed}",
            f"train.progress={str(progress).lower()}",
            f"data.cache_dir={cache}",
            f"data.sources=[{{name: repeat, task: math, path: {json.dumps(str(data))}, format: jsonl, "
            "columns: {prompt: prompt, response: response, answer: answer}}]", *kind_settings(cfg.student),
            *cfg.teacher_overrides]


def kind_settings(kind: str) -> list[str]:
    """The teacher's kind (the demo's ``KINDS``: its extra token and REPA; the objective uses what the model has)
    as overrides of its training config."""
    extra, repa = KINDS[kind]
    return [f"model.extra_token={extra}", f"model.repa={str(repa).lower()}", f"objective.use_repa={str(repa).lower()}",
            f"objective.use_reg={str(extra == 'reg').lower()}"]


def distill_overrides(cfg: DistillDemo, method: str, seed: int, cache: Path, progress: bool) -> list[str]:
    """``elfreg distill --config demo`` overrides: the seed, and for the flow map the budget of PD's rounds together
    (as run here, ``pd_overrides`` included; its steps cost about a training step each, PD's late rounds several:
    docs/distill.md)."""
    from elfreg.configfiles import resolve_config
    from elfreg.distill import load_distill_config

    own = [f"train.seed={seed}", f"train.progress={str(progress).lower()}", f"data.cache_dir={cache}"]
    if method == "pd":
        return own + list(cfg.pd_overrides)
    pd = load_distill_config(resolve_config("distill/demo"), own + list(cfg.pd_overrides), method="pd").distill
    n = len(pd.rounds)
    budget = (f"distill.steps_per_round={n * pd.steps_per_round}" if pd.steps_per_round is not None else
              f"distill.epochs_per_round={n * pd.epochs_per_round}")
    return own + [budget] + list(cfg.flowmap_overrides)


def score(model_dir: Path, nfes: list[int], samples: int) -> dict[int, list[str | None]]:
    """Each NFE's verdicts of ``samples`` answers (the digit, or None for an invalid answer): full-span on the uniform
    grid, generation seed 0, sample i the noise key (i, 0)."""
    from elfreg.pretrained import ElfModel

    model = ElfModel.from_pretrained(model_dir)
    out = {}
    for nfe in nfes:
        texts = model.generate([PROMPT] * samples, sampler="full-span", grid="uniform", nfe=nfe, seed=0,
                               batch_size=50)
        out[nfe] = [answer_digit(t) for t in texts]
    return out


def scored(model_dir: Path, cfg: DistillDemo) -> dict[int, list[str | None]]:
    """``score`` kept beside the model (``scores.json``): a rerun reads it instead of sampling again."""
    path = model_dir.parent / "scores.json"
    key = {"nfes": cfg.nfes, "samples": cfg.samples, "sampler": "full-span", "grid": "uniform", "seed": 0}
    try:
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return {int(n): v for n, v in saved["verdicts"].items()}
    except (OSError, ValueError, AttributeError, KeyError):   # none yet, or unreadable: score again
        pass
    verdicts = score(model_dir, cfg.nfes, cfg.samples)
    atomic_write_text(path, dumps({"key": key, "verdicts": {str(n): v for n, v in verdicts.items()}}) + "\n")
    return verdicts


@contextlib.contextmanager
def timed(folder: Path, stage: str):
    """Add the wall seconds of the block to ``folder/seconds.json`` under ``stage`` (a resumed stage adds up)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        took = stage_seconds(folder)
        took[stage] = round(took.get(stage, 0.0) + time.perf_counter() - t0, 1)
        atomic_write_text(folder / "seconds.json", json.dumps(took) + "\n")


def stage_seconds(folder: Path) -> dict[str, float]:
    """The stages' wall seconds recorded in ``folder`` (``timed``)."""
    path = folder / "seconds.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def cell(per_seed: dict[int, list[str | None]]) -> dict:
    """A cell over training seeds in the demo's form (``claims.compare``): mean, std, per-seed accuracy, each
    sample's 0/1 per seed, and each seed's count of distinct answers among the valid ones."""
    seeds = sorted(per_seed)
    correct = [[int(v is not None) for v in per_seed[s]] for s in seeds]
    acc = [sum(c) / len(c) for c in correct]
    distinct = [len({v for v in per_seed[s] if v is not None}) for s in seeds]
    return {"mean": statistics.fmean(acc), "std": statistics.stdev(acc) if len(acc) > 1 else 0.0, "acc": acc,
            "correct": correct, "train_seed": seeds, "distinct": distinct}


def run_study(cfg: DistillDemo, out: str | Path, progress: bool = True, log=print) -> dict:
    """Train, distil and score every seed (each step skipped when done), then write distill.json and distill.md."""
    from elfreg.configfiles import resolve_config
    from elfreg.distill import distill, load_distill_config
    from elfreg.train.config import load_run_config
    from elfreg.train.trainer import train

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    claim_folder(out, cfg)
    data = write_data(out, cfg)
    cache = out / "feature-cache"
    models = ["teacher", *cfg.methods]
    verdicts: dict[str, dict[int, dict[int, list]]] = {m: {} for m in models}
    seconds: dict[str, dict[int, float]] = {m: {} for m in models}
    loaded: dict[bool, object] = {}

    def backbones(run):
        """The frozen networks of ``run``'s kind, loaded once for every run of the study (a load takes seconds)."""
        from elfreg.backbones import Backbones
        from elfreg.train.dist import init_distributed, resolve_device
        from elfreg.train.setup import need_teacher

        need = need_teacher(run)
        if need not in loaded:
            loaded[need] = Backbones(run.backbones, resolve_device(run.train.device, init_distributed()),
                                     need_teacher=need)
        return loaded[need]

    for seed in cfg.seeds:
        folder = out / f"seed-{seed}"
        teacher = folder / "teacher"
        paths = {"teacher": teacher / "model"}
        teacher_run = load_run_config(resolve_config(cfg.teacher_config),
                                      teacher_settings(cfg, seed, data, cache, progress))
        if not (teacher / "summary.json").is_file():
            log(f"seed {seed}: training the teacher ({cfg.teacher_steps} steps)")
            with timed(folder, "teacher"):
                train(teacher_run, teacher, backbones=backbones(teacher_run))
        for method in cfg.methods:
            target = folder / method
            paths[method] = target / "model"
            if not (paths[method] / "distill.json").is_file():
                log(f"seed {seed}: distilling the teacher by {method}")
                run = load_distill_config(resolve_config("distill/demo"),
                                          distill_overrides(cfg, method, seed, cache, progress),
                                          teacher=paths["teacher"], method=method)
                with timed(folder, method):
                    # the teacher's networks: its distillation needs the same encoder, and the REG teacher only
                    # where the teacher's training did
                    distill(paths["teacher"], target, run, backbones=backbones(teacher_run))
        took = stage_seconds(folder)
        for name in models:
            if name in took:
                seconds[name][seed] = took[name]
        for name in models:
            log(f"seed {seed}: scoring the {NAMES[name]} at NFE {', '.join(map(str, cfg.nfes))}")
            for nfe, v in scored(paths[name], cfg).items():
                verdicts[name].setdefault(nfe, {})[seed] = v
    results = {"settings": asdict(cfg), "prompt": PROMPT,
               "cells": {m: {str(n): cell(verdicts[m][n]) for n in cfg.nfes} for m in models},
               "seconds": {m: {str(s): round(v, 1) for s, v in seconds[m].items()} for m in models}}
    results["claims"] = [dict(zip(("claim", "outcome", "evidence", "seeds_needed", "note"), c))
                         for c in study_claims(results, cfg)]
    atomic_write_text(out / RESULTS, dumps(results, indent=1) + "\n")
    atomic_write_text(out / REPORT, "\n".join(report(results, cfg)) + "\n")
    return results



def study_claims(results: dict, cfg: DistillDemo) -> list[tuple]:
    """The issue's targets at this scale: (claim, outcome, evidence, seeds needed, note) each."""
    from elfreg.demo.claims import compare

    cells = results["cells"]
    lo = min(cfg.nfes)

    def at(model: str, nfe: int) -> dict | None:
        return cells.get(model, {}).get(str(nfe))

    rows = [(f"the teacher needs its steps: NFE 16 above NFE {lo}", at("teacher", lo), at("teacher", 16), 0.0)]
    for m in cfg.methods:
        rows.append((f"{NAMES[m]} at NFE {lo} within 3 points of the teacher at NFE 16", at("teacher", 16),
                     at(m, lo), -0.03))
    if set(METHODS) <= set(cfg.methods):
        rows.append((f"the flow map at NFE {lo} above PD at NFE {lo}", at("pd", lo), at("flowmap", lo), 0.0))
    return [(text, *compare(a, b, 1, None, against, units="answers", knob="samples")) for text, a, b, against in rows]


def fmt(c: dict) -> str:
    """``mean ± std % (distinct answers)``."""
    return f"{100 * c['mean']:.1f} ± {100 * c['std']:.1f} % ({statistics.fmean(c['distinct']):.1f})"


def report(results: dict, cfg: DistillDemo) -> list[str]:
    """distill.md: the table of valid answers, the targets, what each stage took."""
    seeds = ", ".join(map(str, cfg.seeds))
    lines = ["# Few-step generation where steps matter", "",
             f"Task: {PROMPT!r} -> \"d d d\" (ten equally valid answers; an answer is valid when its three digits "
             f"agree). Teacher: {cfg.student}, width {cfg.width}, {cfg.teacher_steps} steps on {cfg.rows} rows. "
             f"{len(cfg.seeds)} training seeds ({seeds}); per model and NFE {cfg.samples} answers, full-span "
             "sampler on the uniform grid, generation seed 0. Each cell: valid answers, mean ± std over the training "
             "seeds, and in brackets the distinct answers among the valid ones (of 10; a model that always says "
             "\"5 5 5\" is valid and useless). NFE 2 is one denoiser call and the decoder's.", "",
             "| model | " + " | ".join(f"NFE {n}" for n in cfg.nfes) + " |", "|---|" + "---|" * len(cfg.nfes)]
    for m, row in results["cells"].items():
        lines.append(f"| {NAMES[m]} | " + " | ".join(fmt(row[str(n)]) for n in cfg.nfes) + " |")
    lines += ["", "| target | outcome | evidence |", "|---|---|---|"]
    for c in results["claims"]:
        more = f" ({c['seeds_needed']} training seeds would decide it)" if c["seeds_needed"] else \
            (f" ({c['note']})" if c["note"] else "")
        lines.append(f"| {c['claim']} | {c['outcome']}{more} | {c['evidence']} |")
    lines += ["", "A target holds (or does not) only when the difference is beyond twice its standard error, paired "
              "over the training seeds and the samples; anything closer is inconclusive.", ""]
    took = [f"{NAMES[m]} {statistics.fmean(v.values()):.0f} s" for m, v in results["seconds"].items() if v]
    if took:
        lines.append("Wall time per seed, this run's stages (mean): " + ", ".join(took) + ".")
    return lines
