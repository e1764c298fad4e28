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
