"""Sandboxes for tests: one with real isolation or a skip that names why there is none; or the best one here."""

from __future__ import annotations

import pytest

from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig


def isolated_sandbox(**config) -> Sandbox:
    """``Sandbox(SandboxConfig(**config))`` (isolation ``auto``), or skip: no bubblewrap, or it does not work."""
    try:
        return Sandbox(SandboxConfig(**config))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")


def any_sandbox(**config) -> Sandbox:
    """The isolated sandbox where there is one, else ``--isolation none``: for tests of what the harness does with
    what a program writes or how long it takes, which hold (and must be tested) either way."""
    try:
        return Sandbox(SandboxConfig(**config))
    except IsolationUnavailable:
        return Sandbox(SandboxConfig(**config, isolation="none"))
