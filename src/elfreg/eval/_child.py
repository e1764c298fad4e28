"""Code that runs *inside* the sandbox: the test runner and the value codec (spec §6).

This module must stay standard-library only: the sandbox runs it with ``python -I -c <this source>``
(fresh interpreter per program) or as the first half of the fork server's source (``_zygote.py``).
The harness imports the same module for the codec, so parent and child encode values identically.

Two modes:

* ``asserts`` — run ``program`` then ``tests`` (HumanEval ``check(...)``, MBPP asserts) in one namespace;
  success is reported only as a record carrying a random token the harness passed on stdin, so an
  early ``sys.exit(0)`` / ``os._exit(0)`` or a crash can never read as a pass.
* ``io`` — differential testing (EvalPlus): call ``entry_point`` on each input and stream the encoded
  output back; the harness, not this process, compares it with the expected output.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys

# Outputs whose canonical encoding is longer than this are sent as a sha256 digest (exact match only).
DIGEST_THRESHOLD = 1 << 20
_SMALL_INT = 1 << 63


def _encode(x, put, depth=0):
    """Write the canonical JSON encoding of ``x`` through ``put`` (equal values -> equal text)."""
    if depth > 200:
        raise RecursionError("value nested too deeply to encode")
    d = depth + 1
    if x is None:
        put("null")
    elif x is True:
        put("true")
    elif x is False:
        put("false")
    elif isinstance(x, int) and type(x).__module__ != "numpy":
        x = int(x)
        put(str(x) if -_SMALL_INT < x < _SMALL_INT else '{"$i":"%s"}' % format(x, "x"))
    elif isinstance(x, float) and type(x).__module__ != "numpy":
        x = float(x)
        put(repr(x) if math.isfinite(x) else '{"$f":"%s"}' % repr(x))
    elif isinstance(x, str):
        put(json.dumps(str(x)))
    elif isinstance(x, (bytes, bytearray)):
        put('{"$b":"%s"}' % bytes(x).hex())
    elif isinstance(x, complex):
        put('{"$c":[')
        _encode(x.real, put, d)
        put(",")
        _encode(x.imag, put, d)
        put("]}")
    elif isinstance(x, list):
        _encode_seq(x, put, d, "[", "]")
    elif isinstance(x, tuple):
        _encode_seq(x, put, d, '{"$t":[', "]}")
    elif isinstance(x, (set, frozenset)):
        # Sets compare order-free: sort the element encodings so equal sets encode equally.
        put('{"$s":[' + ",".join(sorted(encode_text(e, d) for e in x)) + "]}")
    elif isinstance(x, dict):
        items = sorted((encode_text(k, d), encode_text(v, d)) for k, v in x.items())
        put('{"$d":[' + ",".join("[%s,%s]" % kv for kv in items) + "]}")
    elif type(x).__module__ == "numpy" and hasattr(x, "dtype"):
        tag = "$nd" if hasattr(x, "shape") and type(x).__name__ == "ndarray" else "$np"
        put('{"%s":[%s,' % (tag, json.dumps(str(x.dtype))))
        _encode(x.tolist() if tag == "$nd" else x.item(), put, d)
        put("]}")
    else:
        put('{"$o":%s}' % json.dumps(type(x).__qualname__))


def _encode_seq(xs, put, depth, open_, close):
    put(open_)
    for i, e in enumerate(xs):
        if i:
            put(",")
        _encode(e, put, depth)
    put(close)


def encode_text(x, depth=0) -> str:
    """Canonical encoding of ``x`` as one string."""
    parts: list = []
    _encode(x, parts.append, depth)
    return "".join(parts)


def encode_output(x) -> dict:
    """``{"v": text}`` if the encoding is short, else ``{"sha": hex, "n": length}`` (streamed, bounded memory)."""
    parts: list = []
    state = {"n": 0, "h": None}

    def put(s):
        state["n"] += len(s)
        if state["h"] is None:
            parts.append(s)
            if state["n"] > DIGEST_THRESHOLD:
                state["h"] = hashlib.sha256("".join(parts).encode("utf-8", "surrogatepass"))
                parts.clear()
        else:
            state["h"].update(s.encode("utf-8", "surrogatepass"))

    _encode(x, put)
    if state["h"] is None:
        return {"v": "".join(parts)}
    return {"sha": state["h"].hexdigest(), "n": state["n"]}


class Opaque:
    """A value the codec cannot carry (a regex match, a generator...): equal to nothing, not None."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __eq__(self, other):  # pragma: no cover - trivial
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Opaque({self.type_name})"


def _hook(obj):
    if len(obj) != 1:
        return obj
    (tag, val), = obj.items()
    if tag == "$i":
        return int(val, 16)
    if tag == "$f":
        return float(val)
    if tag == "$b":
        return bytes.fromhex(val)
    if tag == "$c":
        return complex(val[0], val[1])
    if tag == "$t":
        return tuple(val)
    if tag == "$s":
        return set(val)
    if tag == "$d":
        return {k: v for k, v in val}
    if tag == "$o":
        return Opaque(val)
    if tag in ("$np", "$nd"):
        import numpy as np  # only the parent decodes numpy values

        dtype = np.dtype(val[0])
        return np.array(val[1], dtype=dtype) if tag == "$nd" else dtype.type(val[1])
    return obj


def decode_text(text: str):
    """Inverse of :func:`encode_text` (sets/dicts come back as real sets/dicts)."""
    return json.loads(text, object_hook=_hook)


# ----------------------------------------------------------------------------------------------
# The runner. Everything below runs inside the sandbox process.


def _main() -> None:  # pragma: no cover - exercised through the sandbox tests
    """Fresh-interpreter entry point: the payload arrives on stdin."""
    run_payload(json.loads(sys.stdin.buffer.read().decode("utf-8")))


def run_payload(payload: dict) -> None:  # pragma: no cover - exercised through the sandbox tests
    """Apply the payload's rlimits and uid, silence stdio, run the program and report; never returns.

    Runs in the process that will execute the untrusted program (a fresh interpreter, or a child
    forked by the fork server in ``_zygote.py``); records go to the already-open fd ``result_fd``.
    """
    import os
    import resource
    import signal
    import sys
    import time

    sys.set_int_max_str_digits(0)
    # Bind what the runner needs now, so a program that monkeypatches os/json cannot change the reports.
    write, dumps, exit_, out_fd = os.write, json.dumps, os._exit, payload["result_fd"]

    def emit(rec):
        data = (dumps(rec) + "\n").encode("utf-8", "surrogatepass")
        while data:
            data = data[write(out_fd, data):]

    limits = payload["rlimits"]
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if payload.get("uid") is not None:
        os.setgroups([])
        os.setgid(payload["uid"])
        os.setuid(payload["uid"])
    # The program sees no stdin and its prints go nowhere (gigabytes of output cost nothing).
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    token = payload.pop("token")
    program = compile(payload.pop("program"), "solution.py", "exec")
    g = {"__name__": "__solution__", "__builtins__": __builtins__}

    if payload["mode"] == "asserts":
        tests = compile(payload.pop("tests"), "tests.py", "exec")
        try:
            exec(program, g)
            exec(tests, g)
        except BaseException as e:  # SystemExit included: exiting early is a failure
            emit({"status": "fail", "error": type(e).__name__, "msg": str(e)[:300]})
            exit_(0)
        emit({"status": "pass", "token": token})
        exit_(0)

    class _Timeout(BaseException):
        pass

    def on_alarm(signum, frame):
        raise _Timeout()

    try:
        exec(program, g)
        fn = g[payload["entry_point"]]
    except BaseException as e:
        emit({"status": "fail", "error": type(e).__name__})
        exit_(0)
    inputs = decode_text(payload["inputs"])
    for i, args in enumerate(inputs):
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, payload["time_limits"][i])
        t0 = time.perf_counter()
        try:
            out = fn(*args)
            dt = time.perf_counter() - t0
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec = {"i": i, "t": dt}
            rec.update(encode_output(out))
            rec["w"] = time.perf_counter() - t0  # call + encoding: the harness's wait allowance
        except BaseException as e:
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec = {"i": i, "t": time.perf_counter() - t0, "error": type(e).__name__}
        emit(rec)
    emit({"status": "done", "token": token})
    exit_(0)


if __name__ == "__main__" and sys.argv[1:2] != ["--zygote"]:  # pragma: no cover
    _main()
