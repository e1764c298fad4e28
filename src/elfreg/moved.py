"""Old import paths of names that moved to another module: still importable, with a DeprecationWarning naming
the new home (``from elfreg.demo.run import evaluate`` keeps working while callers move to
``elfreg.demo.evaluation``)."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def moved(old: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for module ``old``: ``homes`` maps each moved name to ``"module"`` or
    ``"module:new_name"`` (a renamed one); any other name is an AttributeError as usual."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        module, _, new = homes[name].partition(":")
        new = new or name
        warnings.warn(f"{old}.{name} moved to {module}.{new}; import it from there", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), new)

    return __getattr__
