"""The benchmark files shipped with elfreg: every benchmark loads without ../shared, checked by sha256."""

import gzip
import hashlib
import shutil

import pytest

import elfreg.tasks.testsets as testsets
from elfreg.tasks.testsets import load_benchmark, manifest, packaged_data_dir

SIZES = {"gsm8k": 1319, "math500": 500, "humaneval": 164, "humaneval_plus": 164, "mbpp": 500, "mbpp_plus": 378,
         "mmlu": 14042, "mmlu_dev": 285}


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
    monkeypatch.setattr(testsets, "packaged_data_dir", lambda: copy)
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


def test_mmlu_ships_test_and_dev_with_their_subjects_and_answers():
    test, dev = load_benchmark("mmlu"), load_benchmark("mmlu_dev")
    subjects = {p.extra["subject"] for p in test.problems}
    assert len(subjects) == 57 and {p.extra["subject"] for p in dev.problems} == subjects
    # the release's answer distribution (shared/data/mmlu/PROVENANCE.md): A 3,222, B 3,462, C 3,582, D 3,776
    counts = {x: sum(p.answer == x for p in test.problems) for x in "ABCD"}
    assert counts == {"A": 3222, "B": 3462, "C": 3582, "D": 3776}
    assert sum(p.extra["subject"] == "professional_law" for p in test.problems) == 1534
    first = test.problems[0]
    assert first.task_id == "abstract_algebra/0" and len(first.extra["choices"]) == 4
    assert test.format_prompt(first).splitlines()[1:5] == [f"({x}) {c.strip()}" for x, c in
                                                           zip("ABCD", first.extra["choices"])]


def test_mmlu_reads_the_release_csvs_and_integer_answers(tmp_path):
    folder = tmp_path / "data" / "test"
    folder.mkdir(parents=True)
    (folder / "anatomy_test.csv").write_text('"Which bone, ""long""?",femur,rib,skull,ulna,A\nQ2,a,b,c,d,D\n')
    bench = load_benchmark("mmlu", str(tmp_path / "data"))
    assert [(p.task_id, p.answer) for p in bench.problems] == [("anatomy/0", "A"), ("anatomy/1", "D")]
    assert bench.problems[0].question == 'Which bone, "long"?' and bench.data_version is None
    hf = tmp_path / "hf.jsonl"  # the Hugging Face cais/mmlu export: integer answers
    hf.write_text('{"question": "q", "subject": "virology", "choices": ["a", "b", "c", "d"], "answer": 2}\n')
    assert [(p.task_id, p.answer) for p in load_benchmark("mmlu", str(hf)).problems] == [("virology/0", "C")]
    (folder / "bad_test.csv").write_text("q,a,b,c,d\n")
    with pytest.raises(ValueError, match=r"bad_test.csv:1: expected question,A,B,C,D,answer"):
        load_benchmark("mmlu", str(tmp_path / "data"))
    hf.write_text('{"question": "q", "choices": ["a", "b"], "answer": 2}\n')
    with pytest.raises(ValueError, match=r"hf.jsonl:1: expected an MMLU row"):
        load_benchmark("mmlu", str(hf))
