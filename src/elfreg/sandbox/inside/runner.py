"""The runner: the code that turns one payload into result records, inside the sandboxed process (spec §6).

Standard library only, and no ``from __future__`` import: the sandbox runs it as the second part of
:data:`elfreg.sandbox.inside.SOURCE` (after the codec, whose names it uses), in a fresh ``python -I`` or in a
child of the fork server. The payload reaches only the process that runs it (stdin, or a memfd handed to that
child alone); records go to the already-open fd ``result_fd``, one JSON object per line, in the fixed layouts of
:mod:`elfreg.sandbox.records` (the harness checks every one of them as untrusted input).

Before any payload code runs, the runner applies the payload's rlimits, forbids new privileges, installs a
seccomp filter, drops to the run's private uid and points stdin/stdout/stderr at ``/dev/null``. The filter refuses
(EPERM) the kernel keyring calls (the one store that outlives every process of a uid: without it, one program
could leave its code there for the next program of the same worker), the memory that lies outside the address
space limit: ``memfd_create``, ``memfd_secret``, SysV ``shmget`` and ``msgget`` (a file or segment written without
staying mapped, pinned in the kernel however little address space the program has), and new user namespaces
(``unshare`` or ``clone`` with ``CLONE_NEWUSER``; ``clone3`` answers ENOSYS): kernel surface a program has no use
for.

Modes:

* ``asserts`` — ``program`` then ``tests`` in one namespace; a pass is a record carrying the run's token (an
  early exit or a crash never is one). The sandbox's probe and the tests' yardstick only: a program sharing a
  process with its tests can forge a pass, so scoring never uses it.
* ``io`` — differential tests (EvalPlus): ``ready`` once the program is loaded, then the encoded output of
  ``entry_point`` on each input; the harness times and compares them. The inputs come as codec text
  (``inputs``) or, when the harness could write them so, as ``marshal`` data (``inputs_marshal``: one part per
  test set, each a list of argument lists; trusted, as the harness wrote it): read about five times faster.
* ``calls`` — the tested side of the original tests: ``program`` (then the tests' ``setup``) answers the
  recorded calls ``[name, args, kwargs]``, timed and compared by the harness like ``io``.
* ``record`` (the reference solution) — the original tests run with every call to the program's functions
  recorded (arguments and outputs) and answered with the *decoded* output, as a replay would answer it.
* ``check`` (no program) — the original tests replayed against outputs another process produced: each call
  must match the next recorded call and is answered with that output, decoded to builtin values only.

A payload on the wire (:func:`pack_payload`): one line of JSON, then the binary parts the line names by length.
"""

import json
import sys

if "encode_output" not in globals():  # imported as a module (tests, linters); in the sandbox the codec is above
    from elfreg.sandbox.inside.codec import NotPlain, Ref, decode_plain, decode_text, encode_output, encode_text

# seccomp: the audit arch and the refused syscalls' numbers, per machine: add_key, request_key, keyctl;
# memfd_create, memfd_secret; shmget, msgget.
_DENIED_SYSCALLS = {"x86_64": (0xC000003E, (248, 249, 250, 319, 447, 29, 68)),
                    "aarch64": (0xC00000B7, (217, 218, 219, 279, 447, 194, 186))}
# ... and the calls that make a new user namespace, refused by their flags: unshare, clone (flags: the first
# argument on both), and clone3 (its flags sit in memory a filter cannot read: ENOSYS, on which the C library
# falls back to clone for threads and processes).
_NAMESPACE_SYSCALLS = {"x86_64": (272, 56, 435), "aarch64": (97, 220, 435)}
_CLONE_NEWUSER = 0x10000000


# Payload keys whose value is a list of bytes: on the wire, their lengths in the JSON line, their bytes after it.
BINARY_KEYS = ("inputs_marshal",)


def pack_payload(payload):
    """The payload's bytes: its JSON (binary parts as their lengths), a newline, then the binary parts in order."""
    head, parts = dict(payload), []
    for key in BINARY_KEYS:
        if key in head:
            parts.extend(head[key])
            head[key] = [len(b) for b in head[key]]
    # json.dumps escapes every newline inside strings, so the first newline ends the JSON
    return b"".join([json.dumps(head).encode("utf-8", "surrogatepass"), b"\n"] + parts)


def unpack_payload(data):
    """Inverse of :func:`pack_payload` (binary parts come back as memoryviews of ``data``)."""
    end = data.index(b"\n")
    payload, view, at = json.loads(data[:end]), memoryview(data), end + 1
    for key in BINARY_KEYS:
        if key in payload:
            parts = []
            for n in payload[key]:
                parts.append(view[at:at + n])
                at += n
            payload[key] = parts
    return payload


_FILTER = []  # (libc, the compiled filter or None), built once per process (the fork server builds it at start)


def denied_filter():
    """``(libc, sock_fprog or None)``: the seccomp program that refuses the denied calls on this machine."""
    if _FILTER:
        return _FILTER[0]
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    arch = _DENIED_SYSCALLS.get(os.uname().machine)
    fprog = None
    if arch is not None:
        audit_arch, numbers = arch
        ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
        allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050001  # SECCOMP_RET_ALLOW, KILL_PROCESS, ERRNO|EPERM
        prog = [(ld, 0, 0, 4), (jeq, 1, 0, audit_arch), (ret, 0, 0, kill), (ld, 0, 0, 0)]
        if audit_arch == 0xC000003E:  # x32 calls carry bit 30: refuse them all rather than list them
            prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]
        for nr in numbers:
            prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
        unshare_nr, clone_nr, clone3_nr = _NAMESPACE_SYSCALLS[os.uname().machine]
        jset, enosys = 0x45, 0x00050026  # BPF_JMP|JSET|K; SECCOMP_RET_ERRNO|ENOSYS
        prog += [(jeq, 0, 1, clone3_nr), (ret, 0, 0, enosys),
                 (jeq, 1, 0, unshare_nr), (jeq, 0, 3, clone_nr),
                 (ld, 0, 0, 16), (jset, 0, 1, _CLONE_NEWUSER), (ret, 0, 0, eperm)]  # args[0], low 32 bits
        prog.append((ret, 0, 0, allow))

        class Filter(ctypes.Structure):
            _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                        ("k", ctypes.c_uint)]

        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

        filters = (Filter * len(prog))(*[Filter(*f) for f in prog])
        fprog = (Prog(len(prog), filters), filters)  # keep the array alive with the program
    _FILTER.append((libc, fprog))
    return _FILTER[0]


def deny_syscalls():  # pragma: no cover - runs in the sandbox (tests/sandbox/test_payload_isolation.py)
    """Forbid new privileges and make the denied calls (keyrings, memfd, SysV shared memory and message queues, new
    user namespaces) fail with EPERM in this process and its children.

    Returns False on a machine whose syscall numbers are not in the table (only "no new privileges" is set)."""
    import ctypes

    libc, fprog = denied_filter()
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if fprog is None:
        return False
    if libc.prctl(22, 2, ctypes.byref(fprog[0]), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    return True


def output_line(i, out) -> bytes:
    """The record of call ``i``'s output, in the one layout the harness compares byte for byte."""
    enc = encode_output(out)
    if "v" in enc:
        return b'{"i":%d,"v":%s}\n' % (i, json.dumps(enc["v"]).encode())
    return b'{"i":%d,"sha":"%s","n":%d}\n' % (i, enc["sha"].encode(), enc["n"])


def marker(fd):
    """A function that writes the time (``time.monotonic()``, 8 bytes) to ``fd`` at each call, and closes ``fd``
    when called with ``last=True``; the profile of a run (elfreg.sandbox.profile), None when ``fd`` is None.

    The last call comes before any payload code runs: nothing a program does can reach that descriptor."""
    if fd is None:
        return None
    import os
    import struct
    import time

    def mark(last=False):
        try:
            os.write(fd, struct.pack("d", time.monotonic()))
        except OSError:
            pass
        if last:
            os.close(fd)
    return mark


def main():  # pragma: no cover - fresh-interpreter entry point
    """A fresh interpreter: the payload arrives on stdin; with ``--profile FD``, the time of each step goes to FD."""
    mark = marker(int(sys.argv[2]) if sys.argv[1:2] == ["--profile"] else None)
    if mark is not None:
        mark()  # the interpreter has started and read the runner
    payload = unpack_payload(sys.stdin.buffer.read())
    if mark is not None:
        mark()
    run_payload(payload, mark)


def run_payload(payload, mark=None):  # pragma: no cover - exercised through the sandbox tests
    """Apply the payload's limits and uid, silence stdio, run the payload and report; never returns. ``mark``
    (:func:`marker`) is called once the limits, the filter and the uid hold, before any payload code."""
    import os
    import resource

    sys.set_int_max_str_digits(0)
    # Bound now, so a program that monkeypatches os/json cannot change how the runner reports.
    write, dumps, exit_, out_fd = os.write, json.dumps, os._exit, payload["result_fd"]

    def send(data):
        while data:
            data = data[write(out_fd, data):]

    def emit(rec):
        send((dumps(rec, separators=(",", ":")) + "\n").encode())

    for name, value in payload["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    deny_syscalls()
    if payload.get("uid") is not None:
        os.setgroups([])
        os.setgid(payload["uid"])
        os.setuid(payload["uid"])
    if mark is not None:
        mark(last=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # no stdin; prints go nowhere (gigabytes of output cost nothing)
        os.dup2(devnull, fd)
    os.close(devnull)
    token = payload.pop("token")
    mode = payload["mode"]
    try:
        program = compile(payload.pop("program"), "solution.py", "exec")
    except BaseException as e:  # noqa: BLE001 - a program that does not compile fails
        emit({"status": "fail", "error": type(e).__name__, "msg": str(e)[:300]})
        exit_(0)
    g = {"__name__": "__solution__", "__builtins__": __builtins__}

    if mode == "asserts":
        try:
            exec(program, g)
            exec(compile(payload.pop("tests"), "tests.py", "exec"), g)
        except BaseException as e:  # noqa: BLE001 - SystemExit included: exiting early is a failure
            emit({"status": "fail", "error": type(e).__name__, "msg": str(e)[:300]})
            exit_(0)
        emit({"status": "pass", "token": token})
        exit_(0)
    if mode in ("record", "check"):
        _run_tests(payload, program, g, emit, send, token)
        exit_(0)

    try:
        exec(program, g)
        if mode == "calls":
            exec(compile(payload.get("setup", ""), "setup.py", "exec"), g)
            calls = decode_text(payload.pop("calls"), refs=g)
        else:
            entry = payload["entry_point"]
            if "inputs_marshal" in payload:
                import marshal

                inputs = [args for part in payload.pop("inputs_marshal") for args in marshal.loads(part)]
            else:
                inputs = decode_text(payload.pop("inputs"))
            calls = [(entry, args, {}) for args in inputs]
    except BaseException as e:  # noqa: BLE001
        emit({"status": "fail", "error": type(e).__name__, "msg": str(e)[:300]})
        exit_(0)
    emit({"status": "ready"})  # the harness starts the first call's clock here
    for i, (name, args, kwargs) in enumerate(calls):
        try:
            line = output_line(i, g[name](*args, **kwargs))
        except BaseException as e:  # noqa: BLE001
            line = (dumps({"i": i, "error": type(e).__name__}, separators=(",", ":")) + "\n").encode()
        send(line)
    emit({"status": "done", "token": token})
    exit_(0)


class _Diverged(BaseException):
    """The tests made a call the recording does not have (or got a value that is not plain): the check fails.

    A BaseException, so a test's own ``except Exception`` cannot swallow it; its message is the verdict's detail."""


def _run_tests(payload, program, g, emit, send, token):  # pragma: no cover - runs in the sandbox
    """``record``: the reference answers each call live and every call is recorded; ``check``: no program
    runs, each call is answered from ``payload["outputs"]`` after matching the recorded call."""
    record = payload["mode"] == "record"
    t = {"__name__": "__tests__", "__builtins__": __builtins__}
    calls, outputs, pos = payload.get("calls"), payload.get("outputs"), [0]
    try:
        exec(compile(payload.get("preamble", ""), "preamble.py", "exec"), t)
        if record:
            exec(program, g)
            exec(compile(payload.get("setup", ""), "setup.py", "exec"), g)
            by_id = {id(g[n]): n for n in payload["refs"]}
        for n in payload["refs"]:
            t[n] = g[n] if record else Ref(n)

        def proxy(name):
            def call(*args, **kwargs):
                i = pos[0]
                pos[0] += 1
                a = encode_text([Ref(by_id[id(x)]) if record and id(x) in by_id else x for x in args], ordered=True)
                k = encode_text(kwargs, ordered=True)
                if record:
                    rec = dict(encode_output(g[name](*args, **kwargs)), i=i, f=name, a=a, k=k)
                    emit(rec)
                else:
                    if i >= len(calls) or calls[i] != [name, a, k]:
                        raise _Diverged(f"the tests made call {i} of {name} with arguments the recording does "
                                        "not have")
                    rec = outputs[i]
                    if "error" in rec:
                        raise _Diverged(f"call {i} of {name} raised {rec['error']}")
                if "v" not in rec:
                    raise _Diverged(f"call {i} of {name}: output too large to replay")
                try:
                    return decode_plain(rec["v"])
                except (NotPlain, ValueError) as e:
                    raise _Diverged(f"call {i} of {name} returned a value that is not plain data ({e})") from None
            return call

        for n in payload["proxies"]:
            t[n] = proxy(n)
        import random

        random.seed(0)  # tests that draw unseeded random inputs (HumanEval/38, /53) draw the same ones again
        exec(compile(payload["body"], "tests.py", "exec"), t)
    except _Diverged as e:
        emit({"status": "fail", "msg": str(e)[:300]})
        return
    except BaseException as e:  # noqa: BLE001 - SystemExit included
        emit({"status": "fail", "error": type(e).__name__, "msg": str(e)[:300]})
        return
    emit({"status": "pass", "token": token, "calls": pos[0]})


if __name__ == "__main__" and sys.argv[1:2] != ["--zygote"]:  # pragma: no cover - a fresh sandboxed interpreter
    main()
