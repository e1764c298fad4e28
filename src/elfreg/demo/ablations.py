"""``elfreg demo --ablations``: the ablation ladder at the demo's scale, decided over training seeds.

Each arm is a student of ``config.KINDS`` (ELF, REPA only, REG only, ELF-REG, one learnable token) with settings on
top of the demo's (``key=value`` overrides of DemoConfig), or an evaluation-only arm: another arm's models sampled
with the REG token left out. Every arm trains with the same training seeds, and a seed gives every arm the same
initial values of the parameters they share, the same data order and the same draws (noise, times, modes): the
arms differ in what they name and nothing else, so their differences are paired per seed. The runs are the
demo's own (``runs.train_run``, two lanes of one thread each), resumed from their checkpoints when asked again;
each model is then evaluated at early-stop, the main NFE, over the sampling seeds (``evaluation.evaluate``), and
the report compares every arm with ELF by the demo's claim rule (``claims.compare``: held or not held only beyond
two standard errors, paired over training seeds and test problems).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from elfreg.atomic import atomic_write_text
from elfreg.configtools import ConfigError, apply_overrides, from_dict, to_dict
from elfreg.demo.config import KINDS, DemoConfig
from elfreg.jsontext import dumps


@dataclass(frozen=True)
class Arm:
    """One rung of the ladder: ``name`` (its folder and row), the student ``kind`` (config.KINDS), settings on top
    of the demo's, or ``drop_reg_of``: no training, that arm's models sampled without the REG token."""

    name: str
    kind: str
    overrides: tuple[str, ...] = ()
    drop_reg_of: str | None = None
    what: str = ""

    @property
    def trains(self) -> bool:
        return self.drop_reg_of is None


# The spec's ablations that apply here, then the settings that might make REG pay at this scale (docs/demo.md,
# "What REG does here"): REPA against standardised teacher states, a REG weight that decays or is smaller, the
# paper's teacher layers as fractions of depth (its 20 and 24 of Qwen3-1.7B's 28 are about 21 and 26 of SmolLM2's
# 30), and the REG token mapped straight to the student width with an own head.
LADDER = (
    Arm("ELF", "ELF", what="the text loss alone"),
    Arm("REPA-only", "REPA-only", what="+ 0.5 L_REPA, no REG token"),
    Arm("REG-only", "REG-only", what="+ the REG token and 0.1 L_REG, no REPA"),
    Arm("ELF-REG", "ELF-REG", what="REPA + REG: the paper's method, the demo's ELF-REG"),
    Arm("ELF-REG-drop", "ELF-REG", drop_reg_of="ELF-REG", what="ELF-REG's models sampled without the REG token"),
    Arm("OLT", "OLT", what="REPA + one learnable token in REG's place"),
    Arm("REPA-std", "ELF-REG", ("backbones.standardize_teacher=true",),
        what="ELF-REG, REPA against standardised teacher states"),
    Arm("REG-decay", "ELF-REG", ("train.reg_weight_schedule=decay",),
        what="ELF-REG, the REG weight decaying linearly to 0"),
    Arm("REG-0.01", "ELF-REG", ("objective.reg_weight=0.01",), what="ELF-REG, REG weight 0.01"),
    Arm("paper-layers", "ELF-REG", ("backbones.teacher_repa_layer=21", "backbones.teacher_reg_layer=26"),
        what="ELF-REG, teacher layers at the paper's fractions of depth (REPA 21, REG 26 of 30)"),
    Arm("REG-direct", "ELF-REG", ("student.reg_io=direct",),
        what="ELF-REG, the REG token projected straight to the student width, with an own head"),
)
BASELINE = "ELF"
EVAL_FILE = "ladder_eval.json"  # in a run's folder: its evaluation, reused by a resumed ladder


def parse_arm(text: str) -> Arm:
    """An arm from ``--arm "NAME=KIND key=value ..."`` (KIND one of config.KINDS)."""
    head, *overrides = text.split()
    name, sep, kind = head.partition("=")
    if not sep or not name or kind not in KINDS:
        raise ConfigError(f"--arm: expected 'NAME=KIND key=value ...' with KIND one of {sorted(KINDS)}, got {text!r}")
    if not all(name_ok(c) for c in name):
        raise ConfigError(f"--arm: the name {name!r} may hold letters, digits, '.', '_' and '-' only (a folder)")
    return Arm(name, kind, tuple(overrides), what="; ".join(overrides) or kind)


def name_ok(c: str) -> bool:
    return c.isalnum() or c in "._-"


def select_arms(names: list[str] | None, extra: list[Arm] = ()) -> list[Arm]:
    """The arms to run: ``names`` from LADDER (default: all of it), then ``extra``; ELF always first (the baseline),
    and an evaluation-only arm brings the arm it samples."""
    known = {a.name: a for a in LADDER}
    for a in extra:
        if a.name in known:
            raise ConfigError(f"--arm: {a.name!r} is a built-in arm's name; choose another")
        known[a.name] = a
    chosen = list(names) if names else [a.name for a in LADDER]
    chosen += [a.name for a in extra if a.name not in chosen]
    for n in chosen:
        if n not in known:
            raise ConfigError(f"--arms: unknown arm {n!r}; choose from {sorted(known)}")
    for n in list(chosen):
        if known[n].drop_reg_of and known[n].drop_reg_of not in chosen:
            chosen.append(known[n].drop_reg_of)
    order = [BASELINE] + [n for n in chosen if n != BASELINE]
    return [known[n] for n in order]


def arm_config(cfg: DemoConfig, arm: Arm) -> DemoConfig:
    """The demo's settings with the arm's overrides (ConfigError naming the arm on a bad one)."""
    try:
        return from_dict(DemoConfig, apply_overrides(to_dict(cfg), list(arm.overrides)))
    except ConfigError as exc:
        raise ConfigError(f"arm {arm.name}: {exc}") from None


def eval_config(cfg: DemoConfig) -> DemoConfig:
    """The ladder's evaluation: early-stop at the main NFE over the sampling seeds (no other cell)."""
    ev = dataclasses.replace(cfg.eval, samplers=["early-stop"], nfes=[cfg.eval.main_nfe], adaptive_nfes=[])
    return dataclasses.replace(cfg, eval=ev)


def data_key(cfg: DemoConfig) -> str:
    """What a run's shared data depends on: the task, the backbones' layers (the cached features; their
    standardisation is the trainer's) and the canvas."""
    b = dataclasses.replace(cfg.backbones, standardize_teacher=False)
    return json.dumps([to_dict(cfg.task), dataclasses.asdict(b), cfg.student.canvas_len, cfg.student.max_prompt_len,
                       cfg.student.restrict_head], sort_keys=True)


# -- the runs, in this process or in the lanes' worker processes ------------------------------------------------------
_DATA: dict[str, object] = {}  # per process: DemoData by data_key (a worker prepares each once)


def arm_data(cfg: DemoConfig, cache_dir: str | None):
    """The shared data of an arm's settings (prepared once per process and data_key), with its backbone settings."""
    from elfreg.demo.prepare import backbone_config, prepare

    key = data_key(cfg)
    if key not in _DATA:
        _DATA[key] = prepare(cfg, cache_dir, progress=False)
    return dataclasses.replace(_DATA[key], bcfg=backbone_config(cfg))


def ladder_init(cache_dir: str | None, threads: int) -> None:
    """Worker initializer: its threads and cache folder; data is prepared on first use (``arm_data``)."""
    import torch
    from transformers.utils import logging as hf_logging

    from elfreg.demo.lanes import _WORKER

    hf_logging.disable_progress_bar()
    torch.set_num_threads(threads)
    _WORKER.update(cache_dir=cache_dir, lock=threading.Lock())


def train_arm_job(name: str, kind: str, seed: int, out: str, cfg_data: dict) -> dict:
    """Train (or resume) arm ``name``'s run of training seed ``seed`` in ``out``/<name>/seed-<seed>."""
    from elfreg.demo.lanes import _WORKER, QueueBar
    from elfreg.demo.runs import train_run

    cfg = from_dict(DemoConfig, cfg_data)
    data = arm_data(cfg, _WORKER.get("cache_dir"))
    queue = _WORKER.get("queue")
    res = train_run(data, cfg, kind, seed, Path(out) / name / f"seed-{seed}", _WORKER["stop"], _WORKER["lock"],
                    progress=False, on_steps=QueueBar(queue, "train").update if queue is not None else None)
    return {**res, "arm": name}


def evaluate_arm_job(model_dir: str, cfg_data: dict, drop_reg: bool) -> dict:
    """Evaluate the model in ``model_dir`` at the ladder's cell (``eval_config``); with ``drop_reg`` also without
    its REG token: {"eval": ..., "drop": ... or None}."""
    from elfreg.demo.evaluation import encode_test, evaluate
    from elfreg.demo.lanes import _WORKER
    from elfreg.pretrained import ElfModel

    cfg = eval_config(from_dict(DemoConfig, cfg_data))
    # a resumed ladder reuses the evaluation of a model it already evaluated with the same settings
    saved = Path(model_dir).parent / EVAL_FILE
    key = {"eval": to_dict(cfg.eval), "task": to_dict(cfg.task), "drop_reg": drop_reg,
           "model": hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()}
    if saved.is_file():
        old = json.loads(saved.read_text())
        if old.get("key") == json.loads(json.dumps(key)):
            return old["result"]
    data = arm_data(cfg, _WORKER.get("cache_dir"))

    class Nothing:
        def update(self, n: int = 1) -> None:
            pass

    model = ElfModel.from_pretrained(model_dir)
    model.attach_backbones(data.backbones)
    encoded = encode_test(model, data.test_rows)
    out = {"eval": evaluate(model, data.test_problems, data.test_rows, cfg, Nothing(), encoded), "drop": None}
    if drop_reg:
        out["drop"] = evaluate(model, data.test_problems, data.test_rows, cfg, Nothing(), encoded, drop_reg=True)
    atomic_write_text(saved, dumps({"key": key, "result": out}))
    return out


def jobs(arms: list[Arm], seeds: list[int]) -> list[tuple[Arm, int]]:
    """The training runs (arm, seed), seed-major: every arm of a seed before the next seed, so that a stopped
    ladder leaves complete pairs."""
    return [(a, s) for s in seeds for a in arms if a.trains]


def run_ladder(cfg: DemoConfig, out: str | Path, arms: list[Arm], cache_dir: str | Path | None = None,
               progress: bool = True) -> dict:
    """Train and evaluate every arm of ``arms`` over ``cfg.train.seeds`` into ``out`` (resuming), then write
    ``ladder.json`` and ``ladder.md``; returns the results."""
    from elfreg.demo.lanes import _WORKER, LanePool
    from elfreg.demo.prepare import prepare, with_training_precision
    from elfreg.demo.report import changed_settings
    from elfreg.demo.runs import run_fingerprint
    from elfreg.fingerprint import FOLDER_FILE, claim
    from elfreg.machine import machine_info
    from elfreg.train.checkpoint import list_checkpoints

    t0 = time.perf_counter()
    out = Path(out)
    settings = changed_settings(cfg)  # as asked, before the precision is resolved
    cfg, precision = with_training_precision(cfg)
    cfgs = {a.name: arm_config(cfg, a) for a in arms}
    todo = jobs(arms, cfg.train.seeds)
    for write in (False, True):  # every run folder checked before any is written
        for arm, seed in todo:
            run_dir = out / arm.name / f"seed-{seed}"
            claim(run_dir / FOLDER_FILE, run_fingerprint(cfgs[arm.name], arm.kind, seed),
                  [p for _, p in list_checkpoints(run_dir)], write=write, where=run_dir)
    out.mkdir(parents=True, exist_ok=True)
    cache = None if cache_dir is None else str(cache_dir)
    in_process = not (cfg.lanes > 1 and cfg.lane_mode == "processes")
    for key, first in {data_key(c): c for c in cfgs.values()}.items():  # build every feature cache once, here
        data = prepare(first, cache, progress=progress)
        if in_process:  # the runs use it here; worker processes load their own
            _DATA[key] = data
    dropped = {a.drop_reg_of for a in arms if a.drop_reg_of}
    print(f"elfreg demo --ablations: {len(todo)} training runs ({len({a.name for a, _ in todo})} arms x training "
          f"seeds {cfg.train.seeds}) of {cfg.train.steps} steps, {cfg.lanes} at a time; no --budget applies",
          flush=True)
    lane_threads = cfg.threads // cfg.lanes
    job_args = [(a.name, a.kind, s, str(out), to_dict(cfgs[a.name])) for a, s in todo]
    then = (evaluate_arm_job, lambda r: (r["model_dir"], to_dict(cfgs[r["arm"]]), r["arm"] in dropped))
    if not in_process:
        from tqdm.auto import tqdm

        with LanePool(cfg.lanes, ladder_init, (cache, lane_threads)) as pool, \
                tqdm(total=len(todo) * cfg.train.steps, desc="train", disable=not progress) as bar:
            done = pool.map(train_arm_job, job_args, then=then, bars={"train": bar})
    else:  # one lane in this process
        import torch

        torch.set_num_threads(lane_threads)
        _WORKER.update(cache_dir=cache, lock=threading.Lock(), stop=threading.Event())
        done = []
        for args in job_args:
            r = train_arm_job(*args)
            done.append((r, evaluate_arm_job(*then[1](r))))
    results = collect(arms, cfgs, todo, done, out)
    results.update(settings=settings, seeds=list(cfg.train.seeds), steps=cfg.train.steps,
                   main_nfe=cfg.eval.main_nfe, sampling_seeds=list(cfg.eval.seeds), test_problems=cfg.task.n_test,
                   machine=machine_info(cfg.threads, cfg.lanes, precision), seconds=time.perf_counter() - t0)
    atomic_write_text(out / "ladder.json", dumps(results, indent=2))
    atomic_write_text(out / "ladder.md", "\n".join(ladder_report(results, cfg)) + "\n")
    return results


# -- what the runs show ---------------------------------------------------------------------------------------------
def collect(arms: list[Arm], cfgs: dict, todo: list, done: list, out: Path) -> dict:
    """Every arm's runs (seed, curve, text loss, gradient shares) and its evaluation merged over training seeds."""
    from elfreg.demo.evaluation import merge_evals
    from elfreg.demo.runs import SUMMARY_KEYS

    arms_out: dict = {}
    for (arm, seed), (run, ev) in zip(todo, done):
        a = arms_out.setdefault(arm.name, {"kind": arm.kind, "what": arm.what, "overrides": list(arm.overrides),
                                           "runs": [], "evals": {}})
        a["runs"].append({"seed": seed, "steps": run["steps"], "curve": run["curve"], "model_dir": run["model_dir"],
                          "train_seconds": run["train_seconds"],
                          **{k: run.get(k) for k in SUMMARY_KEYS}})
        a["evals"][seed] = ev["eval"]
        for d in arms:
            if d.drop_reg_of == arm.name and ev["drop"] is not None:
                b = arms_out.setdefault(d.name, {"kind": d.kind, "what": d.what, "overrides": [],
                                                 "drop_reg_of": arm.name, "runs": [], "evals": {}})
                b["evals"][seed] = ev["drop"]
    for a in arms_out.values():
        a["eval"] = merge_evals(a.pop("evals"))
    return {"arms": {a.name: arms_out[a.name] for a in arms if a.name in arms_out}}


def seed_means(cell: dict) -> dict[int, float]:
    """{training seed: its accuracy, the mean over its sampling seeds}."""
    by: dict[int, list[float]] = {}
    for s, acc in zip(cell["train_seed"], cell["acc"]):
        by.setdefault(s, []).append(acc)
    return {s: statistics.fmean(v) for s, v in by.items()}


def fmt_mean_std(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    """``mean ± std`` (std over the values; none with one value)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    m = statistics.fmean(vals) * scale
    if len(vals) < 2:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {statistics.stdev(vals) * scale:.{digits}f}"


def arm_rows(results: dict) -> list[dict]:
    """Per arm: accuracy per training seed, its mean ± std, the paired difference to ELF with its interval and the
    claim rule's outcome, the text loss and the gradient shares."""
    from elfreg.demo.claims import compare

    arms = results["arms"]
    base = arms.get(BASELINE)
    rows = []
    for name, a in arms.items():
        cell = a["eval"]["cells"][0]
        per_seed = seed_means(cell)
        row = {"arm": name, "what": a["what"], "per_seed": per_seed, "acc": fmt_mean_std(list(per_seed.values()))}
        if base is not None and name != BASELINE:
            outcome, evidence, needed, note = compare(base["eval"]["cells"][0], cell, 1, results.get("test_problems"))
            row.update(outcome=outcome, evidence=evidence, seeds_needed=needed, note=note)
        for key in ("loss_elf", "grad_rel_repa", "grad_cos_repa", "grad_rel_reg", "grad_cos_reg"):
            vals = [r.get(key) for r in a["runs"] if r.get(key) is not None]
            if a.get("drop_reg_of"):
                row[key] = f"as {a['drop_reg_of']}"
            elif key == "loss_elf":
                row[key] = fmt_mean_std(vals, 1.0, 3)
            else:   # the mean over training seeds
                row[key] = f"{statistics.fmean(vals):+.2f}" if key.startswith("grad_cos") and vals else \
                    (f"{statistics.fmean(vals):.2f}" if vals else "—")
        rows.append(row)
    return rows


# The paper's ablation (GSM8K, B, epoch 6, 64 NFE: ELF 21.74, REPA only 24.56, REPA + REG 28.92, REG removed at
# inference 28.66, REPA + one learnable token 25.60) as claims: (text, arm a, arm b), "b above a".
PAPER_CLAIMS = (("REPA alone beats ELF (paper: 24.56 vs 21.74)", "ELF", "REPA-only"),
                ("REPA + REG beats REPA alone (paper: 28.92 vs 24.56)", "REPA-only", "ELF-REG"),
                ("REPA + REG beats ELF (paper: 28.92 vs 21.74)", "ELF", "ELF-REG"),
                ("REG beats one learnable token (paper: 28.92 vs 25.60)", "OLT", "ELF-REG"),
                ("ELF-REG without REG at inference still beats ELF (paper: 28.66 vs 21.74)", "ELF", "ELF-REG-drop"))


def ladder_claims(results: dict) -> list[tuple[str, str, str]]:
    """(claim, outcome, evidence) of the paper's ablation claims whose arms ran."""
    from elfreg.demo.claims import compare

    arms = results["arms"]
    out = []
    for text, a, b in PAPER_CLAIMS:
        if a in arms and b in arms:
            outcome, evidence, _, _ = compare(arms[a]["eval"]["cells"][0], arms[b]["eval"]["cells"][0], 1,
                                              results.get("test_problems"))
            out.append((text, outcome, evidence))
    return out


def ladder_table(results: dict) -> list[str]:
    """The ladder as a markdown table (one row per arm)."""
    lines = ["| arm | what | exact match %, mean ± std over training seeds | per training seed | vs ELF (paired, "
             "2 s.e.) | outcome | L_ELF, last 10 % | REPA grad / L_ELF's (cos) | REG grad / L_ELF's (cos) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in arm_rows(results):
        seeds = " / ".join(f"{100 * v:.1f}" for v in r["per_seed"].values())
        share = {k: (r[f"grad_rel_{k}"] if r[f"grad_rel_{k}"] == r[f"grad_cos_{k}"] else
                     f"{r[f'grad_rel_{k}']} ({r[f'grad_cos_{k}']})") for k in ("repa", "reg")}
        share = {k: "—" if v == "— (—)" else v for k, v in share.items()}
        lines.append(f"| {r['arm']} | {r['what']} | {r['acc']} | {seeds} | {r.get('evidence', 'baseline')} | "
                     f"{r.get('outcome', '')} | {r['loss_elf']} | {share['repa']} | {share['reg']} |")
    return lines


def ladder_report(results: dict, cfg: DemoConfig) -> list[str]:
    """ladder.md: what ran, the table, the paper's ablation claims at this scale."""
    from elfreg.demo.report import task_description

    seeds = results["seeds"]
    # what differs from the demo's defaults for every arm (a wider student, the harder preset...), seeds aside
    common = [o for o in results.get("settings", []) if not o.startswith("train.seeds=")]
    recipe = "the demo's student and recipe" + (f" with {', '.join(common)}" if common else "")
    lines = ["# elfreg demo: the ablation ladder", "",
             f"Task: {task_description(cfg)}, {cfg.task.n_train} training and {cfg.task.n_test} test problems. "
             f"Every arm: {recipe}, {results['steps']:,} steps, training seeds {seeds}; "
             "a training seed gives every arm the same data order, the same draws and the same initial values of "
             "the parameters they share. Accuracy: exact final answer, early-stop at "
             f"{results['main_nfe']} NFE, the EMA weights, mean over sampling seeds {results['sampling_seeds']}. "
             "The difference to ELF is paired over training seeds and test problems; it is held or not held only "
             "beyond two standard errors, else inconclusive. L_ELF: the text loss averaged over the last 10 % of "
             "the run (the same batches and draws in every arm). Gradient shares: each weighted auxiliary term's "
             "gradient at the student's blocks, its norm relative to L_ELF's and (in brackets) its cosine with it, "
             "averaged over the second half of the run.", ""]
    lines += ladder_table(results)
    claims = ladder_claims(results)
    if claims:
        lines += ["", "## The paper's ablation at this scale", "", "| claim | outcome | evidence |", "|---|---|---|"]
        lines += [f"| {c} | {o} | {e} |" for c, o, e in claims]
    m = results.get("machine", {})
    lines += ["", f"Took {results['seconds'] / 60:.1f} min; {m.get('threads_per_run', '?')} thread(s) per run, "
              f"precision {(m.get('precision') or {}).get('summary', '?')}. Raw results: ladder.json."]
    return lines
