"""The benchmark files shipped with elfreg: every benchmark loads without ../shared, checked by sha256."""

import gzip
import hashlib
import shutil

import pytest

import elfreg.eval.datasets as ds
from elfreg.eval.datasets import load_benchmark, manifest, packaged_data_dir

SIZES = {"gsm8k": 1319, "math500": 500, "humaneval": 164, "humaneval_plus": 164, "mbpp": 500, "mbpp_plus": 378}


@pytest.fixture(autouse=True)
def _no_data_dir(monkeypatch):
    monkeypatch.delenv("ELFREG_DATA_DIR", raising=False)


@pytest.mark.parametrize("name", list(SIZES))
def test_every_benchmark_loads_from_the_package(name):
    bench = load_benchmark(name)
    entry = manifest()[name]
    assert len(bench.problems) == SIZES[name]
    assert bench.source.startswith(str(packaged_data_dir())) and bench.source_sha256 == entry["sha256"]
    assert bench.data_version == entry["version"]


@pytest.mark.parametrize("name", list(SIZES))
def test_manifest_records_licence_and_upstream_content_hash(name):
    entry = manifest()[name]
    path = packaged_data_dir() / entry["file"]
    with gzip.open(path, "rb") as f:
        raw = f.read()
    assert hashlib.sha256(raw).hexdigest() == entry["content_sha256"]
    assert sum(1 for line in raw.splitlines() if line.strip()) == entry["rows"]
    assert entry["license"] and (packaged_data_dir() / entry["license_file"]).is_file() and entry["version"]


def test_damaged_shipped_file_is_refused(tmp_path, monkeypatch):
    copy = tmp_path / "benchdata"
    shutil.copytree(packaged_data_dir(), copy)
    target = copy / manifest()["humaneval"]["file"]
    target.write_bytes(target.read_bytes()[:-10])
    monkeypatch.setattr(ds, "packaged_data_dir", lambda: copy)
    with pytest.raises(ValueError, match="humaneval: shipped data file .* is damaged"):
        load_benchmark("humaneval")


def test_data_overrides_and_unpinned_copies_are_recorded(tmp_path, monkeypatch):
    shipped = packaged_data_dir() / manifest()["gsm8k"]["file"]
    plain = tmp_path / "gsm8k" / "test.jsonl"  # the upstream layout, uncompressed: still the pinned content
    plain.parent.mkdir()
    plain.write_bytes(gzip.decompress(shipped.read_bytes()))
    monkeypatch.setenv("ELFREG_DATA_DIR", str(tmp_path))
    bench = load_benchmark("gsm8k")
    assert bench.source == str(plain) and bench.data_version == manifest()["gsm8k"]["version"]
    small = tmp_path / "small.jsonl"
    small.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    bench = load_benchmark("gsm8k", str(small))  # --data: any file, scored as given but not called the pinned one
    assert len(bench.problems) == 1 and bench.data_version is None


def test_missing_data_dir_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ELFREG_DATA_DIR", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="ELFREG_DATA_DIR=.*nope is not a folder"):
        load_benchmark("math500")
