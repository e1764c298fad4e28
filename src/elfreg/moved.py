"""Old import paths of moved modules and names: they keep working, with a DeprecationWarning naming the new home
(``from elfreg.demo.answers import score`` keeps working while callers move to ``elfreg.tasks.synthetic``)."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def alias_module(old: str, new: str | dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module ``old``: a name is read from module ``new`` (every name), or from
    ``new[name]`` (``"module"`` or ``"module:attribute"`` for a renamed one; only those names), with a
    DeprecationWarning at each access; it is the very same object."""

    def target(name: str) -> tuple[str, str] | None:
        if isinstance(new, str):
            return None if name.startswith("__") else (new, name)
        where = new.get(name)
        if where is None:
            return None
        module, _, attr = where.partition(":")
        return module, attr or name

    def __getattr__(name: str) -> Any:
        found = target(name)
        if found is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        module, attr = found
        warnings.warn(f"{old}.{name} moved to {module}.{attr}: import {attr} from {module}", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(module), attr)

    def __dir__() -> list[str]:
        return sorted(dir(importlib.import_module(new)) if isinstance(new, str) else new)

    return __getattr__, __dir__


def moved(old: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of :func:`alias_module` for a module of which only the names in ``homes`` moved."""
    return alias_module(old, homes)[0]
