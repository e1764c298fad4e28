"""How a sandboxed program's process starts: the bubblewrap command line (namespaces, the allow-list of
:mod:`.layout` as read-only mounts, every elfreg installation and cache covered, size-capped tmpfs folders, the
environment), or for ``--isolation none`` the ``setpriv``/``unshare`` prefix that works on this host."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .config import SandboxConfig, default_cache_root
from .layout import inside, interpreter_layout


def elfreg_paths(import_path: tuple[str, ...]) -> list[str]:
    """Every file or folder of an elfreg installation on ``import_path`` (package, metadata, editable hooks), plus
    the package this process imported and elfreg's caches: none of it may be visible in the sandbox."""
    import elfreg

    found = {os.path.realpath(Path(elfreg.__file__).parent), os.path.realpath(default_cache_root()),
             os.path.realpath(Path.home() / ".cache" / "elfreg")}
    if os.environ.get("ELFREG_DATA_DIR"):
        found.add(os.path.realpath(os.environ["ELFREG_DATA_DIR"]))
    for entry in import_path:
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            low = name.lower()
            if low == "elfreg" or low.startswith(("elfreg-", "elfreg.", "__editable__.elfreg", "__editable___elfreg")):
                found.add(os.path.realpath(os.path.join(entry, name)))
    return sorted(found)


def hidden_paths(config: SandboxConfig) -> list[str]:
    """Host paths inside the bound folders that the sandbox covers with an empty, read-only folder or file:
    every elfreg installation and cache there, and ``config.hide``."""
    layout = interpreter_layout(config.python)
    wanted = elfreg_paths(layout.import_path) + [os.path.realpath(p) for p in config.hide]
    return sorted({p for p in wanted if os.path.exists(p) and any(inside(p, r) for r in layout.folders)})


def bwrap_argv(config: SandboxConfig, exe: str | None, root: bool, die_with_parent: bool) -> list[str]:
    """The bwrap command line: new namespaces (and a user namespace unless ``root``), the allow-list's mounts, the
    hidden paths covered, a size-capped tmpfs as /tmp and working directory, a read-only root, the environment."""
    argv = [exe or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--new-session"]
    if die_with_parent:
        argv.append("--die-with-parent")
    if not root:
        argv.append("--unshare-user")
    # The allow-list (layout.py). bwrap would create missing parents as 0700 root dirs; the unprivileged uid
    # must traverse them.
    for step in interpreter_layout(config.python).binds():
        if step[0] == "dir":
            argv += ["--perms", "0755", "--dir", step[1]]
        elif step[0] == "symlink":
            argv += ["--symlink", step[1], step[2]]
        elif step[0] == "bind":
            argv += ["--ro-bind", step[1], step[1]]
        else:  # a site folder inside the standard library's: an empty read-only folder over it
            argv += ["--perms", "0555", "--tmpfs", step[1], "--remount-ro", step[1]]
    for path in hidden_paths(config):  # an empty read-only folder (or /dev/null) over each
        if os.path.isdir(path):
            argv += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    # /dev read-only: no file in /dev/shm or in bwrap's /dev tmpfs (unbounded, outside every limit)
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--size", str(config.workdir_bytes), "--perms", "01777", "--tmpfs", "/tmp",
             "--size", str(config.workdir_bytes), "--perms", "01777", "--tmpfs", "/sandbox",
             # the root (bwrap's own tmpfs, of no size limit, holding the folders made above) read-only too:
             # without a uid drop the program owns those folders
             "--remount-ro", "/", "--chdir", "/sandbox", "--clearenv"]
    for k, v in sandbox_env("/sandbox").items():
        argv += ["--setenv", k, v]
    return argv


def sandbox_env(home: str) -> dict[str, str]:
    """The whole environment of a sandboxed program whose home (and temporary folder) is ``home``."""
    return {"HOME": home, "TMPDIR": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def unshare_prefix(root: bool) -> list[str]:
    """The unisolated start: ``setpriv --pdeathsig KILL`` (it dies with the harness thread that started it)
    and ``unshare`` with the flags that work here: new network and PID namespaces (a program then cannot name,
    so cannot signal, the harness; ``--kill-child`` ends the namespace with ``unshare``), else the network
    only, else none."""
    prefix = []
    setpriv = shutil.which("setpriv")
    if setpriv and subprocess.run([setpriv, "--pdeathsig", "KILL", "true"], capture_output=True).returncode == 0:
        prefix = [setpriv, "--pdeathsig", "KILL"]
    exe = shutil.which("unshare")
    if exe is None:
        return prefix
    user = [] if root else ["-r"]
    for flags in (["-n", "-p", "-f", "--kill-child", "--mount-proc"], ["-n", "-p", "-f", "--mount-proc"], ["-n"]):
        argv = [*prefix, exe, *user, *flags]
        if subprocess.run(argv + ["true"], capture_output=True).returncode == 0:
            return argv
    return prefix
