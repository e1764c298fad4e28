"""The run configs elfreg ships, found by name: ``--config tiny-smoke``, ``--config gsm8k/elf-reg-b``.

They live in ``configs/`` of the source tree; a wheel carries them as package data (``elfreg/configs``, copied
there by setup.py at build time), so a pip user has them without a checkout. A path that exists is used as given.
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

SUFFIXES = (".yaml", ".yml")


def shipped_dirs() -> list[Path]:
    """Where the shipped configs are: the installed package's ``elfreg/configs``, then a source checkout's
    ``configs/`` (an editable install, or ``PYTHONPATH=src``)."""
    out = [Path(str(resources.files("elfreg").joinpath("configs"))), Path(__file__).resolve().parents[2] / "configs"]
    return [d for d in out if d.is_dir()]


def config_names() -> list[str]:
    """Every shipped config's name (its path below ``configs/`` without ``.yaml``), sorted."""
    names = {str(p.relative_to(d).with_suffix("")) for d in shipped_dirs() for p in d.rglob("*.yaml")}
    return sorted(names, key=lambda n: (n.count("/"), n))   # the top-level ones (tiny-smoke, ...) first


def resolve_config(text: str) -> Path:
    """The config file ``text`` names: an existing file as given, else a shipped config by name (``tiny-smoke``,
    ``gsm8k/elf-reg-b``; ``configs/`` and ``.yaml`` may be written); FileNotFoundError naming the choices."""
    path = Path(text).expanduser()
    if path.is_file():
        return path
    name = text.removeprefix("./").removeprefix("configs/")
    for suffix in SUFFIXES:
        name = name.removesuffix(suffix)
    if name and ".." not in Path(name).parts and not Path(name).is_absolute():
        for d in shipped_dirs():
            for suffix in SUFFIXES:
                if (d / f"{name}{suffix}").is_file():
                    return d / f"{name}{suffix}"
    names = config_names()
    shown = f"e.g. {', '.join(names[:6])}" if names else "this install holds none: its configs/ folder is missing"
    raise FileNotFoundError(f"{text}: no such file, nor a shipped config of that name ({shown}; "
                            "docs/training.md lists them)")


def config_arg(text: str) -> str:
    """argparse type of ``--config``: a run YAML by path or by shipped name (a placeholder or folder refused)."""
    from elfreg.cliargs import input_file

    if Path(text).expanduser().is_dir():
        return input_file(text)   # its one-line refusal of a folder
    try:
        return input_file(str(resolve_config(text)))
    except FileNotFoundError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
