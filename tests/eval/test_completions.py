import json
import os
import threading

import pytest

from elfreg.eval.completions import (CompletionsError, check_max_completion_bytes, line_limit, load_completions,
                                     read_completions, unknown_task_id)
from elfreg.fingerprint import file_digest


def _write(tmp_path, text):
    p = tmp_path / "c.jsonl"
    p.write_text(text)
    return p


def test_reads_valid_file(tmp_path):
    p = _write(tmp_path, '{"task_id": "a", "completion": "x", "sample": 0}\n\n{"task_id": "a", "completion": "y", "sample": 1}\n')
    cs = read_completions(p, {"a"})
    assert [(c.sample, c.line) for c in cs] == [(0, 1), (1, 3)]


@pytest.mark.parametrize("text,msg", [
    ('{"task_id": "a", "completion": "x"}\n{oops\n', r"c.jsonl:2: malformed JSON"),
    ('{"task_id": "zzz", "completion": "x", "sample": 0}\n', r"c.jsonl:1: unknown task_id 'zzz'"),
    ('{"task_id": "a", "completion": "x", "sample": 3}\n{"task_id": "a", "completion": "y", "sample": 3}\n',
     r"c.jsonl:2: duplicated sample 3 .*first on line 1"),
    ('{"task_id": "a", "completion": 5}\n', r"c.jsonl:1: field 'completion'"),
    ('{"task_id": "a", "completion": "x", "sample": -1}\n', r"c.jsonl:1: field 'sample'"),
    ('[1, 2]\n', r"c.jsonl:1: expected a JSON object"),
])
def test_bad_input_names_the_line(tmp_path, text, msg):
    with pytest.raises(CompletionsError, match=msg):
        read_completions(_write(tmp_path, text), {"a"})


def test_both_standard_formats_are_read_with_their_format(tmp_path):
    sol = read_completions(_write(tmp_path, '{"task_id": "a", "solution": "def f(): ...", "sample": 0}\n'), {"a"})
    assert sol[0].format == "solution" and sol[0].completion == "def f(): ..."
    comp = read_completions(_write(tmp_path, '{"task_id": "a", "completion": "    return 1\\n"}\n'), {"a"})
    assert comp[0].format == "completion"


def test_rows_without_sample_index_are_numbered_per_task_in_file_order(tmp_path):
    # human-eval / EvalPlus sample files: n rows per task, no index
    text = "".join('{"task_id": "%s", "completion": "%d"}\n' % (t, i) for i, t in enumerate("abab"))
    cs = read_completions(_write(tmp_path, text), {"a", "b"})
    assert [(c.task_id, c.sample, c.completion) for c in cs] == [("a", 0, "0"), ("b", 0, "1"), ("a", 1, "2"),
                                                                 ("b", 1, "3")]


@pytest.mark.parametrize("text,msg", [
    ('{"task_id": "a", "completion": "x"}\n\n{"task_id": "a", "solution": "y", "sample": 1}\n',
     r"c.jsonl:3: field 'solution' but line 1 has 'completion'; a file holds one sample format"),
    ('{"task_id": "a", "solution": "x"}\n{"task_id": "a", "sample": 1, "text": "y"}\n',
     r"c.jsonl:2: no sample field; expected 'completion' or 'solution'"),
    ('{"task_id": "a", "solution": "x", "completion": "y"}\n', r"c.jsonl:1: both 'completion' and 'solution'"),
    ('{"task_id": "a", "solution": 3}\n', r"c.jsonl:1: field 'solution' must be a string"),
])
def test_format_errors_name_the_line(tmp_path, text, msg):
    with pytest.raises(CompletionsError, match=msg):
        read_completions(_write(tmp_path, text), {"a"})


def test_text_benchmarks_read_completion_only(tmp_path):
    with pytest.raises(CompletionsError, match=r"c.jsonl:1: field 'solution' .* code benchmarks only"):
        read_completions(_write(tmp_path, '{"task_id": "a", "solution": "42"}\n'), {"a"}, ("completion",))


def test_a_line_is_bounded_before_it_is_held(tmp_path):
    limit = line_limit(10)
    assert limit == 6 * 10 + 65536  # a 10-byte completion written as \\u escapes, plus the other fields
    head = '{"task_id": "a", "completion": "'
    at_limit = head + "x" * (limit - len(head) - 2) + '"}'
    assert len(at_limit) == limit
    assert read_completions(_write(tmp_path, at_limit + "\n"), {"a"}, max_completion_bytes=10)[0].line == 1
    with pytest.raises(CompletionsError, match=f"c.jsonl:2: line longer than {limit:,} bytes"):
        read_completions(_write(tmp_path, at_limit + "\n" + at_limit[:-2] + 'x"}\n'), {"a"}, max_completion_bytes=10)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "4096", (1 << 30) + 1])
def test_the_completion_size_limit_is_checked(tmp_path, bad):
    with pytest.raises(ValueError, match=r"max_completion_bytes .*: need an integer in \[1, 1073741824\] bytes"):
        check_max_completion_bytes(bad)
    with pytest.raises(ValueError, match="max_completion_bytes"):  # before the file is opened
        read_completions(tmp_path / "missing.jsonl", max_completion_bytes=bad)


def test_the_file_is_hashed_as_it_is_read(tmp_path):
    p = _write(tmp_path, '{"task_id": "a", "completion": "x"}\n\n{"task_id": "a", "completion": "y"}')
    got = load_completions(p, {"a"})
    assert got.sha256 == file_digest(p) and [c.completion for c in got.rows] == ["x", "y"]


@pytest.mark.timeout(30)
def test_a_fifo_is_read_once_and_a_device_is_refused(tmp_path):
    fifo = tmp_path / "c.fifo"
    os.mkfifo(fifo)
    text = json.dumps({"task_id": "a", "completion": "x"}) + "\n"
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    got = load_completions(fifo, {"a"})
    assert [c.completion for c in got.rows] == ["x"] and got.sha256 == file_digest(_write(tmp_path, text))
    with pytest.raises(CompletionsError, match="^/dev/null: is a character device, not a completions file"):
        read_completions("/dev/null")


def test_an_unknown_task_id_shows_the_form_and_the_id_meant():
    ids = {"gsm8k/0": 0, "gsm8k/1": 1, "gsm8k/10": 2}  # in the benchmark's order
    assert unknown_task_id("0", ids) == ("unknown task_id '0' (did you mean 'gsm8k/0'?); this benchmark's ids look "
                                         "like 'gsm8k/0' ... 'gsm8k/10'")
    assert unknown_task_id("GSM8K/1", ids).startswith("unknown task_id 'GSM8K/1' (did you mean 'gsm8k/1'?)")
    # several ids end in /0 (MMLU's subjects): no guess
    assert unknown_task_id("0", ["a/0", "b/0"]) == "unknown task_id '0'; this benchmark's ids look like 'a/0' ... 'b/0'"
    assert unknown_task_id("x", []) == "unknown task_id 'x'"
