import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elfreg.data.readers import ReadStats, iter_examples, iter_source
from elfreg.data.sources import BadRowError, SourceSpec, preset

from ._shared import shared_dir

COLS = {"prompt": "q", "response": "a"}


def _write_jsonl(path, rows, gz=False):
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def test_jsonl_and_gz_in_order(tmp_path):
    _write_jsonl(tmp_path / "a.jsonl", [{"q": "1", "a": "x"}, "", {"q": "2", "a": "y"}])
    _write_jsonl(tmp_path / "b.jsonl.gz", [{"q": "3", "a": "z"}], gz=True)
    spec = SourceSpec(name="s", task="math", path=str(tmp_path), columns=COLS)
    got = list(iter_examples(spec))
    assert [e["prompt"] for e in got] == ["1", "2", "3"]
    assert got[1]["id"].endswith("a.jsonl:3")  # blank line 2 is not a row, line numbers stay true
    assert [i for i, _ in iter_source(spec, start=2)] == [2]


def test_bad_row_error_names_file_and_line(tmp_path):
    _write_jsonl(tmp_path / "d.jsonl", [{"q": "1", "a": "x"}, "{not json", {"q": "2"}, {"q": 4, "a": "w"}])
    spec = SourceSpec(name="s", task="math", path=str(tmp_path / "d.jsonl"), columns=COLS)
    with pytest.raises(BadRowError, match=r"d.jsonl:2: bad JSON"):
        list(iter_examples(spec))
    stats = ReadStats()
    skip = SourceSpec(name="s", task="math", path=str(tmp_path / "d.jsonl"), columns=COLS, on_bad_row="skip")
    assert [e["prompt"] for e in iter_examples(skip, stats)] == ["1"]
    assert (stats.rows_read, stats.rows_kept, stats.bad_rows) == (4, 1, 3)
    assert "d.jsonl:3: missing column 'a'" in stats.bad_examples[1]
    assert "d.jsonl:4: column 'q' must be a string" in stats.bad_examples[2]


def test_parquet_by_row_groups_and_resume(tmp_path):
    table = pa.table({"q": [f"q{i}" for i in range(10)], "a": [f"a{i}" for i in range(10)]})
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=3)  # 4 row groups
    spec = SourceSpec(name="s", task="math", path=str(tmp_path / "p.parquet"), columns=COLS)
    assert [e["prompt"] for e in iter_examples(spec)] == [f"q{i}" for i in range(10)]
    tail = [(i, e["prompt"]) for i, e in iter_source(spec, start=7)]
    assert tail == [(7, "q7"), (8, "q8"), (9, "q9")]
    assert next(iter_source(spec, start=7))[1]["id"].endswith("p.parquet:row 7")


def test_hf_local_dataset_by_path_and_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"query": ["q0", "q1", "q2"], "response": ["r0", "r1", "r2"]})
    (tmp_path / "hub").mkdir()
    ds.to_parquet(str(tmp_path / "hub" / "train.parquet"))
    by_path = preset("metamathqa", hub_id=str(tmp_path / "hub"))  # same call as for the hub id
    assert [e["prompt"] for e in iter_examples(by_path)] == ["q0", "q1", "q2"]
    assert [i for i, _ in iter_source(by_path, start=1)] == [1, 2]
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "disk"))
    disk = preset("metamathqa", path=str(tmp_path / "disk"), format="disk")
    assert [e["response"] for e in iter_examples(disk)] == ["r0", "r1", "r2"]


def test_gsm8k_train_preset_reads_real_file():
    spec = preset("gsm8k-train", path=str(shared_dir() / "data" / "gsm8k" / "train.jsonl"))
    stats = ReadStats()
    n = sum(1 for _ in iter_examples(spec, stats))
    assert n == stats.rows_read == 7473 and stats.bad_rows == 0


def test_missing_file_is_clear(tmp_path):
    spec = SourceSpec(name="s", task="math", path=str(tmp_path / "nope.jsonl"), columns=COLS)
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        list(iter_examples(spec))
