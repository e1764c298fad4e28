"""The sandbox for generated code, harness side (spec §6: "generated code is untrusted: run it isolated").

Each program runs in its own process, in a throwaway directory, in its own session (process group), with
rlimits (address space, file size, processes, CPU), no stdin, output discarded, and a wall-clock deadline kept by
the harness. When bubblewrap works it adds: a read-only view of only ``/usr`` and the sandbox interpreter's own
installation (no ``/root``, ``/home``, project files or virtual environments), with every copy of elfreg in it
(its package data: the benchmarks) and every elfreg cache hidden; a size-capped tmpfs as working directory; and
new PID/network/IPC/UTS namespaces. When the harness runs as root the program runs under its own unprivileged uid,
so the process limit holds and it cannot signal or write anything it does not own.

Two ways to start the process (``SandboxConfig.isolation``):

* ``zygote`` (default when root and bwrap work): one bwrap-isolated fork server per worker
  (:mod:`.forkserver`), a template that forks a fresh child per program and never reads a payload; the payload
  goes to that child alone. Same isolation, a few milliseconds per program.
* ``bwrap``: a fresh ``python -I`` per program under bwrap (~0.1 s each).
* ``none``: an explicit opt-out, recorded as *unisolated*: a fresh ``python -I`` per program with the
  rlimits only (plus, where ``unshare`` works, new network and PID namespaces; as root, the uid drop).

``auto`` takes the first of ``zygote`` and ``bwrap`` that works and otherwise refuses
(:class:`IsolationUnavailable`, saying how to install bubblewrap or to opt out): isolation is never lost
silently. What a run writes back is read by :mod:`.records` as untrusted input.
"""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import queue
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from .forkserver import Zygote, ZygoteError
from .inside import RUNNER_SOURCE
from .records import MAX_RECORD_BYTES, RecordStream

log = logging.getLogger(__name__)

# Private uids: unique per live harness process (pid) and per concurrent run (slot < 64), so two
# harnesses on one machine never share a uid (the end-of-run sweep kills every process of that uid).
_UID_BASE = 1_000_000
_MAX_SLOTS = 64
ISOLATION_CHOICES = ("auto", "zygote", "bwrap", "none")
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora/RHEL: "
                "`sudo dnf install bubblewrap`), or opt out with `--isolation none` (generated programs then run "
                "with your user's rights; every report records the run as unisolated)")
_PROBE = {"mode": "asserts", "program": "import socket", "tests": "pass"}


class IsolationUnavailable(RuntimeError):
    """No isolating way to run programs works on this machine (and ``none`` was not chosen)."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): the fork server could not be started or replaced."""


def default_cache_root() -> Path:
    """Where elfreg keeps its caches: ``ELFREG_CACHE_DIR``, else ``~/.cache/elfreg/eval``."""
    return Path(os.environ.get("ELFREG_CACHE_DIR") or Path.home() / ".cache" / "elfreg" / "eval")


@dataclass
class SandboxConfig:
    """Limits and isolation choice for sandboxed programs (spec §6)."""

    memory_bytes: int = 4 << 30
    file_bytes: int = 64 << 20
    workdir_bytes: int = 256 << 20
    nproc: int = 64
    max_result_bytes: int = 256 << 20
    isolation: str = "auto"  # one of ISOLATION_CHOICES
    # The bubblewrap executable (name on PATH or path); ELFREG_BWRAP overrides, e.g. to test a machine without it.
    bwrap: str = field(default_factory=lambda: os.environ.get("ELFREG_BWRAP", "bwrap"))
    # The base interpreter, never a virtual environment's launcher: a venv may live under /tmp, which every
    # sandboxed program gets as a fresh tmpfs; the runner and the programs need the standard library only.
    python: str = field(default_factory=lambda: os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    # Host paths never visible inside (besides every elfreg installation and cache, always hidden): e.g. a
    # --data file or --cache-dir that lies inside the interpreter's installation.
    hide: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "file_bytes", "workdir_bytes", "nproc", "max_result_bytes"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"SandboxConfig.{name} must be positive, got {getattr(self, name)!r}")
        if self.isolation not in ISOLATION_CHOICES:
            raise ValueError(f"SandboxConfig.isolation must be one of {'|'.join(ISOLATION_CHOICES)}, "
                             f"got {self.isolation!r}")
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

    @property
    def isolated(self) -> bool:
        """Whether programs run isolated (bubblewrap); ``False`` is the explicit ``--isolation none``."""
        return self.kind == "bwrap"

    def describe(self) -> str:
        """One line for reports, e.g. ``bwrap+zygote+uid-drop`` or ``UNISOLATED none+rlimits+...``."""
        parts = ([self.kind] + (["zygote"] if self.fork_server else []) + (["rlimits"] if not self.isolated else [])
                 + (["uid-drop"] if self.uid_drop else [])
                 + (["netns"] if self.netns and self.kind != "bwrap" else [])
                 + (["pidns"] if self.pidns and self.kind != "bwrap" else []))
        return ("" if self.isolated else "UNISOLATED ") + "+".join(parts) + (f" ({self.reason})" if self.reason else "")


@dataclass
class RunResult:
    """Everything the harness learned from one sandboxed run."""

    stream: RecordStream  # the checked records, their arrival times, and a protocol violation if any
    timed_out: bool = False
    overflow: bool = False
    returncode: int | None = None
    wall_s: float = 0.0
    stderr: str = ""

    @property
    def records(self) -> list[dict]:
        return self.stream.records


def _ancestors(path: str) -> list[str]:
    p, out = Path(path), []
    for a in reversed(p.parents):
        if str(a) != "/":
            out.append(str(a))
    return out


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.lru_cache(maxsize=None)
def interpreter_paths(python: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(roots, import path)`` of the sandbox interpreter as it runs there (``python -I``): its installation
    prefixes and executable's folder, which the sandbox binds (an import path entry outside them, e.g. from a
    ``.pth`` file, is not bound), and the ``sys.path`` entries it imports from (real paths)."""
    code = "import json, sys; print(json.dumps([[sys.prefix, sys.exec_prefix, sys.base_prefix], sys.path]))"
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True, env={})
    prefixes, path = json.loads(out.stdout)
    roots = {os.path.realpath(p) for p in prefixes} - {"/"}  # an interpreter installed at / gets /usr only
    exe_dir = os.path.dirname(os.path.realpath(python))
    if not any(_inside(exe_dir, r) for r in roots):
        roots.add(exe_dir)
    return tuple(sorted(roots)), tuple(os.path.realpath(p) for p in path if p)


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


class Sandbox:
    """Runs payloads of :mod:`elfreg.sandbox.inside.runner` in isolation; thread-safe, one object per harness.

    With a fork server, one server per concurrently used slot stays up until :meth:`close` (or garbage
    collection / interpreter exit); ``with Sandbox() as sb:`` closes it at the end of the block.
    """

    def __init__(self, config: SandboxConfig | None = None, slots: int = _MAX_SLOTS) -> None:
        if not 1 <= slots <= _MAX_SLOTS:
            raise ValueError(f"Sandbox slots must be in 1..{_MAX_SLOTS}, got {slots}")
        self.config = config or SandboxConfig()
        # LIFO: concurrent runs reuse the lowest slots, so only as many fork servers start as there are workers.
        self._slots: queue.LifoQueue[int] = queue.LifoQueue()
        for i in reversed(range(slots)):
            self._slots.put(i)
        self._zygotes: dict[int, Zygote] = {}
        self._zlock = threading.Lock()
        self._closer = weakref.finalize(self, _close_all, self._zygotes)
        self._root = os.geteuid() == 0
        self._bwrap_exe = shutil.which(self.config.bwrap)
        self._unshare: list[str] = []
        self.isolation = self._probe()
        log.info("sandbox isolation: %s", self.isolation.describe())

    def close(self) -> None:
        """Stop the fork servers (also done at garbage collection and interpreter exit)."""
        self._closer()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ what the sandbox sees
    def hidden_paths(self) -> list[str]:
        """Host paths inside the bound installation that the sandbox covers with an empty, read-only folder or file:
        every elfreg installation and cache there, and ``SandboxConfig.hide``."""
        roots, import_path = interpreter_paths(self.config.python)
        wanted = elfreg_paths(import_path) + [os.path.realpath(p) for p in self.config.hide]
        return sorted({p for p in wanted if os.path.exists(p) and any(_inside(p, r) for r in roots)})

    def _bwrap_argv(self, uid_drop: bool, die_with_parent: bool = True) -> list[str]:
        argv = [self._bwrap_exe or "bwrap", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--new-session"]
        if die_with_parent:
            argv.append("--die-with-parent")
        if not self._root:
            argv.append("--unshare-user")
        argv += ["--ro-bind", "/usr", "/usr"]
        for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
            if os.path.islink(d):
                argv += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                argv += ["--ro-bind", d, d]
        for f in ("/etc/ld.so.cache", "/etc/localtime"):
            argv += ["--ro-bind-try", f, f]
        bound: set[str] = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"}
        made: set[str] = set()
        roots, _ = interpreter_paths(self.config.python)
        for root in roots:
            if any(_inside(root, b) for b in bound):
                continue
            # bwrap would create missing parents as 0700 root dirs; the unprivileged uid must traverse them.
            for a in _ancestors(root):
                if a not in made:
                    argv += ["--perms", "0755", "--dir", a]
                    made.add(a)
            argv += ["--ro-bind", root, root]
            bound.add(root)
        for path in self.hidden_paths():  # an empty read-only folder (or /dev/null) over each
            if os.path.isdir(path):
                argv += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
            else:
                argv += ["--ro-bind", "/dev/null", path]
        argv += ["--proc", "/proc", "--dev", "/dev",
                 "--size", str(self.config.workdir_bytes), "--perms", "01777", "--tmpfs", "/tmp",
                 "--size", str(self.config.workdir_bytes), "--perms", "01777", "--tmpfs", "/sandbox",
                 "--chdir", "/sandbox", "--clearenv"]
        for k, v in self._env("/sandbox").items():
            argv += ["--setenv", k, v]
        return argv

    @staticmethod
    def _env(home: str) -> dict[str, str]:
        return {"HOME": home, "TMPDIR": home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    # ------------------------------------------------------------------ probing
    def _probe(self) -> Isolation:
        want = self.config.isolation
        reason = ""
        if want in ("auto", "zygote"):
            iso = Isolation("bwrap", uid_drop=True, netns=True, fork_server=True)
            if not self._root:
                reason = "fork server needs root (a private uid per program); "
            elif self._bwrap_exe is None:
                reason = f"bubblewrap not found ({self.config.bwrap!r} is not on PATH); "
            else:
                try:
                    res = self._run_zygote(*self._prepare(_PROBE, None), 30.0)
                    if res.stream.passed():
                        return iso
                    reason = f"fork server probe failed (rc={res.returncode}, records={res.records[-1:]}); "
                except (OSError, SandboxError, subprocess.SubprocessError) as e:
                    reason = f"fork server probe failed: {e}; "
                _close_all(self._zygotes)
            if want == "zygote":
                raise IsolationUnavailable(f"isolation='zygote' requested but unavailable: {reason.strip('; ')}")
            if self._root:
                log.warning("sandbox: no fork server, a fresh interpreter per program: %s", reason.strip("; "))
        if want in ("auto", "bwrap"):
            if self._bwrap_exe is None:
                reason = f"bubblewrap not found ({self.config.bwrap!r} is not on PATH)"
            else:
                iso = Isolation("bwrap", uid_drop=self._root, netns=True)
                try:
                    res = self._run_raw(iso, *self._prepare(_PROBE, None), 30.0)
                    if res.stream.passed():
                        return iso
                    reason += f"bwrap probe failed (rc={res.returncode}): {res.stderr[-300:]}"
                except (OSError, subprocess.SubprocessError) as e:
                    reason += f"bwrap probe failed: {e}"
            raise IsolationUnavailable(f"no isolation for generated code on this machine: {reason.strip('; ')}. "
                                       f"To score code, {INSTALL_HINT}.")
        uid_drop = self._root and all(os.stat(a).st_mode & 0o001 for a in
                                      _ancestors(os.path.realpath(self.config.python)))
        self._unshare = self._unshare_prefix()
        reason = "isolation=none requested"
        if self._root and not uid_drop:
            reason += "; interpreter not reachable by an unprivileged uid, so no uid drop (no fork-bomb limit)"
        log.warning("sandbox: generated programs run UNISOLATED (--isolation none): %s", reason)
        return Isolation("none", uid_drop=uid_drop, netns=bool(self._unshare),
                         pidns="-p" in self._unshare, reason=reason)

    def _unshare_prefix(self) -> list[str]:
        """``unshare`` flags that work here: new network and PID namespaces (a program then cannot name,
        so cannot signal, the harness), else the network only, else none."""
        exe = shutil.which("unshare")
        if exe is None:
            return []
        user = [] if self._root else ["-r"]
        for flags in (["-n", "-p", "-f", "--mount-proc"], ["-n"]):
            argv = [exe, *user, *flags]
            if subprocess.run(argv + ["true"], capture_output=True).returncode == 0:
                return argv
        return []

    # ------------------------------------------------------------------ running
    def _nproc_limit(self) -> int:
        if self.isolation.uid_drop:
            return self.config.nproc
        # Same real uid as the harness: RLIMIT_NPROC counts all its tasks, so allow what exists plus a margin.
        uid, n = os.getuid(), 0
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    if os.stat(f"/proc/{p}").st_uid == uid:
                        n += len(os.listdir(f"/proc/{p}/task"))
                except OSError:
                    pass
        return n + self.config.nproc

    def run(self, payload: dict, deadline_s: float, stream: RecordStream | None = None) -> RunResult:
        """Run one payload, at most ``deadline_s`` seconds of wall time (the harness's clock); ``stream`` reads the
        records (a :class:`RecordStream`, or a subclass that compares and times them as they come)."""
        payload, stream = self._prepare(payload, stream)
        if self.isolation.fork_server:
            return self._run_zygote(payload, stream, deadline_s)
        return self._run_raw(self.isolation, payload, stream, deadline_s)

    @staticmethod
    def _prepare(payload: dict, stream: RecordStream | None) -> tuple[dict, RecordStream]:
        """The payload with a fresh token, and the stream that expects it."""
        stream = stream or RecordStream("")
        stream.token = secrets.token_hex(16)
        return dict(payload, token=stream.token), stream

    def _limits(self, payload: dict, uid: int | None, deadline_s: float) -> dict:
        payload = dict(payload)
        payload["rlimits"] = {
            "RLIMIT_AS": self.config.memory_bytes,
            "RLIMIT_FSIZE": self.config.file_bytes,
            "RLIMIT_CORE": 0,
            "RLIMIT_NPROC": self.config.nproc if uid is not None else self._nproc_limit(),
            "RLIMIT_CPU": int(deadline_s) + 2,
        }
        return payload

    def _zygote_for(self, slot: int) -> Zygote:
        z = self._zygotes.get(slot)
        if z is not None and z.alive():
            return z
        if z is not None:
            z.close()
        z = Zygote(self._bwrap_argv(True, die_with_parent=False), self.config.python, self.config.workdir_bytes)
        with self._zlock:
            self._zygotes[slot] = z
        return z

    def _drop_zygote(self, slot: int) -> None:
        with self._zlock:
            z = self._zygotes.pop(slot, None)
        if z is not None:
            z.close()

    def _run_zygote(self, payload: dict, stream: RecordStream, deadline_s: float) -> RunResult:
        slot = self._slots.get()
        try:
            uid = _UID_BASE + os.getpid() * _MAX_SLOTS + slot
            data = json.dumps(self._limits(payload, uid, deadline_s)).encode("utf-8", "surrogatepass")
            # The payload goes into a memfd that only the program's child reads: the server never sees it.
            mem = os.memfd_create("elfreg-payload", os.MFD_CLOEXEC)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(mem, view):]
                for attempt in (0, 1):  # a server that died since its last program is replaced once
                    try:
                        z = self._zygote_for(slot)
                    except ZygoteError as e:
                        raise SandboxError(f"the fork server could not be started: {e}") from None
                    r_fd, w_fd = _result_pipe()
                    t0 = time.monotonic()
                    try:
                        z.submit(uid, w_fd, mem)
                    except ZygoteError as e:
                        os.close(r_fd)
                        self._drop_zygote(slot)
                        if attempt:
                            raise SandboxError(f"the fork server failed twice: {e}") from None
                        continue
                    finally:
                        os.close(w_fd)
                    break
            finally:
                os.close(mem)
            try:
                res = self._collect(r_fd, t0, deadline_s, stream)
            finally:  # the server waits for this end of the run, whatever happened here
                try:
                    reply = z.finish()
                    if not reply["clean"]:
                        log.warning("sandbox: a process of uid %d survived its run; restarting the fork server", uid)
                        self._drop_zygote(slot)
                except ZygoteError as e:
                    log.warning("sandbox: fork server failed (%s); restarting it", e)
                    reply = {"rc": None}
                    self._drop_zygote(slot)
            res.returncode = reply["rc"]
            res.wall_s = time.monotonic() - t0
            return res
        finally:
            self._slots.put(slot)

    def _run_raw(self, iso: Isolation, payload: dict, stream: RecordStream, deadline_s: float) -> RunResult:
        slot = self._slots.get()
        uid = _UID_BASE + os.getpid() * _MAX_SLOTS + slot if iso.uid_drop else None
        workdir = None
        try:
            payload = dict(self._limits(payload, uid, deadline_s), uid=uid)
            py = [self.config.python, "-I", "-c", RUNNER_SOURCE]
            if iso.kind == "bwrap":
                argv, cwd, env = self._bwrap_argv(iso.uid_drop) + py, "/", {}
            else:
                workdir = tempfile.mkdtemp(prefix="elfreg-sbx-")
                if uid is not None:
                    os.chown(workdir, uid, uid)
                os.chmod(workdir, 0o700)
                argv, cwd, env = self._unshare + py, workdir, self._env(workdir)
            return self._communicate(argv, cwd, env, payload, deadline_s, stream, uid)
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            self._slots.put(slot)

    def _communicate(self, argv, cwd, env, payload, deadline_s, stream, uid) -> RunResult:
        r_fd, w_fd = _result_pipe()
        os.set_inheritable(w_fd, True)
        t0 = time.monotonic()
        # pass_fds keeps the number, so the child writes its records to the same fd number.
        payload["result_fd"] = w_fd
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, pass_fds=(w_fd,), start_new_session=True)
        os.close(w_fd)
        res = RunResult(stream)
        try:
            try:
                proc.stdin.write(json.dumps(payload).encode("utf-8", "surrogatepass"))
                proc.stdin.close()
            except BrokenPipeError:
                pass
            res = self._collect(r_fd, t0, deadline_s, stream)
        finally:
            self._kill(proc, uid)
            res.wall_s = time.monotonic() - t0
            res.returncode = proc.returncode
            try:
                res.stderr = proc.stderr.read(4096).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - diagnostics only
                res.stderr = ""
            proc.stderr.close()
        return res

    def _collect(self, r_fd: int, t0: float, deadline_s: float, stream: RecordStream) -> RunResult:
        """Feed result lines to ``stream`` (closing the pipe) until it stops, EOF, overflow or a deadline: the run's
        ``deadline_s`` or the stream's own (:meth:`RecordStream.due`), both on the harness's clock.

        A deadline is judged at a moment ``looked`` and only after everything in the pipe then has been read and
        fed: a harness that looks late (busy with another sample's comparison, which holds the GIL) may accept a
        late record, but never times out one written in time; the pipe holds a whole record (where the kernel
        lets it grow, :func:`_result_pipe`), so a program never waits for a busy harness either."""
        res = RunResult(stream)
        stream.started = t0

        def next_due() -> float:
            due = stream.due()
            return t0 + deadline_s if due is None else min(t0 + deadline_s, due)

        try:
            os.set_blocking(r_fd, False)
            capacity = _pipe_capacity(r_fd)
            buf, total = bytearray(), 0  # the record being written (no newline yet)
            while True:
                select.select([r_fd], [], [], max(0.0, next_due() - time.monotonic()))
                looked = time.monotonic()
                chunks, eof = _drain(r_fd, capacity)  # at least what the pipe held at `looked`
                data = b"".join(chunks)
                total += len(data)
                if total > self.config.max_result_bytes:
                    res.overflow = True
                    stream.violate(f"the program wrote more than {self.config.max_result_bytes:,} bytes of "
                                   "results")
                    break
                if b"\n" in data:  # a record's bytes are copied once more when it completes: linear in all
                    now = time.monotonic()
                    lines = (bytes(buf) + data).split(b"\n")
                    buf = bytearray(lines.pop())
                    if any(stream.feed(line, now) for line in lines):
                        break
                else:
                    buf += data  # a long record arrives in many small pieces: no copy of what came before
                if len(buf) > MAX_RECORD_BYTES:
                    stream.violate(f"result record {len(stream.records) + 1} is malformed: it is longer than "
                                   f"{MAX_RECORD_BYTES:,} bytes")
                    break
                if eof:
                    break
                if looked >= next_due():  # also when bytes keep coming but no record completes
                    res.timed_out = True
                    break
        finally:
            os.close(r_fd)
        return res

    @staticmethod
    def _kill(proc: subprocess.Popen, uid: int | None) -> None:
        """Kill the whole session; with a private uid also every process that uid still owns."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if uid is not None:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child of fork
                try:
                    os.setgid(uid)
                    os.setuid(uid)
                    os.kill(-1, signal.SIGKILL)  # every process of this uid except ourselves
                except BaseException:
                    pass
                os._exit(0)
            os.waitpid(pid, 0)


def _result_pipe() -> tuple[int, int]:
    """A pipe for result records, grown to hold a whole record (``MAX_RECORD_BYTES``) where the kernel allows it
    (``CAP_SYS_RESOURCE``; else up to ``/proc/sys/fs/pipe-max-size``, usually 1 MiB), so a program that wrote its
    record in time never waits on a harness that reads late."""
    r_fd, w_fd = os.pipe()
    for size in (MAX_RECORD_BYTES, _PIPE_MAX_SIZE):
        try:
            fcntl.fcntl(r_fd, fcntl.F_SETPIPE_SZ, size)
            break
        except OSError:
            continue
    return r_fd, w_fd


def _read_pipe_max() -> int:
    try:
        return int(Path("/proc/sys/fs/pipe-max-size").read_text())
    except (OSError, ValueError):
        return 1 << 16


_PIPE_MAX_SIZE = _read_pipe_max()


def _pipe_capacity(fd: int) -> int:
    try:
        return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except OSError:
        return 1 << 16


def _drain(fd: int, at_least: int) -> tuple[list[bytes], bool]:
    """Read a non-blocking pipe until it is empty or ``at_least`` bytes came (all it held when called);
    ``(chunks, eof)``."""
    chunks, n = [], 0
    while n < at_least:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return chunks, False
        if not chunk:
            return chunks, True
        chunks.append(chunk)
        n += len(chunk)
    return chunks, False


def _close_all(zygotes: dict) -> None:
    for slot in list(zygotes):
        z = zygotes.pop(slot, None)
        if z is not None:
            z.close()
