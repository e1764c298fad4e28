"""A sandbox with real isolation for tests that score code, or a skip that names why there is none."""

from __future__ import annotations

import pytest

from elfreg.sandbox.sandbox import IsolationUnavailable, Sandbox, SandboxConfig


def isolated_sandbox(**config) -> Sandbox:
    """``Sandbox(SandboxConfig(**config))`` (isolation ``auto``), or skip: no bubblewrap, or it does not work."""
    try:
        return Sandbox(SandboxConfig(**config))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
