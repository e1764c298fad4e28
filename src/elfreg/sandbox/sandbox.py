"""The sandbox for generated code, harness side (spec §6: "generated code is untrusted: run it isolated").

Each program runs in its own process, in a throwaway directory, in its own session (process group), with
rlimits (address space, file size, open files, processes, CPU), a seccomp filter, no stdin, output discarded, a
wall-clock deadline kept by the harness, and, where the host lets elfreg make one, a memory cgroup that counts
everything its processes hold (:mod:`.memcg`). When bubblewrap works it adds: a read-only view of an allow-list
only, the interpreter's standard library and the libraries it loads (:mod:`.layout`: no site-packages, home,
project, data or virtual environment); a size-capped tmpfs as working directory; and new PID/network/IPC/UTS
namespaces. When the harness runs as root the program runs under its own unprivileged uid, so the process limit
holds and it cannot signal or write anything it does not own.

Two ways to start the process (``SandboxConfig.isolation``):

* ``zygote`` (default when root and bwrap work): one bwrap-isolated fork server per worker
  (:mod:`.forkserver`), a template that forks a fresh child per program and never reads a payload; the payload
  goes to that child alone. Same isolation, a few milliseconds per program.
* ``bwrap``: a fresh ``python -I -S`` per program under bwrap (~0.1 s each).
* ``none``: an explicit opt-out, recorded as *unisolated*: a fresh ``python -I -S`` per program with the
  rlimits only (plus, where ``unshare`` works, new network and PID namespaces; as root, the uid drop).

No process of the sandbox outlives the harness: a fork server exits when its control socket closes, which the
harness's forked children (text workers) close at fork; a fresh interpreter dies with the harness thread that
started it (bubblewrap's ``--die-with-parent``, or ``setpriv --pdeathsig`` and ``unshare --kill-child``).

``auto`` takes the first of ``zygote`` and ``bwrap`` that works and otherwise refuses
(:class:`IsolationUnavailable`, saying how to install bubblewrap or to opt out): isolation is never lost
silently. What a run writes back is read by :mod:`.collect` and :mod:`.records` as untrusted input.

This module holds the :class:`Sandbox` (probing, slots and fork servers, running and killing one program); its
settings are :mod:`.config`'s, the command lines that start a program :mod:`.bwrap`'s.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref

from .bwrap import bwrap_argv, hidden_paths, sandbox_env, unshare_prefix
from .collect import RunResult, collect, result_pipe
from .config import INSTALL_HINT, Isolation, IsolationUnavailable, SandboxConfig, SandboxError, machine_memory, size_text
from .forkserver import Zygote, ZygoteError
from .inside import RUNNER_SOURCE
from .inside.runner import pack_payload
from .layout import ancestors
from .memcg import MemoryCgroups
from .profile import OFF, SandboxProfile, Stamps, read_marks, split_run
from .records import RecordStream
from ..moved import moved

__all__ = ["Sandbox"]


log = logging.getLogger(__name__)

# Private uids: unique per live harness process (pid) and per concurrent run (slot < 64), so two
# harnesses on one machine never share a uid (the end-of-run sweep kills every process of that uid).
_UID_BASE = 1_000_000
_MAX_SLOTS = 64
_PROBE = {"mode": "asserts", "program": "import socket", "tests": "pass"}


class Sandbox:
    """Runs payloads of :mod:`elfreg.sandbox.inside.runner` in isolation; thread-safe, one object per harness.

    With a fork server, one server per concurrently used slot stays up until :meth:`close` (or garbage
    collection / interpreter exit); ``with Sandbox() as sb:`` closes it at the end of the block.

    With a ``profile`` (:mod:`.profile`, for benchmarks) every run after the probe adds the split of its wall time.
    """

    def __init__(self, config: SandboxConfig | None = None, slots: int = _MAX_SLOTS,
                 profile: SandboxProfile | None = None) -> None:
        if not 1 <= slots <= _MAX_SLOTS:
            raise ValueError(f"Sandbox slots must be in 1..{_MAX_SLOTS}, got {slots}")
        self.config = config or SandboxConfig()
        # LIFO: concurrent runs reuse the lowest slots, so only as many fork servers start as there are workers.
        self._slots: queue.LifoQueue[int] = queue.LifoQueue()
        for i in reversed(range(slots)):
            self._slots.put(i)
        self._zygotes: dict[int, Zygote] = {}
        self._zlock = threading.Lock()
        self._fds: set[int] = set()  # descriptors of runs in progress (closed in a forked child of the harness)
        self._argv: dict[tuple[bool, bool], list[str]] = {}
        self._memcg, memcg_why = MemoryCgroups.open()
        self._closer = weakref.finalize(self, _close_all, self._zygotes, self._memcg)
        _LIVE.add(self)
        self._root = os.geteuid() == 0
        self._bwrap_exe = shutil.which(self.config.bwrap)
        self._unshare: list[str] = []
        self._profiling = profile is not None  # fork servers are started with --profile
        self.profile: SandboxProfile | None = None  # the probe's run is not counted
        self.isolation = self._probe()
        self.profile = profile
        self.isolation.memcg = self._memcg.describe() if self._memcg else ""
        log.info("sandbox isolation: %s%s", self.isolation.describe(),
                 "" if self._memcg else f" (no memory cgroup: {memcg_why}; memfd and SysV shared memory refused, "
                 "the memory limit is per process)")

    def close(self) -> None:
        """Stop the fork servers and remove the memory cgroups (also done at garbage collection and interpreter
        exit)."""
        self._closer()

    def _forget(self) -> None:
        """In a child forked from the harness (a text worker): close every descriptor of the sandbox's servers and
        runs, and never touch them (they are the parent's), so they end with the parent."""
        for z in list(self._zygotes.values()):
            z.forget()
        self._zygotes.clear()
        for fd in list(self._fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
        self._memcg = None
        self._closer.detach()

    def _track(self, *fds: int) -> None:
        self._fds.update(fds)

    def _release(self, fd: int) -> None:
        """Close ``fd`` after dropping it from the tracked set (never the other way round: a fork in between must
        not close a number the parent has reused)."""
        self._fds.discard(fd)
        os.close(fd)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ what the sandbox sees
    def _bwrap_argv(self, uid_drop: bool, die_with_parent: bool = True) -> list[str]:
        """The bwrap command line (namespaces, the allow-list's mounts, the environment), built once per kind."""
        key = (uid_drop, die_with_parent)
        if key not in self._argv:
            self._argv[key] = bwrap_argv(self.config, self._bwrap_exe, self._root, die_with_parent)
        return list(self._argv[key])

    def hidden_paths(self) -> list[str]:
        """Host paths inside the bound folders that the sandbox covers (``bwrap.hidden_paths``)."""
        return hidden_paths(self.config)

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
            # Installing bubblewrap helps only where it is missing; where it is there but failed, the reason says why.
            todo = INSTALL_HINT if self._bwrap_exe is None else (
                f"make bubblewrap ({self._bwrap_exe}) work here (the reason above), or opt out with `--isolation none`")
            raise IsolationUnavailable(f"no isolation for generated code on this machine: {reason.strip('; ')}. "
                                       f"To score code, {todo}.")
        uid_drop = self._root and all(os.stat(a).st_mode & 0o001 for a in
                                      ancestors(self.config.python))
        self._unshare = unshare_prefix(self._root)
        reason = "isolation=none requested"
        if self._root and not uid_drop:
            reason += "; interpreter not reachable by an unprivileged uid, so no uid drop (no fork-bomb limit)"
        log.warning("sandbox: generated programs run UNISOLATED (--isolation none): %s", reason)
        return Isolation("none", uid_drop=uid_drop, netns=bool(self._unshare),
                         pidns="-p" in self._unshare, reason=reason)

    def _python(self) -> list[str]:
        """The sandboxed interpreter's command: isolated mode, no site folders (layout.py)."""
        return [self.config.python, "-I", "-S"]

    # ------------------------------------------------------------------ running
    def _nproc_limit(self) -> int:
        """The process limit of a program run under the harness's own uid (no uid drop, e.g. not root)."""
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
            "RLIMIT_NOFILE": self.config.open_files,
            "RLIMIT_CPU": int(deadline_s) + 2,
        }
        return payload

    def _enter_memcg(self, slot: int, limit: int) -> list[str]:
        """The argv prefix that starts a process in ``slot``'s memory cgroup limited to ``limit`` (none without)."""
        if self._memcg is None:
            return []
        self._memcg.prepare(slot, limit)
        return self._memcg.enter(slot)

    def _oom_kills(self, slot: int) -> int:
        return self._memcg.oom_kills(slot) if self._memcg is not None else 0

    def _memory_killed(self, res: RunResult, slot: int, before: int) -> None:
        """Fail ``res`` if the kernel killed a process of its slot's cgroup for want of memory since ``before``."""
        if self._oom_kills(slot) > before:
            res.killed = (f"killed: its processes used more than the memory limit ({size_text(self.config.memory_bytes)}"
                          ", memfd, shared memory and tmpfs files included)")

    def _zygote_for(self, slot: int) -> Zygote:
        z = self._zygotes.get(slot)
        if z is not None and z.alive():
            return z
        if z is not None:
            z.close()
        # The server starts without a limit of its own; once ready, its cgroup gets the program's memory on top of
        # what the server holds (every program inherits those pages copy-on-write).
        prefix = self._enter_memcg(slot, machine_memory())
        z = Zygote(prefix + self._bwrap_argv(True, die_with_parent=False), self._python(), self.config.workdir_bytes,
                   profile=self._profiling)
        if self._memcg is not None:
            try:
                self._memcg.set_limit(slot, self.config.memory_bytes + self._memcg.usage(slot))
            except OSError as e:
                z.close()
                raise ZygoteError(f"could not limit the fork server's memory cgroup: {e}") from None
        with self._zlock:
            self._zygotes[slot] = z
        return z

    def _drop_zygote(self, slot: int) -> None:
        with self._zlock:
            z = self._zygotes.pop(slot, None)
        if z is not None:
            z.close()

    def _stamps(self, stream: RecordStream) -> Stamps:
        """The stamps of a run (:mod:`.profile`): real ones with a profile, else ones that record nothing."""
        if self.profile is None:
            return OFF
        stream.feed_s = 0.0
        return Stamps()

    def _run_zygote(self, payload: dict, stream: RecordStream, deadline_s: float) -> RunResult:
        stamp = self._stamps(stream)
        slot = self._slots.get()
        try:
            stamp("slot wait")
            uid = _UID_BASE + os.getpid() * _MAX_SLOTS + slot
            data = pack_payload(self._limits(payload, uid, deadline_s))
            # The payload goes into a memfd that only the program's child reads: the server never sees it.
            mem = os.memfd_create("elfreg-payload", os.MFD_CLOEXEC)
            self._track(mem)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(mem, view):]
                stamp("payload")
                for attempt in (0, 1):  # a server that died since its last program is replaced once
                    try:
                        z = self._zygote_for(slot)
                    except ZygoteError as e:
                        raise SandboxError(f"the fork server could not be started: {e}") from None
                    stamp("server start")
                    r_fd, w_fd = result_pipe()
                    self._track(r_fd, w_fd)
                    stamp("payload")
                    ooms = self._oom_kills(slot)
                    stamp("memcg")
                    t0 = time.monotonic()
                    try:
                        z.submit(uid, w_fd, mem)
                    except ZygoteError as e:
                        self._release(r_fd)
                        self._drop_zygote(slot)
                        if attempt:
                            raise SandboxError(f"the fork server failed twice: {e}") from None
                        continue
                    finally:
                        self._release(w_fd)
                    break
            finally:
                self._release(mem)
            try:
                res = collect(r_fd, t0, deadline_s, stream, self.config.max_result_bytes, self._release)
            finally:  # the server waits for this end of the run, whatever happened here
                stamp("inputs")
                try:
                    reply = z.finish()
                    if not reply["clean"]:
                        log.warning("sandbox: a process of uid %d survived its run; restarting the fork server", uid)
                        self._drop_zygote(slot)
                except ZygoteError as e:
                    log.warning("sandbox: fork server failed (%s); restarting it", e)
                    reply = {"rc": None}
                    self._drop_zygote(slot)
            stamp("teardown")
            res.returncode = reply["rc"]
            res.wall_s = time.monotonic() - t0
            self._memory_killed(res, slot, ooms)
            stamp("memcg")
            self._profiled(slot, "zygote", stamp, reply.get("prof") or [], stream)
            return res
        finally:
            self._slots.put(slot)

    def _profiled(self, slot: int, kind: str, stamps: Stamps, inside: list[float], stream: RecordStream) -> None:
        """Add the run's split to the profile (none: nothing to do)."""
        if stamps is not OFF and self.profile is not None:
            self.profile.add(split_run(slot, kind, stamps, inside, stream.arrivals, stream.records,
                                       stream.feed_s or 0.0))

    def _run_raw(self, iso: Isolation, payload: dict, stream: RecordStream, deadline_s: float) -> RunResult:
        stamp = self._stamps(stream)
        slot = self._slots.get()
        stamp("slot wait")
        uid = _UID_BASE + os.getpid() * _MAX_SLOTS + slot if iso.uid_drop else None
        workdir = None
        try:
            payload = dict(self._limits(payload, uid, deadline_s), uid=uid)
            py = self._python() + ["-c", RUNNER_SOURCE]
            stamp("payload")
            prefix = self._enter_memcg(slot, self.config.memory_bytes)
            stamp("memcg")
            if iso.kind == "bwrap":
                argv, cwd, env = prefix + self._bwrap_argv(iso.uid_drop) + py, "/", {}
            else:
                workdir = tempfile.mkdtemp(prefix="elfreg-sbx-")
                if uid is not None:
                    os.chown(workdir, uid, uid)
                os.chmod(workdir, 0o700)
                argv, cwd, env = prefix + self._unshare + py, workdir, sandbox_env(workdir)
            stamp("payload")
            ooms = self._oom_kills(slot)
            stamp("memcg")
            res, marks = self._communicate(argv, cwd, env, payload, deadline_s, stream, uid, stamp)
            self._memory_killed(res, slot, ooms)
            stamp("memcg")
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)
            self._slots.put(slot)
        stamp("teardown")
        self._profiled(slot, "fresh", stamp, marks, stream)
        return res

    def _communicate(self, argv, cwd, env, payload, deadline_s, stream, uid, stamp=OFF) -> tuple[RunResult, list]:
        """Run ``argv`` on ``payload``; also the times the runner wrote to its profile pipe (with a profile)."""
        r_fd, w_fd = result_pipe()
        self._track(r_fd, w_fd)
        os.set_inheritable(w_fd, True)
        pass_fds, prof_r = [w_fd], None
        if stamp is not OFF:  # the runner's own steps, on a pipe it closes before the payload's code runs
            prof_r, prof_w = os.pipe()
            self._track(prof_r, prof_w)
            os.set_inheritable(prof_w, True)
            pass_fds.append(prof_w)
            argv = argv + ["--profile", str(prof_w)]
        stamp("payload")
        t0 = time.monotonic()
        # pass_fds keeps the number, so the child writes its records to the same fd number.
        payload["result_fd"] = w_fd
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, pass_fds=pass_fds, start_new_session=True)
        except BaseException:
            self._release(r_fd)
            if prof_r is not None:
                self._release(prof_r)
            raise
        finally:
            self._release(w_fd)
            if prof_r is not None:
                self._release(prof_w)
        stamp("spawn")
        res = RunResult(stream)
        try:
            try:
                proc.stdin.write(pack_payload(payload))
                proc.stdin.close()
            except BrokenPipeError:
                pass
            res = collect(r_fd, t0, deadline_s, stream, self.config.max_result_bytes, self._release)
        finally:
            stamp("inputs")
            self._kill(proc, uid)
            res.wall_s = time.monotonic() - t0
            res.returncode = proc.returncode
            try:
                res.stderr = proc.stderr.read(4096).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - diagnostics only
                res.stderr = ""
            proc.stderr.close()
        marks = []
        if prof_r is not None:
            self._fds.discard(prof_r)
            marks = read_marks(prof_r)
        return res, marks

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


# names this module held before the settings and command lines moved out, and no longer uses
__getattr__ = moved(__name__, {"ISOLATION_CHOICES": "elfreg.sandbox.config",
                               "default_cache_root": "elfreg.sandbox.config", "elfreg_paths": "elfreg.sandbox.bwrap"})


def _close_all(zygotes: dict, memcg: MemoryCgroups | None = None) -> None:
    for slot in list(zygotes):
        z = zygotes.pop(slot, None)
        if z is not None:
            z.close()
    if memcg is not None:
        memcg.close()


# Every live sandbox of this process, so that a child forked from it (os.fork: multiprocessing's text workers)
# lets go of their servers and runs at once; otherwise its copy of a control socket would keep a fork server
# running after the harness died.
_LIVE: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def _forget_all() -> None:
    for sb in list(_LIVE):
        sb._forget()
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_all)
