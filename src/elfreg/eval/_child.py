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
* ``calls`` — the tested side of the original HumanEval/MBPP tests: run ``program`` (then the test's
  ``setup``), make the recorded calls ``[name, args, kwargs]`` and stream the encoded outputs back.
* ``record`` (reference program only) — run the original tests with every call to the program's functions
  recorded (arguments and outputs, encoded) and answered with the *decoded* output, as a replay would.
* ``check`` (no program at all) — replay the original tests against outputs another process produced:
  each call to the program's functions must match the next recorded call and is answered with that
  output, decoded to builtin values only (:func:`decode_plain`); anything else fails the check.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys

# Outputs whose canonical encoding is longer than this are sent as a sha256 digest (exact match only).
DIGEST_THRESHOLD = 1 << 20
_SMALL_INT = 1 << 63


def _encode(x, put, depth=0, ordered=False):
    """Write the canonical JSON encoding of ``x`` through ``put`` (equal values -> equal text).

    ``ordered`` (call arguments) keeps dicts in insertion order, which a function may depend on."""
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
        _encode_seq(x, put, d, "[", "]", ordered)
    elif isinstance(x, tuple):
        _encode_seq(x, put, d, '{"$t":[', "]}", ordered)
    elif isinstance(x, (set, frozenset)):
        # Sets compare order-free: sort the element encodings so equal sets encode equally.
        put('{"$s":[' + ",".join(sorted(encode_text(e, d) for e in x)) + "]}")
    elif isinstance(x, dict) and ordered:
        put('{"$D":[' + ",".join("[%s,%s]" % (encode_text(k, d, True), encode_text(v, d, True))
                                  for k, v in x.items()) + "]}")
    elif isinstance(x, dict):
        items = sorted((encode_text(k, d), encode_text(v, d)) for k, v in x.items())
        put('{"$d":[' + ",".join("[%s,%s]" % kv for kv in items) + "]}")
    elif type(x).__module__ == "numpy" and hasattr(x, "dtype"):
        tag = "$nd" if hasattr(x, "shape") and type(x).__name__ == "ndarray" else "$np"
        put('{"%s":[%s,' % (tag, json.dumps(str(x.dtype))))
        _encode(x.tolist() if tag == "$nd" else x.item(), put, d)
        put("]}")
    elif type(x) is Ref:
        put('{"$g":%s}' % json.dumps(x.name))
    else:
        put('{"$o":%s}' % json.dumps(type(x).__qualname__))


def _flat(xs) -> bool:
    """True if every element is an exact ``str``, or every one an exact small ``int``, or every one an exact finite
    ``float``: json.dumps writes such a sequence as the element-by-element encoding would, in one call."""
    t = type(xs[0])
    if t is str:
        return all(type(e) is str for e in xs)
    if t is int:
        return all(type(e) is int and -_SMALL_INT < e < _SMALL_INT for e in xs)
    if t is float:
        return all(type(e) is float and math.isfinite(e) for e in xs)
    return False


def _encode_seq(xs, put, depth, open_, close, ordered=False):
    # Fast path: some MBPP+ reference outputs hold ~10^8 strings (Mbpp/255), where a call per element takes minutes.
    if xs and _flat(xs):
        put(open_ + json.dumps(list(xs), separators=(",", ":"))[1:-1] + close)
        return
    put(open_)
    for i, e in enumerate(xs):
        if i:
            put(",")
        _encode(e, put, depth, ordered)
    put(close)


def encode_text(x, depth=0, ordered=False) -> str:
    """Canonical encoding of ``x`` as one string (``ordered``: dicts in insertion order)."""
    parts: list = []
    _encode(x, parts.append, depth, ordered)
    return "".join(parts)


def encode_output(x) -> dict:
    """``{"v": text}`` if the encoding is short, else ``{"sha": hex, "n": length}`` (streamed, bounded memory)."""
    parts: list = []
    state = {"n": 0, "buffered": 0, "h": None}

    def flush():
        if state["h"] is None:
            state["h"] = hashlib.sha256()
        state["h"].update("".join(parts).encode("utf-8", "surrogatepass"))
        parts.clear()
        state["buffered"] = 0

    def put(s):
        # Hashed in chunks of about DIGEST_THRESHOLD characters: one update per small piece is slow on huge outputs.
        state["n"] += len(s)
        state["buffered"] += len(s)
        parts.append(s)
        if state["buffered"] > DIGEST_THRESHOLD:
            flush()

    _encode(x, put)
    if state["h"] is None:
        return {"v": "".join(parts)}
    flush()
    return {"sha": state["h"].hexdigest(), "n": state["n"]}


class Ref:
    """A test-setup object passed by name: it lives in the tested process (e.g. MBPP 367's trees)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class NotPlain(ValueError):
    """An encoded value that is not plain builtin data (an object, an array, a reference)."""


class Opaque:
    """A value the codec cannot carry (a regex match, a generator...): equal to nothing, not None."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __eq__(self, other):  # pragma: no cover - trivial
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Opaque({self.type_name})"


def _hook(obj, refs=None):
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
    if tag in ("$d", "$D"):
        return {k: v for k, v in val}
    if tag == "$o":
        return Opaque(val)
    if tag == "$g" and refs is not None:
        return refs[val]
    if tag in ("$np", "$nd"):
        import numpy as np  # only the parent decodes numpy values

        dtype = np.dtype(val[0])
        if dtype.kind not in "biufc":  # numbers only: no object, string, void or datetime arrays
            raise NotPlain(f"numpy dtype {val[0]!r}")
        return np.array(val[1], dtype=dtype) if tag == "$nd" else dtype.type(val[1])
    return obj


def decode_text(text: str, refs: dict | None = None):
    """Inverse of :func:`encode_text` (sets/dicts come back as real sets/dicts); ``refs`` resolves ``$g``."""
    return json.loads(text, object_hook=lambda o: _hook(o, refs))


_PLAIN_NP = {"b": bool, "i": int, "u": int, "f": float, "c": complex}


def _plain_hook(obj):
    if len(obj) != 1:
        raise NotPlain("a JSON object that is no tagged value")
    (tag, val), = obj.items()
    if tag == "$i" and type(val) is str:
        return int(val, 16)
    if tag == "$f" and val in ("inf", "-inf", "nan"):
        return float(val)
    if tag == "$b" and type(val) is str:
        return bytes.fromhex(val)
    if tag == "$c" and type(val) is list and len(val) == 2 and all(type(v) in (int, float) for v in val):
        return complex(val[0], val[1])
    if tag == "$t" and type(val) is list:
        return tuple(val)
    if tag == "$s" and type(val) is list:
        return set(val)
    if tag == "$d" and type(val) is list and all(type(kv) is list and len(kv) == 2 for kv in val):
        return {k: v for k, v in val}
    if tag == "$np" and type(val) is list and len(val) == 2 and type(val[0]) is str:
        # A numpy scalar becomes the builtin number it stands for (np.float64 is a float already).
        kind = {"bool": "b", "int": "i", "uint": "u", "float": "f", "complex": "c"}.get(val[0].rstrip("0123456789"))
        if kind and type(val[1]) is _PLAIN_NP[kind] or kind == "f" and type(val[1]) is int:
            return _PLAIN_NP[kind](val[1])
    raise NotPlain(f"not plain data: {tag}")


def decode_plain(text: str):
    """Decode an untrusted encoding into builtin values only (None, bool, int, float, complex, str, bytes,
    list, tuple, set, dict); any object, array or reference raises :class:`NotPlain`."""
    return json.loads(text, object_hook=_plain_hook)


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

    if payload["mode"] in ("record", "check"):
        _run_tests(payload, program, g, emit, token)
        exit_(0)

    class _Timeout(BaseException):
        pass

    def on_alarm(signum, frame):
        raise _Timeout()

    try:
        exec(program, g)
        if payload["mode"] == "calls":
            exec(compile(payload.get("setup", ""), "setup.py", "exec"), g)
            calls = decode_text(payload["calls"], refs=g)
        else:
            calls = [(payload["entry_point"], args, {}) for args in decode_text(payload["inputs"])]
    except BaseException as e:
        emit({"status": "fail", "error": type(e).__name__})
        exit_(0)
    for i, (name, args, kwargs) in enumerate(calls):
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, payload["time_limits"][i])
        t0 = time.perf_counter()
        try:
            out = g[name](*args, **kwargs)
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


class _Diverged(BaseException):
    """The tests made a call the recording does not have (or a value was not plain): the check fails.

    A BaseException, so a test's own ``except Exception`` cannot swallow it."""


def _run_tests(payload, program, g, emit, token):  # pragma: no cover - runs in the sandbox
    """``record``: the reference program answers each call live, every call is recorded; ``check``: no
    program runs, each call is answered from ``payload["outputs"]`` after matching the recorded call."""
    import time

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
                    t0 = time.perf_counter()
                    out = g[name](*args, **kwargs)
                    rec = {"i": i, "f": name, "a": a, "k": k, "t": time.perf_counter() - t0}
                    rec.update(encode_output(out))
                    emit(rec)
                else:
                    if i >= len(calls) or calls[i] != [name, a, k]:
                        raise _Diverged(f"call {i} of {name} was not recorded")
                    rec = outputs[i]
                    if not isinstance(rec, dict) or not isinstance(rec.get("v"), str):
                        raise _Diverged(f"call {i}: {'error' if 'error' in rec else 'no plain output'}")
                if "v" not in rec:
                    raise _Diverged(f"call {i}: output too large to replay")
                try:
                    return decode_plain(rec["v"])
                except NotPlain as e:
                    raise _Diverged(f"call {i}: {e}") from None
            return call

        for n in payload["proxies"]:
            t[n] = proxy(n)
        import random

        random.seed(0)  # tests that draw unseeded random inputs (HumanEval/38, /53) draw the same ones again
        exec(compile(payload["body"], "tests.py", "exec"), t)
    except BaseException as e:  # SystemExit included
        emit({"status": "fail", "error": type(e).__name__, "msg": str(e)[:300]})
        return
    emit({"status": "pass", "token": token, "calls": pos[0]})


if __name__ == "__main__" and sys.argv[1:2] != ["--zygote"]:  # pragma: no cover
    _main()
