"""Before a run's first step: its data stream, its plan from the counted rows (``elfreg train --dry-run`` stops
there), and the backbones' widths checked against the model's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from elfreg.train.config import RunConfig
from elfreg.train.plan import TrainPlan, count_lengths, make_plan


def run_stream(cfg: RunConfig, rank: int = 0, world: int = 1, epochs: int | None | str = "cfg"):
    """The run's ExampleStream (``{shared}`` in a path is $ELFREG_SHARED, else ../shared), without the rows a
    held-out data.validation fraction takes."""
    from elfreg.data import ExampleStream

    d = cfg.data
    if not d.sources:
        raise ValueError("data.sources is empty: name at least one source, e.g. \"data.sources=[{name: mine, task: "
                         "math, path: mydata.jsonl, format: jsonl, columns: {prompt: question, response: answer}}]\" "
                         "(docs/training.md, \"Train on your JSONL\"; docs/data.md)")
    specs = d.source_specs(shared_folder())
    holdout = (d.validation, "train") if isinstance(d.validation, float) else None
    return ExampleStream(specs, cfg.train.seed, d.shuffle_buffer, d.epochs if epochs == "cfg" else epochs, rank, world,
                         holdout)


def shared_folder() -> str:
    """$ELFREG_SHARED, else ../shared: what ``{shared}`` in a source path stands for."""
    import os

    return os.environ.get("ELFREG_SHARED") or str(Path.cwd().parent / "shared")


def validation_rows(cfg: RunConfig) -> list[dict]:
    """The rows of data.validation: the held-out fraction of the sources (``elfreg.data.stream.held_out``), or its
    file read as the first source (format and columns); [] when there is none."""
    from elfreg.data import ExampleStream, SourceSpec

    d = cfg.data
    if d.validation is None:
        return []
    if not d.sources:
        raise ValueError("data.validation needs data.sources (a held-out fraction of them, or a file read as the "
                         "first of them)")
    specs = d.source_specs(shared_folder())
    holdout = None
    if isinstance(d.validation, float):
        holdout = (d.validation, "validation")
    else:
        path = Path(d.validation)
        if not path.exists():
            raise FileNotFoundError(f"data.validation: {path}: no such file")
        first = specs[0]
        specs = [SourceSpec(name="validation", task=first.task, path=str(path), format=first.format,
                            columns=first.columns, filters=first.filters, on_bad_row=first.on_bad_row)]
    try:
        rows = list(ExampleStream(specs, 0, 1, 1, holdout=holdout))
    except ValueError as exc:
        raise ValueError(f"data.validation: {exc}") from None
    return rows


def restrict_head(cfg: RunConfig, tokenizer) -> RunConfig:
    """``cfg`` with model.head_token_ids set by train.head_vocab: ``responses``: the training rows' response tokens
    and EOS (one tokenizer pass over one epoch of the data, elfreg.data.vocab); ``full``: as given."""
    if cfg.train.head_vocab == "full":
        return cfg
    from elfreg.data.vocab import head_token_ids

    d = cfg.data
    stream = run_stream(dataclasses.replace(cfg, data=dataclasses.replace(d, shuffle_buffer=1)), epochs=1)
    ids = head_token_ids(tokenizer, good_rows(stream, d.task, d.on_bad_row), d.task)
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, head_token_ids=ids))


def good_rows(rows, task: str, on_bad_row: str):
    """The rows the template accepts; a bad one raises, or is left out under data.on_bad_row: skip."""
    from elfreg.data import BadRowError, apply_template

    for r in rows:
        try:
            apply_template(r, task)
        except BadRowError:
            if on_bad_row == "error":
                raise
            continue
        yield r


def count_rows(cfg: RunConfig, tokenizer) -> dict:
    """One pass over the run's data (one epoch, no shuffle buffer): the token counts the plan needs."""
    d = cfg.data
    stream = run_stream(dataclasses.replace(cfg, data=dataclasses.replace(d, shuffle_buffer=1)), epochs=1)
    lengths = count_lengths(stream, d.task, tokenizer, cfg.canvas.add_special_tokens, d.on_bad_row)
    return lengths.counts(cfg.model.max_len, cfg.model.max_prompt_len)


def plan_from_counts(cfg: RunConfig, counts: dict) -> TrainPlan:
    """make_plan from count_rows' (or a feature cache's) counts."""
    plan = make_plan(cfg, rows=counts["rows"], overflow=tuple(counts["overflow"]),
                     tokens_per_epoch=counts["tokens_per_epoch"], max_tokens=counts["max_tokens"], fit=counts.get("fit"))
    plan.rows_read, plan.bad_rows = counts.get("rows_read", plan.rows_read), counts.get("bad_rows", 0)
    return plan


def plan_run(cfg: RunConfig, tokenizer=None) -> TrainPlan:
    """The plan of a run without training (``elfreg train --dry-run``): only the tokenizer is loaded."""
    if tokenizer is None:
        from elfreg.backbones import load_tokenizer
        from elfreg.train.plan import check_sources

        b = cfg.backbones
        offline = check_sources(cfg)  # an unreachable hub fails here, naming each source, not after ~40 s of retries
        tokenizer = load_tokenizer(b.encoder, b.encoder_gguf_file, b.revision, local_files_only=offline)
    return plan_from_counts(cfg, count_rows(cfg, tokenizer))


def match_backbones(cfg: RunConfig, backbones) -> RunConfig:
    """Set model widths and vocab size from the loaded backbones (train.match_backbones)."""
    m = cfg.model
    changes = dict(feature_dim=backbones.feature_dim, vocab_size=len(backbones.tokenizer))
    if backbones.teacher_dim is not None:
        changes.update(teacher_dim=backbones.teacher_dim, reg_dim=backbones.teacher_dim)
    return dataclasses.replace(cfg, model=dataclasses.replace(m, **changes))


def check_backbones(cfg: RunConfig, backbones) -> None:
    """Model widths must equal the backbones' (errors name the field)."""
    from elfreg.configtools import check

    check(cfg.model.feature_dim == backbones.feature_dim, "model.feature_dim",
          f"{cfg.model.feature_dim} != encoder width {backbones.feature_dim}")
    check(cfg.model.vocab_size >= len(backbones.tokenizer), "model.vocab_size",
          f"{cfg.model.vocab_size} < len(tokenizer) = {len(backbones.tokenizer)}")
    if backbones.teacher_dim is not None and cfg.model.repa:
        check(cfg.model.teacher_dim == backbones.teacher_dim, "model.teacher_dim",
              f"{cfg.model.teacher_dim} != teacher width {backbones.teacher_dim}")
    if backbones.teacher_dim is not None and cfg.model.extra_token == "reg":
        check(cfg.model.reg_dim == backbones.teacher_dim, "model.reg_dim",
              f"{cfg.model.reg_dim} != teacher width {backbones.teacher_dim}")


def need_teacher(cfg: RunConfig) -> bool:
    """Whether the run loads the teacher: it has one, and REPA or the REG token uses it."""
    return cfg.backbones.teacher is not None and (cfg.objective.use_repa or cfg.objective.use_reg
                                                  or cfg.model.extra_token == "reg")
