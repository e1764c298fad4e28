"""What every command checks in the paths and devices a person types, and the one line it says when input is bad.

Argument types (``type=`` of argparse) refuse a folder where a file is expected and the reverse, a placeholder left
from the docs (``<path/to/model>``, ``DIR``, ``/path/to/...``), and a CUDA device on a machine without CUDA, before
any work. ``error_line`` turns the exceptions that still surface later (a file that is not UTF-8 text, a corrupt
``.safetensors`` file, CUDA missing) into one line naming the file. Light: no torch at import.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any, Iterator

# Placeholder forms the README, docs/*.md and configs/ use for paths a reader must fill in: <output>/model, <dir>,
# DIR, FILE.jsonl, FOLDER, PATH/TO/..., plus the common /path/to/..., {model}, PATH_TO_MODEL and YOUR_MODEL.
# {shared} is no placeholder: a data source's path may hold it for the shared folder (train.config.source_specs).
_PLACEHOLDER = re.compile(
    r"<[^<>]*[A-Za-z][^<>]*>"
    r"|(?:^|[/\\])[Pp]ath[/\\]to(?:[/\\]|$)"
    r"|\{(?!shared\})[A-Za-z_][A-Za-z0-9_]*\}"
    r"|\b(?:PATH_TO|YOUR)_[A-Za-z0-9_]+"
    r"|(?:^|[/\\])(?:DIR|FILE|FOLDER|PATH)(?:\.[A-Za-z0-9.]+)?(?=[/\\]|$)")


def placeholder(text: str) -> str | None:
    """The part of ``text`` that looks like a placeholder from the docs, or None; a path that exists is never one."""
    match = _PLACEHOLDER.search(text)
    if match is None or Path(text).expanduser().exists():
        return None
    return match.group(0).strip("/\\")


def placeholder_message(text: str, what: str) -> str | None:
    """"... looks like a placeholder from the docs; replace it with <what>", or None when ``text`` is not one."""
    part = placeholder(text)
    if part is None:
        return None
    return f"{text!r} looks like a placeholder from the docs ({part}); replace it with {what}"


# Config keys whose values are paths or hub ids (backbones, data sources, init_from, caches).
_PATH_KEYS = ("path", "hub_id", "encoder", "teacher", "encoder_gguf_file", "teacher_gguf_file", "init_from",
              "cache_dir")


def config_placeholder(data: Any, where: str = "") -> str | None:
    """``key: '...' looks like a placeholder ...`` for the first path-valued key of a config dict left as a
    placeholder, or None."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        name = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip(".")
        if isinstance(value, (dict, list)):
            found = config_placeholder(value, name)
            if found:
                return found
        elif isinstance(value, str) and str(key) in _PATH_KEYS:
            msg = placeholder_message(value, "your own path or hub id")
            if msg:
                return f"{name}: {msg}"
    return None


def _refuse_placeholder(text: str, what: str) -> None:
    msg = placeholder_message(text, what)
    if msg:
        raise argparse.ArgumentTypeError(msg)


def _file_ancestor(path: Path) -> Path | None:
    """The nearest existing ancestor of ``path`` that is a file (so nothing can be created below it), or None."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def input_file(text: str) -> str:
    """An existing file (argparse type): refuses a folder, a missing path and a placeholder."""
    _refuse_placeholder(text, "the path of your file")
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


def _place_to_write(text: str, what: str) -> Path:
    """The path of an output option: refuses a placeholder and a path below a file."""
    _refuse_placeholder(text, what)
    path = Path(text).expanduser()
    blocker = _file_ancestor(path)
    if blocker is not None:
        raise argparse.ArgumentTypeError(f"{text}: {blocker} is a file, not a folder")
    return path


def output_file(text: str) -> str:
    """A file to write or append to (argparse type): refuses an existing folder, a path below a file, a placeholder."""
    path = _place_to_write(text, "the file to write")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; this option names a file, e.g. {path / 'out.jsonl'}")
    return text


def output_dir(text: str) -> str:
    """A folder to write into, created when missing (argparse type): refuses an existing file and a placeholder."""
    path = _place_to_write(text, "the folder to write")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; this option names a folder")
    return text


def input_path(text: str) -> str:
    """A file, folder or glob to read (argparse type; the reader says when nothing matches): refuses a placeholder."""
    _refuse_placeholder(text, "the path of your data")
    return text


def model_ref(text: str) -> str:
    """A model folder or hub id (argparse type): refuses a file and a placeholder."""
    _refuse_placeholder(text, "your model folder (config.json, model.safetensors) or a hub id")
    if Path(text).expanduser().is_file():
        raise argparse.ArgumentTypeError(f"{text} is a file; give the folder (an elfreg model: config.json, "
                                         "model.safetensors) or a hub id")
    return text


def device(text: str) -> str:
    """A torch device this machine has (argparse type): ``cpu``, ``cuda``, ``cuda:N``, ...; CUDA only where present."""
    import torch

    try:
        dev = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu, cuda or cuda:N") from None
    problem = device_problem(text) if dev.type == "cuda" else None
    if problem:
        raise argparse.ArgumentTypeError(f"{text}: {problem}; use --device cpu, or leave --device out "
                                         "(cuda when there is one, else cpu)")
    return text


def device_problem(spec: str) -> str | None:
    """Why the device ``spec`` (``cpu``, ``cuda``, ``cuda:N``) cannot be used here, or None: CUDA only where present
    (one home for --device, lm-eval's --device and train.device)."""
    if not spec.startswith("cuda"):
        return None
    index = spec.partition(":")[2]
    return cuda_problem(int(index) if index.isdigit() else None)


def cuda_problem(index: int | None = None) -> str | None:
    """Why CUDA (device ``index``) cannot be used here, or None when it can."""
    import torch

    if not torch.cuda.is_available():
        return ("CUDA is not available (this torch build has no CUDA)" if torch.version.cuda is None
                else "CUDA is not available (no GPU visible to torch)")
    if index is not None and index >= torch.cuda.device_count():
        return f"there is no CUDA device {index} ({torch.cuda.device_count()} visible)"
    return None


def utf8_problem(path: str | os.PathLike) -> str | None:
    """``FILE:LINE: not UTF-8 (byte N of the line is 0xXX) ...`` (the wording of eval.completions) for the first
    byte of ``path`` (``.gz``: of its contents) that is not UTF-8, or None; read in 1 MiB chunks: linear time."""
    import gzip

    line, col, pending = 1, 0, b""   # col: bytes of the current line read before ``data``

    def advance(done: bytes) -> None:
        nonlocal line, col
        line += done.count(b"\n")
        nl = done.rfind(b"\n")
        col = len(done) - nl - 1 if nl >= 0 else col + len(done)

    with (gzip.open if str(path).endswith(".gz") else open)(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            data, pending = pending + chunk, b""
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                advance(data[:exc.start])
                if chunk and exc.reason == "unexpected end of data":   # a character split by the chunk border
                    pending = data[exc.start:]
                    continue
                return (f"{path}:{line}: not UTF-8 (byte {col + 1} of the line is 0x{data[exc.start]:02x}); "
                        "save the file as UTF-8")
            advance(data)
            if not chunk:
                return None


# Files that are never text (skipped when looking for the one that is not UTF-8), and the text files looked at
# inside a folder given as an argument (a data folder, a model folder's config.json).
_BINARY = (".safetensors", ".parquet", ".arrow", ".gguf", ".bin", ".pt", ".png", ".zst")
_TEXT = (".jsonl", ".json", ".yaml", ".yml", ".csv", ".txt", ".jsonl.gz", ".json.gz", ".csv.gz")


def _arg_files(args: argparse.Namespace | None) -> Iterator[Path]:
    """The existing files named by the parsed arguments (strings and lists of strings), and the text files in the
    folders they name."""
    for value in vars(args or argparse.Namespace()).values():
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str) or "\0" in item:
                continue
            path = Path(item).expanduser()
            if path.is_file() and not path.name.endswith(_BINARY):
                yield path
            elif path.is_dir():
                yield from sorted(p for p in path.rglob("*") if p.name.endswith(_TEXT) and p.is_file())


def _safetensors_file(exc: BaseException) -> str | None:
    """The .safetensors file being read when ``exc`` was raised: safetensors' errors do not name it, but
    ``safetensors.torch.load_file``'s frame holds it."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, (str, Path)) and str(value).endswith(".safetensors"):
                found = str(value)
        tb = tb.tb_next
    return found


def safetensors_message(exc: BaseException) -> str:
    """One line for a safetensors file that cannot be read (truncated or not a safetensors file)."""
    name = _safetensors_file(exc)
    where = f"{name}: " if name else "a .safetensors file: "
    detail = str(exc).split(":", 1)[-1].strip()
    size = f", {Path(name).stat().st_size:,} bytes" if name and Path(name).is_file() else ""
    return (f"{where}corrupt or truncated ({detail}{size}); re-save it, or delete it and download it again "
            "(a hub model: huggingface-cli download --force-download)")


# What torch says when CUDA is asked for and is not there (torch without CUDA, no driver, no GPU, a wrong index).
_CUDA_MISSING = ("Torch not compiled with CUDA", "No CUDA GPUs are available", "Found no NVIDIA driver",
                 "invalid device ordinal")


def _cuda_missing(exc: BaseException) -> bool:
    return isinstance(exc, (AssertionError, RuntimeError)) and any(s in str(exc) for s in _CUDA_MISSING)


def is_bad_input(exc: BaseException) -> bool:
    """An error a person fixes in the input (one line, no traceback) rather than a bug (a traceback)."""
    # by name: neither safetensors nor the sandbox is imported just to read an error
    return (isinstance(exc, (ValueError, OSError)) or type(exc).__name__ in ("SafetensorError", "IsolationUnavailable")
            or _cuda_missing(exc))


def error_line(exc: BaseException, args: argparse.Namespace | None = None) -> str:
    """The one line a person reads for ``exc``: the file it concerns and what to do, where that can be found."""
    if isinstance(exc, UnicodeDecodeError):
        for path in _arg_files(args):
            try:
                problem = utf8_problem(path)
            except (OSError, EOFError):   # unreadable, or a .gz that is not one: not the file looked for
                continue
            if problem:
                return problem
        return f"an input file is not UTF-8 text ({exc}); save it as UTF-8"
    if type(exc).__name__ == "SafetensorError":
        return safetensors_message(exc)
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)) and exc.filename:
        kind = "a folder; give a file" if isinstance(exc, IsADirectoryError) else "below a file, not a folder"
        return f"{exc.filename} is {kind}"
    text = str(exc)
    if _cuda_missing(exc):
        return (f"CUDA is not available here ({text.splitlines()[0]}); use the CPU (--device cpu, or train.device=cpu "
                "for train)")
    if isinstance(exc, OSError) and exc.filename:
        hint = placeholder_message(str(exc.filename), "your own path")
        return f"{exc.filename}: {exc.strerror or text}" + (f" ({hint})" if hint else "")
    if isinstance(exc, OSError):   # a message naming a path that is missing (model folder, config file, ...)
        for path_like in re.findall(r"[^\s'\":,;()]+", text):
            hint = placeholder_message(path_like, "your own path")
            if hint:
                return f"{text} ({hint})"
    return text


def walk_actions(parser: argparse.ArgumentParser, prog: str = "") -> Iterator[tuple[str, Any]]:
    """(parser prog, action) for every option of ``parser`` and of its subcommands, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from walk_actions(sub, sub.prog)
        else:
            yield prog or parser.prog, action


def quiet_loaders() -> None:
    """With ``--no-progress``: transformers' and the hub client's own bars (weights loading, downloads) off too."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    disable_progress_bars()
