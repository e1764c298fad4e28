"""Everything a program writes is untrusted input (issue 19): every record is checked (size, ASCII, one flat object,
fields and types) before the harness reads it; a bad one is that sample's ``error`` verdict with a plain-language
detail; the rows after it are scored; the run finishes, writes its summary and resumes."""

import json
import random

import pytest

from elfreg.eval.completions import Completion
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions
from elfreg.sandbox.codecheck import TimeRule
from elfreg.sandbox.records import MAX_RECORD_BYTES, RecordError, RecordStream, parse_record

from ._isolation import any_sandbox

GOOD = [b'{"i":0,"v":"[1,2]"}', b'{"i":3,"sha":"' + b"a" * 64 + b'","n":5}', b'{"i":1,"error":"ValueError"}',
        b'{"status":"ready"}', b'{"status":"done","token":"abc"}', b'{"status":"fail","error":"E","msg":"m"}',
        b'{"i":0,"f":"f","a":"[1]","k":"{\\"$D\\":[]}","v":"2"}', b'{"status":"pass","token":"t","calls":3}']
BAD = {
    b"[" * 100_000: "flat",
    b'{"i":0,"v":' + b"[" * 100_000 + b"]" * 100_000 + b"}": "flat",
    b'{"i":0,"v":"x","t":"slow"}': "unknown field 't'",
    b'{"i":"0","v":"1"}': "field 'i' is a string",
    b'{"i":0,"v":5}': "field 'v' is an integer",
    b'{"i":true,"v":"1"}': "field 'i' is true/false",
    b'{"status":"done","token":5}': "field 'token' is an integer",
    b'{"status":"pass","token_ok":true}': "unknown field 'token_ok'",
    b'{"i":0,"v":"1","v":"2"}': "twice",
    b'{"i":0,"v":NaN}': "NaN",
    b'{"i":1' + b"0" * 5000 + b',"v":"1"}': "not valid JSON",
    b'{"i":-1,"v":"1"}': "negative",
    b'{"i":0,"v":"\xff"}': "not ASCII",
    b'{"i":0}': "exactly one of",
    b'{"i":0,"v":"1","error":"E"}': "exactly one of",
    b'{"status":"won"}': "none of",
    b'{"status":"done","i":0,"v":"1"}': "neither",
    b'{"i":0,"sha":"zz","n":1}': "sha256",
    b'{"i":0,"error":"' + b"E" * 500 + b'"}': "longer than",
    b'"just a string"': "flat",
    b"": "flat",
    b"{}": "neither",
    b"{" + b" " * (MAX_RECORD_BYTES + 1) + b"}": "bytes long",
}


def test_good_records_parse():
    for line in GOOD:
        assert isinstance(parse_record(line), dict), line


@pytest.mark.parametrize("line,why", list(BAD.items()), ids=[str(i) for i in range(len(BAD))])
def test_bad_records_are_refused_in_plain_words(line, why):
    with pytest.raises(RecordError) as e:
        parse_record(line)
    assert why in str(e.value)
    assert "Error" not in str(e.value) and "Traceback" not in str(e.value)


def test_random_bytes_never_raise_anything_else():
    rng = random.Random(0)
    alphabet = b'{}[]",:0123456789-.eEtrufalsn\\ uvi\x00\xff'
    pieces = [b'{"i":', b'"v":', b'"status":"done"', b"[", b"{", b'"', b"\\", b"1e999", b"-0", b"}", b","]
    for _ in range(3000):
        if rng.random() < 0.5:
            line = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        else:
            line = b"".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12)))
        try:
            assert isinstance(parse_record(line), dict)
        except RecordError:
            pass


def test_stream_marks_the_run_token_and_stops_at_the_first_violation():
    s = RecordStream("secret")
    assert not s.feed(b'{"status":"ready"}', 1.0)
    assert s.feed(b'{"status":"pass","token":"secret"}', 2.0) and s.passed() and s.arrivals == [1.0, 2.0]
    s = RecordStream("secret")
    assert s.feed(b'{"status":"pass","token":"guess"}', 1.0) and not s.passed()
    s = RecordStream("secret")
    assert s.feed(b"[[[", 1.0) and s.violation.startswith("result record 1 is malformed: it is not one flat")


# Hostile samples: each writes straight to every descriptor it has (the result pipe among them) on its first call.
HOSTILE = {
    "deep nesting": b"[" * 200_000 + b"\n",
    "a line longer than the limit": b"x" * (MAX_RECORD_BYTES + 2),
    "a time field that is a string": b'{"i":0,"v":"1","t":"fast"}\n',
    "an index that is a string": b'{"i":"0","v":"1"}\n',
    "an output that is a number": b'{"i":0,"v":1}\n',
    "a forged token flag": b'{"status":"pass","token_ok":true}\n',
    "a forged end": b'{"status":"done","token":"0123"}\n',
    "an output out of order": b'{"i":7,"v":"1"}\n',
    "a second ready": b'{"status":"ready"}\n',
    "not ASCII": b'{"i":0,"v":"\xc3\xa9"}\n',
    "NaN": b'{"i":0,"v":NaN}\n',
    "a huge integer": b'{"i":' + b"9" * 100_000 + b',"v":"1"}\n',
    "an unterminated string of escaped quotes": b'{"i":0,"v":"' + b'\\"' * 100_000 + b"\n",  # the old regex: minutes
    "a flood": None,  # more than the result channel takes
}
TASK = {"humaneval": "HumanEval/0", "humaneval_plus": "HumanEval/0", "mbpp": "Mbpp/11", "mbpp_plus": "Mbpp/2"}
WRITER = """
import os
def {ep}(*args, **kwargs):
    data = {data!r}
    for fd in range(3, 64):
        try:
            if data is None:
                for _ in range(64):
                    os.write(fd, b'{{"status":"ready"}}\\n' * 300000)
            else:
                os.write(fd, data)
        except OSError:
            pass
    return None
"""


@pytest.mark.parametrize("name", sorted(TASK))
def test_hostile_records_are_that_samples_error_and_the_run_goes_on(name, tmp_path):
    bench = load_benchmark(name)
    p = bench.by_id[TASK[name]]
    head = p.extra.get("preamble", "")
    comps = [Completion(p.task_id, k, head + WRITER.format(ep=p.entry_point, data=data), k + 1, "solution")
             for k, data in enumerate(HOSTILE.values())]
    comps.append(Completion(p.task_id, len(comps), p.reference, len(comps) + 1, "solution"))  # scored after them
    # the programs carry their records as literals (8 MB for the line over the record limit): they must run, so
    # the completion size limit sits above them
    opts = ScoreOptions(workers=2, cache_dir=str(tmp_path / "cache"), allow_subset=True, progress=False,
                        time_rule=TimeRule(min_time_s=5.0, sample_cap_s=20.0), ks=(1,), max_completion_bytes=32 << 20)
    out = tmp_path / "out" / "results.jsonl"
    with any_sandbox(memory_bytes=1 << 30, max_result_bytes=64 << 20) as sb:
        summary = score_completions(bench, comps, out, opts, sb)
        rows = {r["sample"]: r for r in map(json.loads, out.read_text().splitlines())}
        assert len(rows) == len(comps)
        for k, what in enumerate(HOSTILE):
            v = rows[k]["noalias"]
            assert v["base"] == "error" and v.get("plus", "error") in ("error", "skipped"), (what, v)
            detail = v["detail"]
            assert detail.startswith("the program broke the result protocol: "), (what, detail)
            assert "Diverged" not in detail and "RecordError" not in detail and "Traceback" not in detail, detail
        good = rows[len(HOSTILE)]["noalias"]
        assert good["base"] == "pass" and good.get("plus", "pass") == "pass", good
        assert summary["error_samples"] == len(HOSTILE)
        again = score_completions(bench, comps, out, opts, sb)  # a resume: nothing redone, the same summary
    assert len(out.read_text().splitlines()) == len(comps)
    assert again["metrics"] == summary["metrics"] and again["error_samples"] == len(HOSTILE)


def test_the_runner_writes_outputs_in_the_layout_the_harness_compares_byte_for_byte():
    from elfreg.sandbox.codecheck import tail
    from elfreg.sandbox.inside.codec import encode_output
    from elfreg.sandbox.inside.runner import output_line

    for value in (None, 1.5, "é\"\n", [1, (2, {3})], list(range(1 << 17))):
        line = output_line(7, value)
        assert line == b'{"i":7,' + tail(encode_output(value)) + b"\n"
        assert parse_record(line[:-1])["i"] == 7


# Unterminated strings full of escaped quotes: the old string regex retried at every one (80 KB: 40 s; 8 MiB: days).
UNTERMINATED = [b'{"i":0,"v":"' + b'\\"' * ((MAX_RECORD_BYTES - 12) // 2),
                b'{"i":0,"v":"' + b'\\"' * ((MAX_RECORD_BYTES - 14) // 2) + b'\\',
                b'"' * MAX_RECORD_BYTES, b'{"i":0,"v":"' + b'\\\\"' * ((MAX_RECORD_BYTES - 12) // 3)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("k", range(len(UNTERMINATED)))
def test_unterminated_strings_are_refused_in_linear_time(k):
    import time

    t = time.process_time()   # this process's CPU time: a busy machine does not stretch it
    with pytest.raises(RecordError):
        parse_record(UNTERMINATED[k])
    assert time.process_time() - t < 3.0  # measured 0.1-0.5 s; the old regex never finished


def test_escapes_and_brackets_inside_strings_are_read_as_json_reads_them():
    ok = [b'{"i":0,"v":"[[\\"]]{"}', b'{"i":0,"v":"\\\\"}', b'{"i":0,"v":"\\\\\\"[{"}', b'{"i":0,"v":"\\u005c"}']
    for line in ok:
        assert parse_record(line)["i"] == 0, line
    # a closing quote that is really escaped: the string runs on to the end, over the closing brace
    for line in (b'{"i":0,"v":"\\"}', b'{"i":0,"v":"\\\\\\"}'):
        with pytest.raises(RecordError, match="flat"):
            parse_record(line)
    # an escaped backslash closes nothing: the bracket after the closing quote is outside and refused
    with pytest.raises(RecordError, match="flat"):
        parse_record(b'{"i":0,"v":"\\\\",[1]}')
