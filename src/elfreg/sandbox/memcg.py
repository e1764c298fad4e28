"""A memory cgroup per sandbox slot, where the host lets elfreg make one (spec §6).

``RLIMIT_AS`` bounds one process's address space, not what a program can pin outside it: a ``memfd`` or tmpfs file
written without being mapped, shared memory, pipe and socket buffers, or the same again in each of its processes.
A memory cgroup counts all of it. Each slot (one program at a time: a fork server and its current child, or one
fresh interpreter) gets its own cgroup, limited to the program's memory plus what the slot used before the program
started (the fork server's own pages), without swap; past it the kernel's OOM killer ends the program (it is first
in line) and the harness reads the cgroup's OOM count to fail the row with that reason.

Where one can be made:

* cgroup v1 (a ``memory`` hierarchy): a child of elfreg's own memory cgroup, when that folder is writable;
* cgroup v2: a child of elfreg's own cgroup when its ``cgroup.subtree_control`` has (or takes) ``memory``; a v2
  cgroup holding processes cannot, so when elfreg is alone in its cgroup (a delegated scope, e.g. started as
  ``systemd-run --user --scope -p Delegate=yes elfreg ...``) it first moves itself into a leaf of it.

Elsewhere (``MemoryCgroups.open`` returns the reason) the sandbox relies on its seccomp filter and rlimits
(:mod:`.inside.runner`). A process enters its slot's cgroup before it runs anything, through
``/bin/sh -c 'echo $$ > cgroup.procs; exec ...'`` (:meth:`MemoryCgroups.enter`).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

_PREFIX = "elfreg-"


def _own_cgroups() -> tuple[str | None, str | None]:
    """``(v1 memory cgroup path, v2 cgroup path)`` of this process, from ``/proc/self/cgroup``."""
    v1 = v2 = None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v1, v2


def _mount(fstype: str, option: str | None) -> tuple[str, str] | None:
    """``(mount point, root inside the hierarchy)`` of a cgroup file system mounted here."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if rfields and rfields[0] == fstype and (option is None or option in rfields[-1].split(",")):
            return fields[4], fields[3]
    return None


def _folder(mount: tuple[str, str], path: str) -> Path | None:
    point, root = mount
    if not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None  # our cgroup is outside what this mount shows
    return Path(point) / path[len(root):].lstrip("/")


class MemoryCgroups:
    """The slots' memory cgroups under ``parent`` (``version`` 1 or 2); one object per :class:`.Sandbox`."""

    def __init__(self, parent: Path, version: int) -> None:
        self.parent, self.version = parent, version
        self._tag = f"{_PREFIX}{os.getpid()}-{id(self):x}-"
        self._made: dict[int, Path] = {}
        self._sweep()

    @classmethod
    def open(cls) -> tuple[MemoryCgroups | None, str]:
        """The slots' cgroups if this host lets elfreg make them, else ``(None, why not)``."""
        try:
            v1, v2 = _own_cgroups()
            if v1 is not None:
                mount = _mount("cgroup", "memory")
                folder = _folder(mount, v1) if mount else None
                if folder is not None and os.access(folder, os.W_OK) and (folder / "memory.limit_in_bytes").exists():
                    return cls._checked(folder, 1)
            if v2 is not None:
                mount = _mount("cgroup2", None)
                folder = _folder(mount, v2) if mount else None
                if folder is not None:
                    return cls._open_v2(folder)
            return None, "no memory cgroup of elfreg's own is mounted here"
        except (OSError, ValueError) as e:
            return None, f"memory cgroups unavailable: {e}"

    @classmethod
    def _open_v2(cls, folder: Path) -> tuple[MemoryCgroups | None, str]:
        if "memory" not in (folder / "cgroup.controllers").read_text().split():
            return None, f"cgroup v2: the memory controller is not delegated to {folder}"
        if not os.access(folder, os.W_OK):
            return None, f"cgroup v2: {folder} is not writable"
        control = folder / "cgroup.subtree_control"
        if "memory" not in control.read_text().split():
            procs = {int(p) for p in (folder / "cgroup.procs").read_text().split()}
            if procs - {os.getpid()}:
                return None, (f"cgroup v2: {folder} holds other processes, so it cannot delegate memory to "
                              "children (run elfreg in a scope of its own, e.g. `systemd-run --user --scope -p "
                              "Delegate=yes elfreg ...`)")
            leaf = folder / f"{_PREFIX}{os.getpid()}-harness"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
            control.write_text("+memory")
        return cls._checked(folder, 2)

    @classmethod
    def _checked(cls, folder: Path, version: int) -> tuple[MemoryCgroups | None, str]:
        """The cgroups, after making and removing one slot to see that this host lets us."""
        cg = cls(folder, version)
        try:
            cg.prepare(0, 1 << 30)
        except OSError as e:
            cg.close()
            return None, f"cannot make a memory cgroup under {folder}: {e}"
        cg.close()
        return cg, ""

    def describe(self) -> str:
        return f"cgroup v{self.version}"

    def _sweep(self) -> None:
        """Remove the empty slot cgroups of elfreg processes that died without removing theirs."""
        try:
            entries = list(self.parent.iterdir())
        except OSError:
            return
        for e in entries:
            name = e.name
            if name.startswith(_PREFIX) and e.is_dir():
                pid = name[len(_PREFIX):].split("-", 1)[0]
                if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                    try:
                        e.rmdir()
                    except OSError:
                        pass

    def _files(self) -> tuple[str, str, str]:
        """(limit, usage, swap+memory limit or '') file names of this version."""
        if self.version == 1:
            return "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.memsw.limit_in_bytes"
        return "memory.max", "memory.current", "memory.swap.max"

    def prepare(self, slot: int, limit_bytes: int) -> Path:
        """The slot's cgroup (made if needed), limited to ``limit_bytes`` of memory and no swap."""
        folder = self._made.get(slot)
        if folder is None:
            folder = self.parent / f"{self._tag}{slot}"
            try:
                folder.mkdir()
            except FileExistsError:
                pass
            self._made[slot] = folder
        self.set_limit(slot, limit_bytes)
        return folder

    def set_limit(self, slot: int, limit_bytes: int) -> None:
        """Set the slot's memory limit (and forbid swap)."""
        folder = self._made[slot]
        limit, _, swap = self._files()
        if self.version == 1:
            # memory+swap may never be below memory: when the limit shrinks, lower memory first; else memsw first
            steps = [limit] + ([swap] if (folder / swap).exists() else [])
            if limit_bytes > int((folder / limit).read_text()):
                steps.reverse()
            for name in steps:
                _write(folder / name, str(limit_bytes))
        else:
            _write(folder / limit, str(limit_bytes))
            if (folder / swap).exists():
                _write(folder / swap, "0")

    def usage(self, slot: int) -> int:
        """Bytes the slot's cgroup uses now."""
        return int((self._made[slot] / self._files()[1]).read_text())

    def oom_kills(self, slot: int) -> int:
        """How many processes the kernel has killed in the slot's cgroup for want of memory."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (self._made[slot] / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def enter(self, slot: int) -> list[str]:
        """An argv prefix that moves the started process into the slot's cgroup before it runs anything."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self._made[slot] / "cgroup.procs")]

    def remove(self, slot: int) -> None:
        """Remove the slot's cgroup (its processes must be gone; a cgroup still in use is left to the sweep)."""
        folder = self._made.pop(slot, None)
        if folder is not None:
            try:
                folder.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        """Remove every slot's cgroup."""
        for slot in list(self._made):
            self.remove(slot)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        if e.errno == errno.EBUSY:
            raise OSError(e.errno, f"{path}: the cgroup is in use above this limit") from None
        raise
