"""The files of a generation run: prompt files in (a JSONL file, stdin or inline texts), a resumable, optionally
sharded results JSONL out (spec §5, §6)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch.distributed as dist
from tqdm import tqdm

from elfreg.fingerprint import claim, model_identity, note
from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.pipeline import GenerationPipeline
from elfreg.sampling.watch import Watch
from elfreg.sampling.results_io import AppendWriter, done_keys, read_records, record_key, repair_truncated_tail


@dataclass
class PromptFile:
    """Prompts read from a JSONL file, with the file line of each (for error messages)."""

    prompts: list[str]
    lines: list[int]
    ids: list[Any]
    source: str
    digest: str = ""   # sha256 of the bytes read (the run's fingerprint names the prompts by it)


STDIN = "-"


def _prompt_bytes(path: str | os.PathLike) -> tuple[bytes, str]:
    """(bytes, name for messages) of a prompts file, or of stdin for ``-``."""
    if str(path) == STDIN:
        return sys.stdin.buffer.read(), "<stdin>"
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"prompts file {p} does not exist")
    return p.read_bytes(), str(p)


def iter_prompt_records(path: str | os.PathLike, field: str = "prompt", data: bytes | None = None):
    """Yield (line number, object) for each non-blank line holding an object with a string ``field``.

    Errors name the file and line (missing file, bad JSON, missing field); an empty file is an error too. ``-``
    reads stdin; ``data``: the bytes already read from ``path``.
    """
    if data is None:
        data, p = _prompt_bytes(path)
    else:
        p = "<stdin>" if str(path) == STDIN else str(Path(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:   # named here: stdin cannot be read a second time to find the line
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(f"{p}:{line}: not UTF-8 (byte {column} of the line is 0x{data[exc.start]:02x}); save the "
                         f"file as UTF-8") from None
    found = False
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise ValueError(f"{p}:{n}: not valid JSON here (nested too deeply)") from None
        except ValueError as exc:   # e.g. an integer of more digits than Python converts
            raise ValueError(f"{p}:{n}: not valid JSON here ({str(exc).splitlines()[0][:120]})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get(field), str):
            raise ValueError(f"{p}:{n}: expected an object with a string field {field!r}")
        check_encodable(obj[field], f"{p}:{n}: {field}")
        found = True
        yield n, obj
    if not found:
        raise ValueError(f"{p}: prompts file is empty (no JSON lines with a {field!r} field)")


def read_prompts(path: str | os.PathLike, field: str = "prompt") -> PromptFile:
    """Read {field: str, optional id} objects, one per line (``-``: from stdin); blank lines skipped; errors name
    file and line."""
    data, source = _prompt_bytes(path)
    prompts, lines, ids = [], [], []
    for n, obj in iter_prompt_records(path, field, data):
        prompts.append(obj[field])
        lines.append(n)
        ids.append(obj.get("id"))
    return PromptFile(prompts, lines, ids, source, hashlib.sha256(data).hexdigest())


def check_encodable(text: str, where: str) -> None:
    """ValueError naming ``where`` for a text UTF-8 cannot encode (a lone surrogate: a ``\\ud800`` JSON escape, or
    command-line bytes that were not UTF-8), which no tokenizer takes."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = f"0x{ord(text[exc.start]) - 0xDC00:02x}" if 0xDC80 <= ord(text[exc.start]) <= 0xDCFF else \
                f"U+{ord(text[exc.start]):04X}"
            raise ValueError(f"{where}: text that cannot be encoded as UTF-8 ({bad} at character {exc.start + 1}: "
                             f"a lone surrogate, or bytes that are not UTF-8)") from None


def inline_prompts(texts: list[str], source: str = "--prompt") -> PromptFile:
    """Prompts given on the command line: prompt i is texts[i] (messages name it ``--prompt:i+1``)."""
    for i, text in enumerate(texts, start=1):
        check_encodable(text, f"{source}:{i}")
    digest = hashlib.sha256(json.dumps(list(texts)).encode()).hexdigest()
    return PromptFile(list(texts), list(range(1, len(texts) + 1)), [None] * len(texts), source, digest)


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


def generation_settings(args: Any, cfg: SamplerConfig, prompts: PromptFile, batch_invariant: bool = True,
                        scheme: str | None = None) -> dict:
    """What changes the samples of `elfreg generate`: the model, the prompts' bytes, every sampler setting
    (``sigma``: as given, None = the model's), --precision, batch invariance. Not --samples (noise is f(seed,
    prompt, sample): more samples extend a run), device or progress; nor the batch size while outputs are
    batch-invariant. What --precision auto chose is a note beside these (``note_results_file``), as the device:
    each record carries it too."""
    from elfreg.sampling.invariance import invariance_settings

    return {"model": model_identity(args.model), "prompts": prompts.digest,
            "prompt_field": args.prompt_field, "prompt_format": getattr(args, "prompt_format", "template"),
            **dataclasses.asdict(cfg), "sigma": args.sigma, "precision": getattr(args, "precision", "auto"),
            **invariance_settings(batch_invariant, getattr(args, "batch_size", None), scheme)}


def claim_results_file(args: Any, cfg: SamplerConfig, prompts: PromptFile, batch_invariant: bool = True,
                       scheme: str | None = None) -> None:
    """Refuse an --out made with other settings (RunMismatch naming them); ``args.restart`` moves it, its part
    files and its fingerprint aside first."""
    out = Path(args.out)
    existing = [out, *_parts(out)]
    claim(fingerprint_path(out), generation_settings(args, cfg, prompts, batch_invariant, scheme), existing,
          getattr(args, "restart", False), aside=[*existing, fingerprint_path(out)])


def note_results_file(args: Any, facts: dict) -> None:
    """Record measured facts of this run (the precision used, the bf16 / fp32 time ratio) in --out's fingerprint."""
    note(fingerprint_path(Path(args.out)), facts)


def generate_to_file(pipeline: GenerationPipeline, prompts: PromptFile, out: str | os.PathLike, samples: int,
                     rank: int = 0, world: int = 1, progress: bool = True, watch: Watch | None = None) -> int:
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
        for _ in pipeline.generate(prompts.prompts, samples, mine, done, on_batch=write, watch=watch):
            pass
    bar.close()
    _barrier(world)
    if rank == 0 and _parts(out):   # also folds in parts left by an earlier, killed sharded run
        merge_parts(out)
    _barrier(world)
    return len(todo)


def generate_to_stream(pipeline: GenerationPipeline, prompts: PromptFile, stream: IO[str], samples: int,
                       output_format: str = "jsonl", progress: bool = True, watch: Watch | None = None) -> list[dict]:
    """Generate every (prompt, sample) and write each to ``stream`` as it is made: its JSON record (``jsonl``), or
    its response text and a newline (``text``); flushed per batch. No resume: nothing is kept but the stream.
    ``watch`` sees each batch's path (elfreg.sampling.watch). Returns the records."""
    bar = tqdm(total=len(prompts.prompts) * samples, disable=not progress, desc="generate", unit="sample")
    out: list[dict] = []

    def write(records: list[dict]) -> None:
        for r in records:
            r["prompt_id"] = prompts.ids[r["prompt_index"]]
            stream.write((json.dumps(r) if output_format == "jsonl" else r["response"]) + "\n")
        stream.flush()
        out.extend(records)
        bar.update(len(records))

    for _ in pipeline.generate(prompts.prompts, samples, on_batch=write, watch=watch):
        pass
    bar.close()
    return out


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
