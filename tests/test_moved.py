"""Every name that moved keeps its old import path, with a DeprecationWarning naming its new home (elfreg.moved)."""

import importlib
import warnings

import pytest

from elfreg.moved import moved

# (old module, name there, new module, name there)
MOVED = [
    ("elfreg.sandbox.sandbox", "ISOLATION_CHOICES", "elfreg.sandbox.config", "ISOLATION_CHOICES"),
    ("elfreg.sandbox.sandbox", "default_cache_root", "elfreg.sandbox.config", "default_cache_root"),
    ("elfreg.sandbox.sandbox", "elfreg_paths", "elfreg.sandbox.bwrap", "elfreg_paths"),
]

# Names an old module still uses itself: importable from it as before, the same object as in their new home.
KEPT = [
    ("elfreg.sandbox.sandbox", "SandboxConfig", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "IsolationUnavailable", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "Isolation", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "SandboxError", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "RunResult", "elfreg.sandbox.collect"),
    ("elfreg.sandbox.sandbox", "machine_memory", "elfreg.sandbox.config"),
]


@pytest.mark.parametrize("old, name, new, new_name", MOVED, ids=[f"{m[0]}.{m[1]}" for m in MOVED])
def test_an_old_path_warns_and_gives_the_moved_object(old, name, new, new_name):
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}.{new_name}"):
        got = getattr(importlib.import_module(old), name)
    assert got is getattr(importlib.import_module(new), new_name)


@pytest.mark.parametrize("old, name, new", KEPT, ids=[f"{m[0]}.{m[1]}" for m in KEPT])
def test_a_name_the_old_module_still_uses_imports_silently(old, name, new):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = getattr(importlib.import_module(old), name)
    assert got is getattr(importlib.import_module(new), name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        moved("elfreg.somewhere", {"a": "elfreg.config"})("nothing")
