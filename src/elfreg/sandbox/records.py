"""Result records: everything a sandboxed process writes, read as untrusted input (spec §6).

A sandboxed process reports through one pipe, one JSON object per line (layouts below). The process may be
hostile and may write anything there, so every line is checked before the harness uses it: its size, that it is
ASCII, that it is one *flat* object (checked on the raw text, before any parsing, so no nesting can make the
parser recurse), that it parses, that every field is known and of its type, and the values' bounds. The first
line that fails ends the run: :class:`RecordStream` keeps a plain-language reason (:attr:`RecordStream.violation`),
which becomes that sample's ``error`` verdict; nothing a program writes can raise in the harness.

Layouts (the runner, :mod:`elfreg.sandbox.inside.runner`, writes exactly these):

* output of call ``i``: ``{"i": i, "v": text}`` (the codec's encoding), ``{"i": i, "sha": hex, "n": length}``
  (outputs too long to send), or ``{"i": i, "error": exception name}``; a recording adds ``"f"``, ``"a"``, ``"k"``
  (the function and its encoded arguments);
* status: ``{"status": "ready"}`` (program loaded; the harness starts the first call's clock),
  ``{"status": "pass" | "done", "token": ...}`` (the end, authenticated by the run's token),
  ``{"status": "fail", "error": ..., "msg": ...}``; a replay's pass adds ``"calls"``.
"""

from __future__ import annotations

import hmac
import json
import re

from .inside.codec import outside_strings

MAX_RECORD_BYTES = 8 << 20  # an output's text is at most ~1 M characters (longer ones are sent as a digest)
_FIELDS = {"i": int, "n": int, "calls": int, "v": str, "sha": str, "error": str, "status": str, "token": str,
           "msg": str, "f": str, "a": str, "k": str}
_STATUSES = ("ready", "pass", "fail", "done")
_SHORT = {"error": 200, "msg": 1000, "f": 200, "status": 10, "token": 64}
_SHA = re.compile(r"[0-9a-f]{64}")
_TYPE_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number",
               bool: "true/false", type(None): "null"}


class RecordError(ValueError):
    """A result record that breaks the protocol; the message says how, in plain words."""


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise RecordError("a field appears twice")
    return dict(pairs)


def _no_constant(name: str):
    raise RecordError(f"it holds {name}, which is not JSON")


def parse_record(line: bytes) -> dict:
    """One record line (without its newline) as a dict, or :class:`RecordError` saying what is wrong with it."""
    if len(line) > MAX_RECORD_BYTES:
        raise RecordError(f"it is {len(line):,} bytes long (at most {MAX_RECORD_BYTES:,})")
    if not line.isascii():
        raise RecordError("it is not ASCII text")
    flat = outside_strings(line.decode("ascii")).strip()
    if not (flat.startswith("{") and flat.endswith("}")) or any(c in flat[1:-1] for c in "[]{}"):
        raise RecordError("it is not one flat JSON object")
    try:
        rec = json.loads(line, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecordError:
        raise
    except ValueError as e:  # JSONDecodeError, too many digits
        raise RecordError(f"it is not valid JSON ({str(e).split(':')[0]})") from None
    for key, value in rec.items():
        typ = _FIELDS.get(key)
        if typ is None:
            raise RecordError(f"it has an unknown field {key[:40]!r}")
        if type(value) is not typ:
            raise RecordError(f"its field {key!r} is {_TYPE_NAMES.get(type(value), 'a value')}, not "
                              f"{_TYPE_NAMES[typ]}")
        if typ is int and value < 0:
            raise RecordError(f"its field {key!r} is negative")
        if key in _SHORT and len(value) > _SHORT[key]:
            raise RecordError(f"its field {key!r} is longer than {_SHORT[key]} characters")
    if ("i" in rec) == ("status" in rec):
        raise RecordError("it is neither an output (field 'i') nor a status (field 'status')")
    if "status" in rec and rec["status"] not in _STATUSES:
        raise RecordError(f"its status {rec['status'][:20]!r} is none of {', '.join(_STATUSES)}")
    if "i" in rec and len([k for k in ("v", "sha", "error") if k in rec]) != 1:
        raise RecordError("an output must hold exactly one of 'v', 'sha' and 'error'")
    if ("sha" in rec) != ("n" in rec) or ("sha" in rec and not _SHA.fullmatch(rec["sha"])):
        raise RecordError("its digest is not a sha256 in hex with a length 'n'")
    return rec


class RecordStream:
    """The records of one sandboxed run as the harness reads them: each line checked by :func:`parse_record`,
    stamped with the harness's clock; the first bad line ends the run with :attr:`violation`.

    ``token`` is the run's secret: a record's ``token`` field is replaced by ``token_ok`` (set by the harness only,
    so a record that carries its own ``token_ok`` is rejected as an unknown field). Subclasses watch the records
    as they come (:meth:`accept`) and set deadlines for the next one (:meth:`due`)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.records: list[dict] = []
        self.arrivals: list[float] = []  # time.monotonic() when each record was read
        self.violation: str | None = None
        self.started: float | None = None  # time.monotonic() when the run started (set by the sandbox)
        self.feed_s: float | None = None  # with a sandbox profile: the harness's time in feed(), else None

    def due(self) -> float | None:
        """Monotonic time by which the next record must arrive (None: only the run's deadline)."""
        return None

    def feed(self, line: bytes, now: float) -> bool:
        """Take one line; True ends the run (a closing record, a verdict reached, or a violation)."""
        try:
            rec = parse_record(line)
        except RecordError as e:
            return self.violate(f"result record {len(self.records) + 1} is malformed: {e}")
        if "token" in rec:
            rec["token_ok"] = hmac.compare_digest(rec.pop("token"), self.token)
        self.records.append(rec)
        self.arrivals.append(now)
        return self.accept(rec, now)

    def violate(self, reason: str) -> bool:
        """Record the (first) protocol violation; True, so the run ends."""
        if self.violation is None:
            self.violation = reason
        return True

    def accept(self, rec: dict, now: float) -> bool:
        """A checked record arrived; True ends the run. The default: stop at a closing status."""
        return rec.get("status") in ("pass", "fail", "done")

    @property
    def last(self) -> dict:
        """The last record, or ``{}``."""
        return self.records[-1] if self.records else {}

    def passed(self) -> bool:
        """The run's closing record says pass and carries the run's token (an early exit or a crash never does)."""
        return self.last.get("status") == "pass" and bool(self.last.get("token_ok"))

    def failure(self) -> str:
        """The program's own failure report (``Error: message``), in one line."""
        last = self.last
        err, msg = last.get("error"), last.get("msg", "")
        return one_line(f"{err}: {msg}" if err and msg else err or msg or "failed")


def one_line(text: str, limit: int = 300) -> str:
    """Program-supplied text fit for a verdict's detail: one line, at most ``limit`` characters."""
    return " ".join(text.split())[:limit]
