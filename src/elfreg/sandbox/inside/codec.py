"""The value codec: how values cross the sandbox boundary, in both directions (spec §6).

Runs on both sides: the harness imports it, and the sandbox ships its source to every sandboxed interpreter
(the first part of :data:`elfreg.sandbox.inside.SOURCE`), so both encode values identically. Standard library
only, and the only ``from __future__`` import of that source (it must come first).

A value is written as canonical JSON text (equal values give equal text; tuples, sets, dicts, bytes, big ints,
non-finite floats and numpy values as one-key tagged objects), and read back by :func:`decode_text` (the
harness: every type back) or :func:`decode_plain` (untrusted text: builtin values only). Both readers first
bound the text's nesting (:func:`check_nesting`), so no text can make them recurse without limit.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from array import array
from collections import Counter
from itertools import compress

# An output is sent as its text when that is at most DIGEST_THRESHOLD characters and holds no list or tuple (outside
# dicts and sets, which encode their parts as text) of at least BLOB_MIN numbers; otherwise as the sha256 of its
# digest form (:func:`digest_of`): the text with numbers written by value (``True``, ``1`` and ``1.0`` alike, as
# ``==`` and so EvalPlus have them), such sequences as binary doubles (:func:`_numbers_blob`), which is far
# cheaper than their decimals, and strings of at least BLOB_MIN characters as their UTF-8 bytes (a NUL, ``S``, the
# byte count, the bytes: no JSON escaping pass over megabytes). A NUL never occurs in JSON text, and each binary
# part says its length, so the form stays unambiguous: equal digest forms are equal values.
DIGEST_THRESHOLD = 1 << 20
BLOB_MIN = 1 << 16
_BLOB_SMALLEST = 16  # the digest form writes shorter number sequences as text
_SMALL_INT = 1 << 63
_EXACT_INT = 1 << 53  # ints up to this size are exact as doubles (larger ones may be)


def _by_value(x):
    """The digest form's number: a bool, or a float with an integral value, as the int it equals (so ``==`` numbers
    are written alike); anything else unchanged."""
    if x is True or x is False:
        return int(x)
    if isinstance(x, float) and type(x).__module__ != "numpy" and float.is_integer(x):
        return int(x)
    return x


def _encode(x, put, depth=0, ordered=False, blob=None, digest=False):
    """Write the canonical JSON encoding of ``x`` through ``put`` (equal values -> equal text).

    ``ordered`` (call arguments) keeps dicts in insertion order, which a function may depend on. ``blob``
    (:func:`encode_output`) may take over a list or tuple: it returns the pieces to write instead of its elements.
    ``digest``: the digest form, numbers by value (:func:`_by_value`)."""
    if depth > 200:
        raise RecursionError("value nested too deeply to encode")
    d = depth + 1
    if digest:
        x = _by_value(x)
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
        if digest and blob is not None and len(x) >= BLOB_MIN:  # the streamed digest (not a set's or dict's parts,
            # which are sorted as text): its bytes, not its JSON text, so no per-character pass and no escapes
            data = str(x).encode("utf-8", "surrogatepass")
            put(b"\0S" + len(data).to_bytes(8, "little"))
            put(data)
        else:
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
        _encode_seq(x, put, d, "[", "]", ordered, blob, digest)
    elif isinstance(x, tuple):
        _encode_seq(x, put, d, '{"$t":[', "]}", ordered, blob, digest)
    elif isinstance(x, (set, frozenset)):
        # Sets compare order-free: sort the element encodings so equal sets encode equally.
        put('{"$s":[' + ",".join(sorted(encode_text(e, d, digest=digest) for e in x)) + "]}")
    elif isinstance(x, dict) and ordered:
        put('{"$D":[' + ",".join("[%s,%s]" % (encode_text(k, d, True, digest), encode_text(v, d, True, digest))
                                  for k, v in x.items()) + "]}")
    elif isinstance(x, dict):
        items = sorted((encode_text(k, d, digest=digest), encode_text(v, d, digest=digest)) for k, v in x.items())
        put('{"$d":[' + ",".join("[%s,%s]" % kv for kv in items) + "]}")
    elif type(x).__module__ == "numpy" and hasattr(x, "dtype"):
        tag = "$nd" if hasattr(x, "shape") and type(x).__name__ == "ndarray" else "$np"
        put('{"%s":[%s,' % (tag, json.dumps(str(x.dtype))))
        _encode(x.tolist() if tag == "$nd" else x.item(), put, d, blob=blob, digest=digest)
        put("]}")
    elif type(x) is Ref:
        put('{"$g":%s}' % json.dumps(x.name))
    else:
        put('{"$o":%s}' % json.dumps(type(x).__qualname__))


_SCALARS = frozenset((str, bool, type(None), int, float))
_NUMBERS = frozenset((int, float, bool))
_BY_VALUE = frozenset((float, bool))  # the types the digest form rewrites (:func:`_by_value`)
_NON_FINITE = (("-Infinity", '{"$f":"-inf"}'), ("Infinity", '{"$f":"inf"}'), ("NaN", '{"$f":"nan"}'))


def _flat_text(xs, types: set) -> str | None:
    """The elements' encodings joined by commas, in one json.dumps call, when every element is an exact ``str``,
    ``bool``, ``None``, small ``int`` or ``float`` (json.dumps then writes each as :func:`_encode` would; its
    non-finite floats are rewritten to the codec's tags); else None. ``types``: the elements' types."""
    if not types <= _SCALARS:
        return None
    if int in types:
        ints = xs if len(types) == 1 else [e for e in xs if type(e) is int]
        if not (-_SMALL_INT < min(ints) and max(ints) < _SMALL_INT):
            return None
    text = json.dumps(xs if type(xs) is list else list(xs), separators=(",", ":"))[1:-1]
    if float in types and ("Infinity" in text or "NaN" in text):
        if str in types:  # the words could be inside a string
            return None
        for word, tag in _NON_FINITE:
            if word in text:
                text = text.replace(word, tag)
    return text


def _numbers_blob(xs, types: set) -> tuple[bytes, memoryview] | None:
    """A flat sequence of exact ``bool``, ``int`` and ``float`` for the digest form, as two pieces to write: a NUL
    (never in JSON text), ``N`` and the count, then the values as little-endian doubles, by value (``True``, ``1``
    and ``1.0`` alike, ``-0.0`` as ``0.0``: as ``==`` has them). None if a value is NaN (its bits are not canonical;
    also when the sum is NaN because both infinities occur) or an int is not exact as a double (no float equals it:
    the text form writes it)."""
    if not types <= _NUMBERS:
        return None
    try:
        values = array("d", xs)
    except OverflowError:
        return None
    raw = memoryview(values).cast("B")  # the doubles' bytes, not copied
    # each double's top byte (its sign and the exponent's high bits): the checks read these, not the values
    top = bytes(raw[7::8] if sys.byteorder == "little" else raw[0::8])
    if len(top.translate(None, _LARGE_TOP)) != len(top):  # not all finite and below 2^49: value by value
        if float in types and math.isnan(sum(values)):
            return None
        # every double below 2^53 in magnitude: every int is exact (an int past it becomes a double of at least
        # 2^53, 2^53 + 1 included); else look at the ints one by one
        if types != _FLOATS and not (-_EXACT_INT < min(values) and max(values) < _EXACT_INT):
            ints = xs if float not in types else list(compress(xs, map(_NOT_FLOAT.__contains__, map(type, xs))))
            if max(map(abs, ints)) > _EXACT_INT and any(float(k) != k for k in ints):  # one a double does not hold
                return None
    if 0x80 in top and _has_negative_zero(raw.tobytes()):  # -0.0's top byte is 0x80
        values = array("d", [v + 0.0 for v in values])  # -0.0 + 0.0 is 0.0
        raw = memoryview(values).cast("B")
    if sys.byteorder == "big":
        values.byteswap()
    return b"\0N" + len(xs).to_bytes(8, "little"), raw


_FLOATS = {float}
_NOT_FLOAT = frozenset((int, bool))
# A double's top byte is its sign and the exponent's high 7 bits: from 0x43 (0xC3 negative) the exponent is at least
# 1072, so the magnitude at least 2^49; 0x7F / 0xFF hold infinities and NaN. Top bytes outside these: every value is
# finite and below 2^49 (so no NaN, and every int it came from is exact), settled without an object per element (a
# scan of the values took longer than HumanEval+/130's reference takes to compute them).
_LARGE_TOP = bytes(range(0x43, 0x80)) + bytes(range(0xC3, 0x100))
_NEGATIVE_ZERO = array("d", [-0.0]).tobytes()


def _has_negative_zero(data: bytes) -> bool:
    """Whether doubles ``data`` (the machine's byte order) hold a -0.0: a search of the bytes (``count(-0.0)``
    makes an object per element, and finds 0.0 too)."""
    i = data.find(_NEGATIVE_ZERO)
    while i >= 0:
        if i % 8 == 0:
            return True
        i = data.find(_NEGATIVE_ZERO, i + 1)
    return False


def _has_long_str(xs) -> bool:
    """Whether a sequence holds a string the digest form writes as bytes (:func:`_encode`), not as JSON text."""
    return any(len(e) >= BLOB_MIN for e in xs if type(e) is str)


def _encode_seq(xs, put, depth, open_, close, ordered=False, blob=None, digest=False):
    # One json.dumps call for a sequence of scalars (MBPP+ Mbpp/255's reference output holds ~10^8 strings: a call
    # per element takes minutes); in a digest, one array for a long sequence of numbers (HumanEval+ /130's lists
    # of ~10^5 floats: their decimals take seconds).
    if xs:
        data = blob(xs, None) if blob is not None else None  # computed already for this list: no type scan
        if data is None:
            types = set(map(type, xs))
            data = blob(xs, types) if blob is not None else None
        if data is not None:
            put(open_)
            for piece in data:
                put(piece)
            put(close)
            return
        # the streamed digest writes long strings as bytes (:func:`_encode`): then element by element
        flat = None if digest and (types & _BY_VALUE or blob is not None and str in types and _has_long_str(xs)) \
            else _flat_text(xs, types)
        if flat is not None:
            put(open_ + flat + close)
            return
    put(open_)
    for i, e in enumerate(xs):
        if i:
            put(",")
        _encode(e, put, depth, ordered, blob, digest)
    put(close)


def encode_text(x, depth=0, ordered=False, digest=False) -> str:
    """Canonical encoding of ``x`` as one string (``ordered``: dicts in insertion order; ``digest``: numbers by
    value, as in the digest form)."""
    parts: list = []
    _encode(x, parts.append, depth, ordered, digest=digest)
    return "".join(parts)


class _Long(Exception):
    """The output is sent as a digest (it is long, or holds a long sequence of numbers)."""


def encode_output(x) -> dict:
    """``{"v": text}`` for a short output, else ``{"sha": hex, "n": length}`` of its digest form (streamed, bounded
    memory); the rule is in :data:`DIGEST_THRESHOLD`."""
    if type(x) is str and len(x) + 2 > DIGEST_THRESHOLD:  # its text, quotes included, is at least that long
        return _digest(x, {})
    parts: list = []
    size = [0]
    blobs: dict = {}  # id(sequence) -> its blob, computed once

    def put_text(s):
        size[0] += len(s)
        if size[0] > DIGEST_THRESHOLD:
            raise _Long
        parts.append(s)

    def text_guard(xs, types):  # give up on the text as soon as the output must be a digest
        if types is None:
            return None
        if len(xs) >= BLOB_MIN:  # the digest pass then takes this blob without scanning the list again
            blobs[id(xs)] = _numbers_blob(xs, types)
            if blobs[id(xs)] is not None:
                raise _Long
        if 2 * len(xs) - 1 > DIGEST_THRESHOLD:
            raise _Long
        return None

    try:
        _encode(x, put_text, blob=text_guard)
        return {"v": "".join(parts)}
    except _Long:
        parts.clear()
    return _digest(x, blobs)


def digest_of(x) -> dict:
    """``{"sha": hex, "n": length}`` of ``x``'s digest form, whatever its length: the harness compares an output
    sent as text with one sent as a digest this way."""
    return _digest(x, {})


def _digest(x, blobs: dict) -> dict:
    """The sha256 and length of ``x``'s digest form, streamed (bounded memory); ``blobs``: id(sequence) -> its blob,
    where already computed."""
    h, chunk, count = hashlib.sha256(), bytearray(), [0]

    def put_digest(s):
        if type(s) is str:
            s = s.encode("utf-8", "surrogatepass")
        count[0] += len(s)
        if len(s) > DIGEST_THRESHOLD:  # a big piece (a blob, a long string): hashed where it is, not copied
            h.update(chunk)
            chunk.clear()
            h.update(s)
            return
        chunk.extend(s)
        if len(chunk) > DIGEST_THRESHOLD:  # hashed in chunks: one update per small piece is slow on huge outputs
            h.update(chunk)
            chunk.clear()

    def digest_blob(xs, types):
        if types is None:  # asked for the blob the text pass computed (None: there is none, scan the list)
            return blobs.pop(id(xs), None)
        return _numbers_blob(xs, types) if len(xs) >= _BLOB_SMALLEST else None

    _encode(x, put_digest, blob=digest_blob, digest=True)
    h.update(chunk)
    return {"sha": h.hexdigest(), "n": count[0]}


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


# Building a set or dict compares each key with the keys already in it whose hashes are equal to its own: a set of
# k * (2**61 - 1), whose hashes are all 0, is quadratic (90,000 ints: 170 s, the harness stalled). A decoded set or
# dict may cost at most this many such comparisons.
MAX_KEY_WORK = 1 << 20


class CostError(ValueError):
    """Encoded text whose decoding would cost too much: a set or dict of many distinct keys with equal hashes."""


def bounded_keys(keys: list) -> list:
    """``keys``, once checked that a set or dict of them costs at most :data:`MAX_KEY_WORK` comparisons of keys with
    equal hashes (:class:`CostError` otherwise); linear time. Equal keys (a list with repeats) cost one each."""
    if len(keys) ** 2 <= MAX_KEY_WORK:
        return keys
    counts = Counter(map(hash, keys))
    if sum(c * c for c in counts.values() if c > 1) <= MAX_KEY_WORK:
        return keys
    shared = {h for h, c in counts.items() if c > 1}
    # distinct keys per hash (by canonical text: equal text is an equal value, so this never undercounts)
    distinct = Counter(h for h, _ in {(hash(k), encode_text(k)) for k in keys if hash(k) in shared})
    work = sum(counts[h] * d for h, d in distinct.items())
    if work > MAX_KEY_WORK:
        raise CostError(f"a set or dict of {len(keys)} keys whose equal hashes would cost {work:,} comparisons")
    return keys


def _pairs_keys(pairs) -> list:
    return bounded_keys([k for k, _ in pairs])


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
        return set(bounded_keys(val))
    if tag in ("$d", "$D"):
        _pairs_keys(val)
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


# Deepest nesting a decoder accepts: the encoder stops at 200 levels of values, each at most two JSON levels deep.
MAX_NESTING = 402
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def outside_strings(text: str) -> str:
    r"""``text`` without its JSON string literals (quotes included), in linear time; an unterminated string runs to
    the end. Outside strings a backslash is not JSON: a parser stops there, so what follows it does not matter.

    Escape pairs go first (``\\`` then ``\"``, each left to right, as a JSON lexer pairs them); then every quote
    left opens or closes a string. A regex over whole strings (``"[^"\\]*(?:\\.[^"\\]*)*"``) retries at every
    escaped quote of an unterminated string: quadratic (80 KB of ``\"``: 40 s)."""
    return "".join(text.replace("\\\\", "").replace('\\"', "").split('"')[::2])


class NestingError(ValueError):
    """JSON text nested deeper than a reader accepts."""


def check_nesting(text: str, limit: int = MAX_NESTING) -> None:
    """Raise :class:`NestingError` if ``text`` nests arrays/objects deeper than ``limit`` (before any parsing)."""
    depth = 0
    for c in _NOT_BRACKET.sub("", outside_strings(text)):
        if c in "[{":
            depth += 1
            if depth > limit:
                raise NestingError(f"nested more than {limit} levels deep")
        else:
            depth -= 1


def decode_text(text: str, refs: dict | None = None):
    """Inverse of :func:`encode_text` (sets/dicts come back as real sets/dicts); ``refs`` resolves ``$g``."""
    check_nesting(text)
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
        return set(bounded_keys(val))
    if tag == "$d" and type(val) is list and all(type(kv) is list and len(kv) == 2 for kv in val):
        _pairs_keys(val)
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
    check_nesting(text)
    return json.loads(text, object_hook=_plain_hook)


