"""The sandbox's settings and what it reports (spec §6): the limits a program runs under, the isolation choice and
what this machine provides (:class:`Isolation`), and the errors of the sandbox itself."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ISOLATION_CHOICES = ("auto", "zygote", "bwrap", "none")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora/RHEL: "
                "`sudo dnf install bubblewrap`), or opt out with `--isolation none` (generated programs then run "
                "with your user's rights; every report records the run as unisolated)")


class IsolationUnavailable(RuntimeError):
    """No isolating way to run programs works on this machine (and ``none`` was not chosen)."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): the fork server could not be started or replaced."""


def default_cache_root() -> Path:
    """Where elfreg keeps its caches: ``ELFREG_CACHE_DIR``, else ``~/.cache/elfreg/eval``."""
    return Path(os.environ.get("ELFREG_CACHE_DIR") or Path.home() / ".cache" / "elfreg" / "eval")


def machine_memory() -> int:
    """Bytes of physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def size_text(n: int) -> str:
    """``n`` bytes in the largest binary unit it reaches, e.g. ``4 GiB``."""
    if n.bit_length() > 60:
        return f"about 2^{n.bit_length() - 1} bytes"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


# Each limit's range: (lowest, highest, what the highest is). The lowest are what a program needs to start at all
# (a Python interpreter does not start in 32 MiB of address space on every path); a memory above this machine's
# limits nothing (the host runs out first), and the other highest are far past any benchmark's need.
_RANGES = {
    "memory_bytes": (64 << 20, machine_memory, "this machine's memory"),
    "workdir_bytes": (1 << 20, machine_memory, "this machine's memory"),
    "file_bytes": (1 << 20, lambda: 1 << 40, None),
    "max_result_bytes": (1 << 20, lambda: 1 << 40, None),
    "nproc": (1, lambda: 1 << 15, None),
    "open_files": (16, lambda: 1 << 16, None),
}


@dataclass
class SandboxConfig:
    """Limits and isolation choice for sandboxed programs (spec §6)."""

    memory_bytes: int = field(default_factory=lambda: min(4 << 30, machine_memory()))
    file_bytes: int = 64 << 20
    workdir_bytes: int = 256 << 20
    nproc: int = 64
    # Few descriptors: each can pin a pipe's or socket's buffers outside the address space.
    open_files: int = 64
    max_result_bytes: int = 256 << 20
    isolation: str = "auto"  # one of ISOLATION_CHOICES
    # The bubblewrap executable (name on PATH or path); ELFREG_BWRAP overrides, e.g. to test a machine without it.
    bwrap: str = field(default_factory=lambda: os.environ.get("ELFREG_BWRAP", "bwrap"))
    # The base interpreter (a virtual environment's launcher is resolved to it): a venv may live under /tmp, which
    # every sandboxed program gets as a fresh tmpfs; the runner and the programs need the standard library only.
    python: str = field(default_factory=lambda: getattr(sys, "_base_executable", sys.executable))
    # Host paths never visible inside (besides every elfreg installation and cache, always hidden): e.g. a
    # --data file or --cache-dir that lies inside what the sandbox binds.
    hide: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, (low, high, what) in _RANGES.items():
            value, top = getattr(self, name), high()
            whole = isinstance(value, int) and not isinstance(value, bool)
            if not (whole and low <= value <= top):
                show = size_text if name.endswith("_bytes") else str
                got = show(value) if whole and value >= 0 else repr(value)
                raise ValueError(f"SandboxConfig.{name} must be an integer between {show(low)} and {show(top)}"
                                 f"{f' ({what})' if what else ''}, got {got}")
        if self.isolation not in ISOLATION_CHOICES:
            raise ValueError(f"SandboxConfig.isolation must be one of {'|'.join(ISOLATION_CHOICES)}, "
                             f"got {self.isolation!r}")
        self.python = os.path.realpath(self.python)
        self.hide = tuple(str(p) for p in self.hide)


@dataclass
class Isolation:
    """What the sandbox actually provides on this machine (recorded in every report)."""

    kind: str  # "bwrap" or "none" (rlimits only: unisolated)
    uid_drop: bool
    netns: bool
    reason: str = ""
    fork_server: bool = False  # bwrap fork server (zygote) instead of a fresh interpreter per program

    pidns: bool = False
    memcg: str = ""  # the memory cgroups in use ("cgroup v1", "cgroup v2"), or "" (rlimits and seccomp only)

    @property
    def isolated(self) -> bool:
        """Whether programs run isolated (bubblewrap); ``False`` is the explicit ``--isolation none``."""
        return self.kind == "bwrap"

    def describe(self) -> str:
        """One line for reports, e.g. ``bwrap+zygote+uid-drop`` or ``UNISOLATED none+rlimits+...``."""
        parts = ([self.kind] + (["zygote"] if self.fork_server else []) + (["rlimits"] if not self.isolated else [])
                 + (["uid-drop"] if self.uid_drop else [])
                 + (["netns"] if self.netns and self.kind != "bwrap" else [])
                 + (["pidns"] if self.pidns and self.kind != "bwrap" else []) + (["memcg"] if self.memcg else []))
        return ("" if self.isolated else "UNISOLATED ") + "+".join(parts) + (f" ({self.reason})" if self.reason else "")
