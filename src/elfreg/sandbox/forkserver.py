"""Harness side of the fork server (spec §6): start :mod:`.inside.server` under bubblewrap, hand it programs.

A :class:`Zygote` is used by one worker at a time. It is disposable: any protocol error, timeout, death
or an unclean end of a run (a process of the run's uid survived the kill) closes it, and the sandbox
starts a fresh one for the next program. The server receives a uid and two descriptors per program, never a
payload: the payload sits in a memfd that only the program's child reads. Verdicts never depend on what the
server says: records come straight from the child over a pipe the harness created.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import time

from .inside import SERVER_SOURCE

_NO_UID = 0xFFFFFFFF


class ZygoteError(RuntimeError):
    """The fork server failed, stalled or broke the protocol; it has been (or must be) discarded."""


class Zygote:
    """One fork server process; ``prefix`` is the bwrap argv (namespaces, mounts, env) to run it under, ``python``
    the interpreter's command (``[path, flags...]``); with ``profile`` each :meth:`finish` also says when the server
    got the program and when its child reached each step (:mod:`.profile`)."""

    def __init__(self, prefix: list[str], python: list[str], workdir_bytes: int, timeout_s: float = 30.0,
                 profile: bool = False) -> None:
        self.timeout_s = timeout_s
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = ours
        self._err = tempfile.TemporaryFile()
        argv = prefix + python + ["-c", SERVER_SOURCE, "--zygote", str(theirs.fileno()), str(workdir_bytes)] + \
            (["--profile"] if profile else [])
        try:
            # No --die-with-parent: its signal fires when the *thread* that started it exits; instead the
            # server exits on EOF of the control socket, which the kernel closes when the harness dies (a child
            # forked from the harness closes its copy at once: Sandbox._forget).
            self.proc = subprocess.Popen(argv, cwd="/", env={}, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self._err,
                                         pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        self._buf = b""
        try:
            hello = self._reply()
            if not hello.get("ready"):
                raise ZygoteError(str(hello.get("error")))
        except ZygoteError as e:
            msg = f"fork server did not start: {e}; stderr: {self._stderr()}"
            self.close()
            raise ZygoteError(msg) from None

    def alive(self) -> bool:
        """Whether the server process still runs (it may still misbehave later; callers handle that)."""
        return self.proc is not None and self.proc.poll() is None

    def submit(self, uid: int | None, result_w: int, payload_fd: int) -> None:
        """Start one program as ``uid``: its child reads the payload from ``payload_fd`` (a memfd) and writes its
        records to ``result_w`` (the caller keeps and closes both)."""
        try:
            self._sock.settimeout(self.timeout_s)
            socket.send_fds(self._sock, [struct.pack("!I", _NO_UID if uid is None else uid)], [result_w, payload_fd])
        except OSError as e:
            raise ZygoteError(f"submit failed: {e}") from None

    def finish(self) -> dict:
        """End the current program (kill it and everything of its uid); returns ``{"rc", "clean"}`` (and with
        ``profile``, ``"prof"``: monotonic times, the request's arrival then the child's steps)."""
        try:
            self._sock.settimeout(self.timeout_s)
            self._sock.sendall(b"K")
        except OSError as e:
            raise ZygoteError(f"finish failed: {e}") from None
        reply = self._reply()
        if not isinstance(reply.get("rc"), int) or not isinstance(reply.get("clean"), bool):
            raise ZygoteError(f"bad reply {str(reply)[:100]}")
        prof = reply.get("prof")
        if prof is not None and not (isinstance(prof, list) and len(prof) <= 8
                                     and all(type(t) is float for t in prof)):
            raise ZygoteError(f"bad reply {str(reply)[:100]}")
        return reply

    def _reply(self) -> dict:
        deadline = time.monotonic() + self.timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ZygoteError(f"no reply within {self.timeout_s:.0f}s")
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                continue
            try:
                chunk = self._sock.recv(4096)
            except OSError as e:
                raise ZygoteError(f"reply failed: {e}") from None
            if not chunk:
                raise ZygoteError(f"server exited (rc={self.proc.poll()})")
            self._buf += chunk
            if len(self._buf) > 1 << 16:
                raise ZygoteError("oversized reply")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            obj = json.loads(line)
        except ValueError:
            raise ZygoteError(f"garbled reply {line[:100]!r}") from None
        if not isinstance(obj, dict):
            raise ZygoteError(f"garbled reply {line[:100]!r}")
        return obj

    def _stderr(self) -> str:
        try:
            self._err.seek(0)
            return self._err.read()[-600:].decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def forget(self) -> None:
        """In a child forked from the harness: close this process's copies of the server's descriptors and never
        touch the server (the parent drives it; it must see EOF when the parent dies)."""
        if self.proc is None:
            return
        self.proc = None
        try:
            os.close(self._sock.detach())
        except OSError:
            pass
        try:
            self._err.close()
        except OSError:
            pass

    def close(self) -> None:
        """Kill the server and everything in its PID namespace (idempotent)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap and its PID-1: the namespace dies with it
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.proc = None
        self._sock.close()
        self._err.close()
