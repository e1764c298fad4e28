import json

import pytest

from elfreg.sampling.results_io import AppendWriter, done_keys, read_records, repair_truncated_tail


def test_append_and_read_back(tmp_path):
    out = tmp_path / "r.jsonl"
    with AppendWriter(out) as w:
        w.write_batch([{"prompt_index": 0, "sample_index": 1, "response": "a\nb"}])
        w.write_batch([{"prompt_index": 2, "sample_index": 0, "response": "c"}])
    assert [r["response"] for r in read_records(out)] == ["a\nb", "c"]
    assert done_keys([out, tmp_path / "missing.jsonl"]) == {(0, 1), (2, 0)}


def test_truncated_tail_is_dropped_with_a_warning(tmp_path):
    out = tmp_path / "r.jsonl"
    good = json.dumps({"prompt_index": 0, "sample_index": 0}) + "\n"
    out.write_text(good + '{"prompt_index": 1, "samp')
    with pytest.raises(ValueError, match="no newline"):
        read_records(out)
    assert read_records(out, ignore_partial_tail=True)[0]["prompt_index"] == 0
    with pytest.warns(UserWarning, match="truncated last line"):
        assert repair_truncated_tail(out)
    assert out.read_text() == good and not repair_truncated_tail(out)


def test_malformed_complete_line_names_file_and_line(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text(json.dumps({"prompt_index": 0, "sample_index": 0}) + "\n{bad}\n")
    with pytest.raises(ValueError, match=r"r\.jsonl:2: not a results record"):
        read_records(out)


def test_a_non_finite_number_is_never_written(tmp_path):
    """NaN / Infinity are not JSON: a row holding one is refused, naming the field, and the file stays valid."""
    out = tmp_path / "r.jsonl"
    with AppendWriter(out) as w:
        w.write_batch([{"prompt_index": 0, "sample_index": 0, "w": 3.0}])
        with pytest.raises(ValueError, match="^w is nan: JSON has no such number"):
            w.write_batch([{"prompt_index": 1, "sample_index": 0, "w": float("nan")}])
    assert [json.loads(line, parse_constant=pytest.fail) for line in out.read_text().splitlines()] == \
        [{"prompt_index": 0, "sample_index": 0, "w": 3.0}]
