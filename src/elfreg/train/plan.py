"""A run's plan in the paper's units (spec §7): rows, tokens per row, overflow, epochs, steps, warm-up, budgets.

One home for the budget arithmetic. Each canvas holds one padded example, so a run's length is counted in
examples: ``steps = ceil(epochs × rows / global batch)`` (rows = the rows that fit the canvas). The ceiling is
the choice: the run sees at least ``epochs`` passes over its rows (the last step may take a few examples of the
next pass), and it reproduces the spec's GSM8K figure (12 × 2,404,028 / 512 = 56,344.4 → 56,345 steps). The
same rule places an epoch checkpoint (epoch 7.5 → step ceil(7.5 × rows / batch)) and an epoch warm-up.

Tokens are counted the paper's way: prompt + response + EOS of every row, never the EOS padding.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from elfreg.configtools import ConfigError


def _frac(x: float) -> Fraction:
    """Exact value of a decimal config number (7.5 stays 15/2; no binary rounding in the products)."""
    return Fraction(str(x))


def steps_for_epochs(epochs: float, rows: int, global_batch: int) -> int:
    """Optimiser steps that cover ``epochs`` passes over ``rows`` examples: ceil(epochs × rows / global_batch)."""
    if rows < 1:
        raise ValueError("no training row fits the canvas: cannot turn epochs into steps")
    return math.ceil(_frac(epochs) * rows / global_batch)


def warmup_for_epochs(epochs: float, rows: int, global_batch: int) -> int:
    """Warm-up steps of ``epochs`` passes, rounded to the nearest step (a warm-up has no 'at least' to keep)."""
    return int(_frac(epochs) * rows / global_batch + Fraction(1, 2))


@dataclass
class RowLengths:
    """Token counts of a data set's rows after the template: prompt and response (without the appended EOS)."""

    prompt: np.ndarray  # (rows_templated,) int
    response: np.ndarray  # (rows_templated,) int
    rows_read: int = 0  # rows the sources yielded (after their filters)
    bad_rows: int = 0  # rows the template rejected (data.on_bad_row: skip)

    def overflow(self, canvas_len: int, prompt_cap: int) -> tuple[np.ndarray, np.ndarray]:
        """(prompt over its cap, prompt + response + EOS over the canvas) masks, the canvas rule of elfreg.data."""
        too_long_prompt = self.prompt > prompt_cap
        return too_long_prompt, ~too_long_prompt & (self.prompt + self.response + 1 > canvas_len)

    def counts(self, canvas_len: int, prompt_cap: int) -> dict:
        """What a plan needs of the rows that fit: rows, overflow (prompt, canvas), tokens per epoch, max tokens."""
        prompt_over, canvas_over = self.overflow(canvas_len, prompt_cap)
        fits = ~(prompt_over | canvas_over)
        per_row = self.prompt[fits] + self.response[fits] + 1
        return dict(rows=int(fits.sum()), overflow=[int(prompt_over.sum()), int(canvas_over.sum())],
                    tokens_per_epoch=int(per_row.sum()), max_tokens=int(per_row.max()) if fits.any() else 0,
                    rows_read=self.rows_read, bad_rows=self.bad_rows, fit=self.fit())

    def fit(self) -> dict[str, int]:
        """The canvas these rows need (empty without rows): the longest prompt and row (prompt + response + EOS),
        and the same at the 99th percentile (what a cap that skips the longest 1 % needs)."""
        if not len(self.prompt):
            return {}
        rows = self.prompt + self.response + 1
        p99 = lambda a: int(np.percentile(a, 99, method="higher"))  # noqa: E731 - a length some row has
        return {"prompt_max": int(self.prompt.max()), "row_max": int(rows.max()), "prompt_p99": p99(self.prompt),
                "row_p99": p99(rows)}


def count_lengths(examples: Iterable[dict], task: str, tokenizer: Any, add_special_tokens: bool = False,
                  on_bad_row: str = "error", batch_size: int = 1024) -> RowLengths:
    """Tokenise every example's templated prompt and response (in batches) and keep only their lengths.

    Tokenised exactly as ``build_canvas`` does (prompt and response apart, no special tokens on the response), so
    the lengths and the overflow they imply are those of the run; no features, no canvases are built.
    """
    from elfreg.data.sources import BadRowError
    from elfreg.tasks.formats import apply_template

    prompt_n: list[int] = []
    response_n: list[int] = []
    rows_read = bad = 0
    prompts: list[str] = []
    responses: list[str] = []

    def flush() -> None:
        if prompts:
            prompt_n.extend(len(ids) for ids in tokenizer(prompts, add_special_tokens=add_special_tokens)["input_ids"])
            response_n.extend(len(ids) for ids in tokenizer(responses, add_special_tokens=False)["input_ids"])
            prompts.clear()
            responses.clear()

    for example in examples:
        rows_read += 1
        try:
            p, r = apply_template(example, task)
        except BadRowError:
            if on_bad_row == "error":
                raise
            bad += 1
            continue
        prompts.append(p)
        responses.append(r)
        if len(prompts) >= batch_size:
            flush()
    flush()
    return RowLengths(np.asarray(prompt_n, dtype=np.int64), np.asarray(response_n, dtype=np.int64), rows_read, bad)


def init_source(path: str | Path) -> tuple[Path | None, Path]:
    """(checkpoint folder or None, model folder) of ``train.init_from``: a checkpoint (``ckpt-N``, or an
    ``epoch-7.5`` link to one) holds the online weights, the optimiser state and ``model/`` (the EMA weights and
    statistics); a model folder holds the EMA weights and statistics only."""
    p = Path(path)
    if (p / "model" / "config.json").is_file():
        return p, p / "model"
    if (p / "config.json").is_file():
        return None, p
    raise FileNotFoundError(f"train.init_from: {p} is neither a checkpoint (ckpt-N or epoch-E, with model/ and "
                            "weights.safetensors) nor a model folder (config.json)")


def check_init(tc, ckpt: Path | None, where: Path) -> None:
    """What ``train.init_weights`` / ``train.init_optimizer`` need is in the start folder (errors name the field)."""
    if ckpt is None and tc.init_weights == "online":
        raise ConfigError(f"train.init_weights: 'online' needs a checkpoint with the trained weights; {where} is a "
                          "model folder (EMA weights only): point train.init_from at the run's ckpt-N / epoch-E "
                          "folder, or set train.init_weights=ema")
    if ckpt is None and tc.init_optimizer == "continue":
        raise ConfigError(f"train.init_optimizer: 'continue' needs a checkpoint with the optimiser state; {where} "
                          "is a model folder: point train.init_from at the run's ckpt-N / epoch-E folder, or set "
                          "train.init_optimizer=fresh")


def start_of(cfg) -> dict | None:
    """The run's start, for the plan: where from, which weights, whether the optimiser continues, and whether the
    folder is there yet (a MATH run is usually planned before its GSM8K run has reached epoch 7.5)."""
    tc = cfg.train
    if not tc.init_from:
        return None
    try:
        ckpt, _ = init_source(tc.init_from)
        present = "checkpoint" if ckpt is not None else "model folder"
        check_init(tc, ckpt, Path(tc.init_from))
    except FileNotFoundError:
        present = "not there yet"
    return {"from": tc.init_from, "weights": tc.init_weights, "optimizer": tc.init_optimizer, "found": present}


@dataclass
class TrainPlan:
    """What a run will do, computed before it starts (printed by ``elfreg train --dry-run``, saved as plan.json)."""

    rows_read: int  # rows the sources yielded
    rows: int  # rows that fit the canvas (one epoch)
    bad_rows: int
    overflow_prompt: int  # rows skipped: prompt over its cap
    overflow_canvas: int  # rows skipped: prompt + response + EOS over the canvas
    overflow_fraction: float  # skipped / (fitting + skipped)
    mean_tokens: float  # prompt + response + EOS per fitting row
    max_tokens: int
    tokens_per_epoch: int
    global_batch: int
    epochs: float  # of the run (steps × global batch / rows when the budget is in steps)
    steps: int
    tokens: int  # tokens the run trains on: tokens_per_epoch × steps × global batch / rows
    warmup_steps: int
    warmup_fraction: float
    epoch_steps: dict[str, int] = field(default_factory=dict)  # kept epoch checkpoint -> its step
    paper: dict | None = None  # the preset's paper budget (RunConfig.paper), printed side by side
    ema_decay: float = 0.0
    start: dict | None = None  # train.init_from and what continues from it (start_of)
    compare_steps: dict[str, int] = field(default_factory=dict)  # epochs where the paper compares -> their step
    fit: dict[str, int] | None = None  # the canvas the rows need (RowLengths.fit), when the rows were counted
    minutes: float | None = None  # train.minutes: ``steps`` is then the most the run trains (elfreg.train.budget)

    @property
    def overflow(self) -> int:
        return self.overflow_prompt + self.overflow_canvas

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "TrainPlan":
        return cls(**json.loads(text))


def epoch_key(e: float) -> str:
    """Name of an epoch checkpoint: 6 -> '6', 7.5 -> '7.5'."""
    return f"{float(e):g}"


def make_plan(cfg, lengths: RowLengths | None = None, rows: int | None = None, overflow: tuple[int, int] = (0, 0),
              tokens_per_epoch: int | None = None, max_tokens: int | None = None, fit: dict | None = None) -> TrainPlan:
    """The plan of RunConfig ``cfg`` from its rows' lengths (or, for pre-built features, their counts).

    Errors before any work: neither steps nor epochs, an epoch checkpoint beyond the run, overflow over
    ``canvas.max_overflow_fraction``.
    """
    tc = cfg.train
    gb = tc.batch_size * tc.grad_accum
    bad, rows_read = 0, None
    if lengths is not None:
        c = lengths.counts(cfg.model.max_len, cfg.model.max_prompt_len)
        rows, overflow = c["rows"], tuple(c["overflow"])
        tokens_per_epoch, max_tokens = c["tokens_per_epoch"], c["max_tokens"]
        bad, rows_read, fit = c["bad_rows"], c["rows_read"], c["fit"]
    if rows is None or tokens_per_epoch is None:
        raise ValueError("make_plan: give the row lengths, or rows and tokens_per_epoch")
    skipped = sum(overflow)
    frac = skipped / (rows + skipped) if rows + skipped else 0.0
    check_overflow(cfg, skipped, rows + skipped, fit)
    if tc.epochs is not None:
        steps = steps_for_epochs(tc.epochs, rows, gb)
        epochs = float(tc.epochs)
    elif tc.steps is not None:
        steps = tc.steps
        epochs = steps * gb / rows if rows else 0.0
    else:
        raise ConfigError("train: set train.steps or train.epochs (the run's length)")
    if tc.warmup_epochs is not None:
        warmup = warmup_for_epochs(tc.warmup_epochs, rows, gb)
    else:
        warmup = tc.warmup_steps or 0
    epoch_steps = {}
    for e in tc.keep_epochs:
        s = steps_for_epochs(e, rows, gb)
        if s > steps:
            raise ConfigError(f"train.keep_epochs: epoch {epoch_key(e)} (step {s}) is beyond the run's "
                              f"{steps} steps ({epochs:g} epochs of {rows} rows at global batch {gb})")
        epoch_steps[epoch_key(e)] = s
    run_tokens = int(round(tokens_per_epoch * steps * gb / rows)) if rows else 0
    paper = None
    compare_steps = {}
    if cfg.paper is not None:
        from elfreg.configtools import to_dict

        paper = to_dict(cfg.paper)
        compare_steps = {epoch_key(c["epoch"]): steps_for_epochs(c["epoch"], rows, gb) for c in cfg.paper.compare}
    return TrainPlan(rows_read=rows_read if rows_read is not None else rows + skipped + bad, rows=rows,
                     bad_rows=bad, overflow_prompt=overflow[0], overflow_canvas=overflow[1],
                     overflow_fraction=frac, mean_tokens=tokens_per_epoch / rows if rows else 0.0,
                     max_tokens=max_tokens or 0, tokens_per_epoch=tokens_per_epoch, global_batch=gb,
                     epochs=epochs, steps=steps, tokens=run_tokens, warmup_steps=warmup,
                     warmup_fraction=warmup / steps if steps else 0.0, epoch_steps=epoch_steps, paper=paper,
                     ema_decay=tc.ema_decay, start=start_of(cfg), compare_steps=compare_steps, fit=fit or None,
                     minutes=tc.minutes)


class SourcesUnreachable(OSError):
    """The plan needs the Hugging Face hub and the hub cannot be reached; the message names each source and how to
    point it at a local copy."""


def _hub_tokenizer_cached(name: str, gguf_file: str | None, revision: str | None) -> bool:
    from elfreg.backbones import load_tokenizer

    try:
        load_tokenizer(name, gguf_file, revision, local_files_only=True)
        return True
    except (OSError, ValueError):
        return False


def check_sources(cfg, probe=None) -> bool:
    """Fail fast when the plan reads from an unreachable Hugging Face hub; returns True when the hub is unreachable
    but everything the plan needs is local (so the tokenizer is read from the cache only, without retries).

    The plan reads the encoder's tokenizer (``backbones.encoder``) and every data source; a hub id is remote unless
    it is a local folder, and a hub tokenizer already in the local cache needs no network. ``probe`` (default
    :func:`elfreg.hubaccess.hub_unreachable`) returns why the hub is unreachable, or None.
    """
    import os

    b = cfg.backbones
    from elfreg.backbone_source import looks_local

    encoder_remote = not looks_local(os.path.expanduser(b.encoder))  # a missing local path: the tokenizer's load says
    data_remote = [(i, s) for i, s in enumerate(cfg.data.sources)
                   if s.get("hub_id") is not None and not os.path.isdir(os.path.expanduser(str(s["hub_id"])))]
    if not encoder_remote and not data_remote:
        return False
    if probe is None:
        from elfreg.hubaccess import hub_unreachable as probe
    why = probe()
    if why is None:
        return False
    needs = []
    if encoder_remote and not _hub_tokenizer_cached(b.encoder, b.encoder_gguf_file, b.revision):
        needs.append(f"  - backbones.encoder = {b.encoder} (its tokenizer; not in the local Hugging Face cache): "
                     f"download it where the hub is reachable (`hf download {b.encoder} --local-dir DIR`) and pass "
                     "backbones.encoder=DIR")
    for i, s in data_remote:
        needs.append(f"  - data.sources[{i}] ({s.get('name')}) = hub dataset {s['hub_id']} (streamed): save a local "
                     f"copy where the hub is reachable (`hf download --repo-type dataset {s['hub_id']} --local-dir "
                     "DIR`, or datasets' save_to_disk) and, in a copy of this config, give the source `path: DIR` "
                     "(a JSONL/Parquet file, folder or glob; `format: disk` for save_to_disk) in place of `hub_id`")
    if needs:
        raise SourcesUnreachable(f"the Hugging Face hub is unreachable ({why}) and this plan reads from it:\n"
                                 + "\n".join(needs))
    return True


def check_overflow(cfg, skipped: int, seen: int, fit: dict | None = None) -> None:
    """ValueError when the skipped share of the rows seen is over canvas.max_overflow_fraction; with the rows'
    ``fit`` (RowLengths.fit) it gives the canvas that would hold them."""
    bound = cfg.canvas.max_overflow_fraction
    if seen and skipped / seen > bound:
        need = (f"; these rows need model.max_prompt_len={fit['prompt_max']} model.max_len={fit['row_max']} "
                f"(all of them; {fit['prompt_p99']} and {fit['row_p99']} hold 99 %)" if fit else "")
        raise ValueError(f"canvas.max_overflow_fraction: {skipped} of {seen} rows ({skipped / seen:.2%}) do not fit "
                         f"the canvas (max_len {cfg.model.max_len}, max_prompt_len {cfg.model.max_prompt_len}), "
                         f"over the bound {bound:.2%}{need}; check the canvas size, the tokenizer and the data, or "
                         "raise the bound")


def _num(x: float) -> str:
    return f"{x / 1e9:.3f}B" if x >= 1e8 else f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x:,.0f}"


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%" if x >= 1e-4 else f"{100 * x:.1e}%"


def format_plan(plan: TrainPlan) -> str:
    """The plan as a table, the paper's budget side by side when the config names it."""
    p = plan.paper or {}
    paper_tokens = p.get("tokens")
    own = per_epoch = None
    if paper_tokens is not None:
        own = paper_tokens - (p.get("init_tokens") or 0)
        per_epoch = own / (p.get("tokens_epochs") or p["epochs"]) if p.get("epochs") else None
    paper_run_tokens = per_epoch * p["epochs"] if per_epoch is not None else None
    if paper_run_tokens is None:
        tokens_note = ""
    elif p.get("tokens_epochs") and p["tokens_epochs"] != p["epochs"]:
        tokens_note = (f"{_num(paper_run_tokens)} ({_num(own)} over {p['tokens_epochs']:g} epochs, the paper's "
                       f"token figure, scaled to {p['epochs']:g})")
    else:
        tokens_note = _num(paper_run_tokens) + (f" (+{_num(p['init_tokens'])} of the init = {_num(paper_tokens)})"
                                                 if p.get("init_tokens") else "")
    at_most = "at most " if plan.minutes else ""
    rows = [
        ("rows read", f"{plan.rows_read:,}", ""),
        ("rows that fit (one epoch)", f"{plan.rows:,}", f"{p['rows']:,}" if p.get("rows") else ""),
        ("overflow skipped", f"{plan.overflow:,} ({plan.overflow_fraction:.2%}: prompt {plan.overflow_prompt:,}, "
                             f"canvas {plan.overflow_canvas:,})", ""),
        ("template-rejected rows", f"{plan.bad_rows:,}", ""),
        ("tokens per row (mean / max)", f"{plan.mean_tokens:.1f} / {plan.max_tokens:,}",
         f"{per_epoch / p['rows']:.1f} (mean)" if per_epoch and p.get("rows") else ""),
    ]
    if plan.fit:
        f = plan.fit
        rows.append(("canvas the rows need (all / 99 %)", f"max_prompt_len {f['prompt_max']} / {f['prompt_p99']}, "
                                                          f"max_len {f['row_max']} / {f['row_p99']}", ""))
    rows += [
        ("tokens per epoch", _num(plan.tokens_per_epoch), _num(per_epoch) if per_epoch else ""),
        ("epochs", f"{at_most}{plan.epochs:g}", f"{p['epochs']:g}" if p.get("epochs") else ""),
        ("global batch", f"{plan.global_batch:,}", f"{p['global_batch']:,}" if p.get("global_batch") else ""),
        ("optimiser steps", f"{at_most}{plan.steps:,}" + (f" (as many as fit {plan.minutes:g} minutes: train.minutes)"
                                                          if plan.minutes else ""), ""),
        ("tokens (prompt + response + EOS, no padding)", at_most + _num(plan.tokens), tokens_note),
        ("warm-up", f"{plan.warmup_steps:,} step{'' if plan.warmup_steps == 1 else 's'} "
                    f"({plan.warmup_fraction:.2%} of the run)", ""),
    ]
    if plan.ema_decay:
        # the weight the EMA still gives its starting point after the run: decay^steps (the random initialisation,
        # or the start's EMA when the run continues one)
        rows.append(("EMA decay (start's share at the end)", f"{plan.ema_decay:g} "
                     f"({_pct(plan.ema_decay ** plan.steps)} after {plan.steps:,} steps)",
                     f"{p['ema_decay']:g}" if p.get("ema_decay") else ""))
    if plan.start:
        s = plan.start
        rows.append(("starts from", f"{s['from']} ({s['found']})", p.get("start", "")))
        rows.append(("  weights / optimiser state / EMA",
                     f"{s['weights']} / {'continued' if s['optimizer'] == 'continue' else 'fresh'} / continued",
                     "not stated" if p.get("start") else ""))
    for e, st in plan.epoch_steps.items():
        rows.append((f"checkpoint kept at epoch {e}", f"step {st:,}", ""))
    notes = {epoch_key(c["epoch"]): c["note"] for c in p.get("compare", [])}
    for e, st in plan.compare_steps.items():
        kept = (" (the run's end)" if float(e) == plan.epochs else " (kept)" if e in plan.epoch_steps
                else " (not kept: add it to train.keep_epochs)")
        rows.append((f"paper compares at epoch {e}", f"step {st:,}{kept}", notes.get(e, "")))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    head = f"{'':<{w0}}  {'this run':<{w1}}  paper"
    lines = [head, "-" * len(head)] + [f"{a:<{w0}}  {b:<{w1}}  {c}".rstrip() for a, b, c in rows]
    if p.get("source"):
        lines.append(f"paper figures: {p['source']}")
    return "\n".join(lines)
