"""A resumable, optionally sharded generation run: prompts file -> results JSONL (spec §5, §6)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from tqdm import tqdm

from elfreg.fingerprint import claim, file_digest, model_identity, note
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.pipeline import GenerationPipeline
from elfreg.sampling.results_io import AppendWriter, done_keys, read_records, record_key, repair_truncated_tail


@dataclass
class PromptFile:
    """Prompts read from a JSONL file, with the file line of each (for error messages)."""

    prompts: list[str]
    lines: list[int]
    ids: list[Any]
    source: str


def iter_prompt_records(path: str | os.PathLike, field: str = "prompt"):
    """Yield (line number, object) for each non-blank line holding an object with a string ``field``.

    Errors name the file and line (missing file, bad JSON, missing field); an empty file is an error too.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"prompts file {p} does not exist")
    found = False
    for n, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
            raise ValueError(f"{p}:{n}: expected an object with a string field {field!r}")
        found = True
        yield n, obj
    if not found:
        raise ValueError(f"{p}: prompts file is empty (no JSON lines with a {field!r} field)")


def read_prompts(path: str | os.PathLike, field: str = "prompt") -> PromptFile:
    """Read {field: str, optional id} objects, one per line; blank lines skipped; errors name file and line."""
    prompts, lines, ids = [], [], []
    for n, obj in iter_prompt_records(path, field):
        prompts.append(obj[field])
        lines.append(n)
        ids.append(obj.get("id"))
    return PromptFile(prompts, lines, ids, str(Path(path)))


def part_path(out: Path, rank: int) -> Path:
    """Per-rank part file beside the output: out.rank{r}.jsonl."""
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix or '.jsonl'}")


def _parts(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f"{out.stem}.rank*{out.suffix or '.jsonl'}"))


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()


def fingerprint_path(out: Path) -> Path:
    """The fingerprint file of a results file: ``<stem>.fingerprint.json`` beside it."""
    return out.with_name(f"{out.stem}.fingerprint.json")


def generation_settings(args: Any, cfg: SamplerConfig) -> dict:
    """What changes the samples of `elfreg generate`: the model, the prompts file's bytes, every sampler setting
    (``sigma``: as given, None = the model's), --precision. Not --samples (noise is f(seed, prompt, sample): more
    samples extend a run), batch size, device or progress (outputs are batch-invariant). What --precision auto
    chose is a note beside these (``note_results_file``), as the device: each record carries it too."""
    return {"model": model_identity(args.model), "prompts": file_digest(args.prompts),
            "prompt_field": args.prompt_field, "prompt_format": getattr(args, "prompt_format", "template"),
            **dataclasses.asdict(cfg), "sigma": args.sigma, "precision": getattr(args, "precision", "auto")}


def claim_results_file(args: Any, cfg: SamplerConfig) -> None:
    """Refuse an --out made with other settings (RunMismatch naming them); ``args.restart`` moves it, its part
    files and its fingerprint aside first."""
    out = Path(args.out)
    existing = [out, *_parts(out)]
    claim(fingerprint_path(out), generation_settings(args, cfg), existing, getattr(args, "restart", False),
          aside=[*existing, fingerprint_path(out)])


def note_results_file(args: Any, facts: dict) -> None:
    """Record measured facts of this run (the precision used, the bf16 / fp32 time ratio) in --out's fingerprint."""
    note(fingerprint_path(Path(args.out)), facts)


def generate_to_file(pipeline: GenerationPipeline, prompts: PromptFile, out: str | os.PathLike, samples: int,
                     rank: int = 0, world: int = 1, progress: bool = True) -> int:
    """Generate every missing (prompt, sample) into out; prompts are sharded i % world == rank.

    Each rank appends to its own part file (world > 1) or straight to out (world == 1); existing keys
    in out and in any part file are skipped, so a killed run resumes without repeats or losses. At
    the end rank 0 appends the parts' records missing from out, sorted by key, and removes the parts.
    Returns the number of samples this rank generated.
    """
    out = Path(out)
    target = part_path(out, rank) if world > 1 else out
    if rank == 0:
        repair_truncated_tail(out)
    if target != out:
        repair_truncated_tail(target)
    _barrier(world)
    # Other ranks' part files may be mid-write: their partial tails are not ours to cut, just ignored.
    done = done_keys([out, *_parts(out)], ignore_partial_tail=True)
    mine = [i for i in range(len(prompts.prompts)) if i % world == rank]
    todo = pipeline.jobs(mine, samples, done)
    bar = tqdm(total=len(todo), disable=not progress or rank != 0, desc=f"generate (rank 0 of {world})", unit="sample")
    ids = prompts.ids

    def write(records: list[dict]) -> None:
        for r in records:
            r["prompt_id"] = ids[r["prompt_index"]]
        writer.write_batch(records)
        bar.update(len(records))

    with AppendWriter(target) as writer:
        for _ in pipeline.generate(prompts.prompts, samples, mine, done, on_batch=write):
            pass
    bar.close()
    _barrier(world)
    if rank == 0 and _parts(out):   # also folds in parts left by an earlier, killed sharded run
        merge_parts(out)
    _barrier(world)
    return len(todo)


def merge_parts(out: str | os.PathLike) -> int:
    """Append part-file records not yet in out (sorted by key), fsync, delete the parts; returns lines added."""
    out = Path(out)
    have = done_keys([out])
    new: dict = {}
    parts = _parts(out)
    for part in parts:
        repair_truncated_tail(part)
        for rec in read_records(part):
            k = record_key(rec)
            if k not in have:
                new[k] = rec
    with AppendWriter(out) as writer:
        writer.write_batch([new[k] for k in sorted(new)])
    for part in parts:
        part.unlink()
    return len(new)
