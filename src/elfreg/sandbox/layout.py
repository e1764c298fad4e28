"""What a sandboxed program sees of the host's files (spec §6): an allow-list, asked of the interpreter itself.

A program sees the sandbox interpreter's **standard library** (``sysconfig`` ``stdlib`` and ``platstdlib``, the
``lib-dynload`` extension modules, a ``pythonXY.zip`` if there is one) and the files that interpreter maps when
every standard extension module is loaded (the interpreter binary, ``libpython``, the C libraries behind ``_ssl``,
``_sqlite3``, ``_ctypes``..., locale data), and ``/etc/ld.so.cache`` and ``/etc/localtime``, each reachable by the
same names as on the host (the dynamic loader's, the library's versioned symlinks). Nothing else: no
``site-packages`` or ``dist-packages`` (base interpreter or virtual environment; a site folder inside the standard
library's folder, as pyenv, conda and source builds have, is covered by an empty read-only folder), no user site,
no home, no ``/usr/share``, no project or data folder. Programs run with ``python -I -S``, so no site folder is on
their import path in any mode (under ``--isolation none`` too): a program importing a module outside the standard
library fails with ``ModuleNotFoundError``, as EvalPlus fails it where the module is not installed. No shipped
benchmark's reference solution or tests imports one (``tests/sandbox/test_allow_list.py`` checks it); a benchmark
that needed one would bind that package alone.
"""

from __future__ import annotations

import functools
import json
import os
import struct
import subprocess
from dataclasses import dataclass

# Run as ``python -I -S -c``: the interpreter reports its standard library, the site folders it would add (``site``
# imported for the question only: under -S that changes nothing), and the files it maps once every extension module
# of the standard library is loaded (a module whose own library is missing on the host fails here as it will inside).
_PROBE = r"""
import importlib, importlib.machinery, json, os, site, sys, sysconfig
paths = sysconfig.get_paths()
sites = set(site.getsitepackages()) | {paths["purelib"], paths["platlib"]}
try:
    sites.add(site.getusersitepackages())
except Exception:
    pass
suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
for d in sys.path:
    if os.path.basename(d) == "lib-dynload" and os.path.isdir(d):
        for f in sorted(os.listdir(d)):
            if f.endswith(suffixes):
                try:
                    importlib.import_module(f.split(".")[0])
                except Exception:
                    pass
mapped = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            mapped.add(parts[5].rstrip("\n"))
print(json.dumps({"executable": sys.executable, "stdlib": [paths["stdlib"], paths["platstdlib"]],
                  "path": sys.path, "sites": sorted(sites), "mapped": sorted(mapped)}))
"""


@dataclass(frozen=True)
class Layout:
    """The allow-list of one interpreter (real paths): folders bound whole, single files, site folders to cover."""

    executable: str
    folders: tuple[str, ...]  # the standard library's folders (and a zip on the import path), bound read-only
    files: tuple[str, ...]  # the binary, the loader and every file the interpreter maps outside ``folders``
    sites: tuple[str, ...]  # site folders that lie inside ``folders``: covered by an empty read-only folder
    import_path: tuple[str, ...]  # ``sys.path`` under ``-I -S``

    def binds(self) -> list[tuple[str, ...]]:
        """Mount steps in order: ``("dir", path)``, ``("symlink", target, path)``, ``("bind", path)``,
        ``("cover", path)``. Each file is reachable by its real path and by every symlink the loader may take to
        it (the ELF interpreter's path, the library's versioned names beside it)."""
        steps: list[tuple[str, ...]] = []
        seen: set[tuple[str, ...]] = set()

        def add(step: tuple[str, ...]) -> None:
            if step not in seen:
                seen.add(step)
                steps.append(step)

        def dirs_for(path: str) -> None:
            for a in ancestors(path):
                add(("dir", a))

        for folder in self.folders:
            dirs_for(folder)
            add(("bind", folder))
        names = [self.executable, *self.files] + [f for f in ("/etc/ld.so.cache", "/etc/localtime")
                                                  if os.path.exists(f)]
        interp = elf_interpreter(self.executable)
        if interp:
            names.append(interp)
        for name in names:
            for step in _reach(name):
                dirs_for(step[-1])
                add(step)
            real = os.path.realpath(name)
            for link, target in _links_to(os.path.dirname(real)).get(real, ()):
                add(("symlink", target, link))
        made = {step[-1] for step in steps}
        for d in ("/lib", "/lib64", "/lib32"):  # merged-/usr links (/lib -> usr/lib): the loader's cache names use them
            if os.path.islink(d) and os.path.realpath(d) in made:
                add(("symlink", os.readlink(d), d))
        for s in self.sites:
            add(("cover", s))
        return steps


def ancestors(path: str) -> list[str]:
    """The folders above ``path``, outermost first, without ``/``."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _reach(path: str, depth: int = 0) -> list[tuple[str, ...]]:
    """Steps that make ``path`` resolve inside the sandbox as on the host: each symlink met on the way, then the
    real file's bind."""
    if depth > 32:
        raise OSError(f"too many levels of symbolic links resolving {path}")
    cur, parts = "/", [p for p in os.path.normpath(path).split("/") if p]
    steps: list[tuple[str, ...]] = []
    for i, part in enumerate(parts):
        nxt = os.path.join(cur, part)
        if os.path.islink(nxt):
            target = os.readlink(nxt)
            steps.append(("symlink", target, nxt))
            rest = os.path.join(os.path.join(cur, target), *parts[i + 1:])
            return steps + _reach(rest, depth + 1)
        cur = nxt
    return steps + [("bind", cur)]


@functools.lru_cache(maxsize=None)
def _links_to(folder: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """Symlinks in ``folder`` by the real file they lead to: ``{real: ((link, its target text), ...)}``."""
    out: dict[str, list[tuple[str, str]]] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return {}
    for e in entries:
        if e.is_symlink():
            try:
                out.setdefault(os.path.realpath(e.path), []).append((e.path, os.readlink(e.path)))
            except OSError:
                continue
    return {k: tuple(v) for k, v in out.items()}


def elf_interpreter(path: str) -> str | None:
    """The ELF program interpreter (``PT_INTERP``, the dynamic loader) of the executable ``path``, if any."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF":
                return None
            end = "<" if head[5] == 1 else ">"
            if head[4] == 2:
                phoff, = struct.unpack_from(end + "Q", head, 0x20)
                phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36)
                fields = end + "I4xQ8x8xQ"  # p_type, p_offset, p_filesz
            else:
                phoff, = struct.unpack_from(end + "I", head, 0x1C)
                phentsize, phnum = struct.unpack_from(end + "HH", head, 0x2A)
                fields = end + "II8xI"
            for k in range(phnum):
                f.seek(phoff + k * phentsize)
                p_type, off, size = struct.unpack(fields, f.read(struct.calcsize(fields)))
                if p_type == 3:  # PT_INTERP
                    f.seek(off)
                    return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


@functools.lru_cache(maxsize=None)
def interpreter_layout(python: str) -> Layout:
    """The allow-list of the interpreter ``python`` (asked of it once per process)."""
    out = subprocess.run([python, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=120,
                         check=True, env={}, stdin=subprocess.DEVNULL)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    real = os.path.realpath
    path = tuple(real(p) for p in got["path"] if p)
    folders = sorted({real(p) for p in got["stdlib"] if os.path.isdir(p)}
                     | {p for p in path if os.path.isfile(p)})  # pythonXY.zip
    folders = [f for f in folders if not any(f != g and inside(f, g) for g in folders)]
    for p in path:  # lib-dynload (or any import path entry) outside the standard library's folder
        if os.path.isdir(p) and not any(inside(p, f) for f in folders):
            folders.append(p)
    sites = sorted({real(s) for s in got["sites"]} | {os.path.join(f, n) for f in folders
                                                     for n in ("site-packages", "dist-packages")})
    sites = [s for s in sites if os.path.isdir(s) and any(inside(s, f) and s != f for f in folders)]
    files = sorted({real(m) for m in got["mapped"] if os.path.isfile(m)} - {real(got["executable"])})
    files = [f for f in files if not any(inside(f, d) for d in folders)]
    return Layout(real(got["executable"]), tuple(folders), tuple(files), tuple(sites), path)
