"""Run fingerprints (elfreg.fingerprint): identities, the one-line mismatch, claims, signed rows."""

import json
import os

import pytest

from elfreg.fingerprint import (RunMismatch, claim, differences, file_digest, flatten, folder_key, mismatch_message,
                                note,
                                model_identity, move_aside, row_ok, sign_row)


def test_model_identity_sees_the_bytes_not_the_mtime(tmp_path):
    m = tmp_path / "model"
    m.mkdir()
    (m / "config.json").write_text('{"width": 64}')
    big = m / "model.safetensors"
    big.write_bytes(bytes(9 << 20))  # over 8 MiB: hashed by size, first and last MiB
    ident = model_identity(m)
    os.utime(big, (1, 1))  # copied or touched: the same model
    assert model_identity(m) == ident
    for offset in (0, (9 << 20) - 1):  # a weight changed at either end
        with open(big, "r+b") as f:
            f.seek(offset)
            f.write(b"\1")
        assert model_identity(m) != ident
        big.write_bytes(bytes(9 << 20))
    (m / "config.json").write_text('{"width": 32}')
    assert model_identity(m) != ident
    assert model_identity("org/some-model") == "org/some-model"  # a hub id stands for itself


def test_a_setting_added_later_reads_as_its_old_behaviour_in_an_older_record():
    from elfreg.fingerprint import ADDED_LATER

    assert ADDED_LATER["model.flow_map"] is False
    older = {"model.width": 64}  # recorded before model.flow_map existed
    assert differences(older, {"model.width": 64, "model.flow_map": False}) == []
    assert differences(older, {"model.width": 64, "model.flow_map": True}) == [("model.flow_map", False, True)]
    assert differences({"x": 1}, {"x": 1, "y": 2}) == [("y", "unset", 2)]  # any other new key still differs


def test_differences_and_the_one_line_message():
    old = flatten({"nfe": 64, "train": {"lr": 0.001, "steps": 3}, "seed": 0})
    new = flatten({"nfe": 32, "train": {"lr": 0.001, "steps": 3}, "extra": True, "seed": 0})
    assert old == {"nfe": 64, "train.lr": 0.001, "train.steps": 3, "seed": 0}
    assert differences(old, new) == [("extra", "unset", True), ("nfe", 64, 32)]
    assert mismatch_message("runs/x", [("nfe", 64, 32)]) == \
        "runs/x: was made with nfe=64, now nfe=32; pass --restart to start over, or use another --out"
    long = mismatch_message("r", [(f"k{i}", i, i + 1) for i in range(6)] + [("model", "a" * 64, "b" * 64)], "--output")
    assert "\n" not in long and "(and 3 more)" in long and "use another --output" in long


def test_claim_records_refuses_and_restarts(tmp_path):
    out, record = tmp_path / "r.jsonl", tmp_path / "r.fingerprint.json"
    key = claim(record, {"nfe": 64}, [out])
    assert json.loads(record.read_text())["settings"] == {"nfe": 64}
    assert claim(record, {"nfe": 32}, [out]) != key  # no results yet: nothing to protect, the new settings count
    claim(record, {"nfe": 64}, [out])
    out.write_text("{}\n")
    key = claim(record, {"nfe": 64}, [out])
    with pytest.raises(RunMismatch, match=r"r.jsonl: was made with nfe=64, now nfe=32; pass --restart"):
        claim(record, {"nfe": 32}, [out])
    with pytest.raises(RunMismatch, match="nfe"):
        claim(record, {"nfe": 32}, [out], write=False)
    assert json.loads(record.read_text())["settings"] == {"nfe": 64} and out.read_text() == "{}\n"
    assert claim(record, {"nfe": 32}, [out], restart=True) != key
    assert not out.exists() and len(list(tmp_path.glob("r.jsonl.replaced-*"))) == 1
    assert len(move_aside([tmp_path / "missing"])) == 0


def test_claim_refuses_results_without_a_record_and_a_damaged_record(tmp_path):
    out, record = tmp_path / "r.jsonl", tmp_path / "fp.json"
    out.write_text("{}\n")
    with pytest.raises(RunMismatch, match="no record of the settings"):
        claim(record, {"a": 1}, [out])
    record.write_text("{not json")
    with pytest.raises(ValueError, match="fp.json: not a fingerprint file"):
        claim(record, {"a": 1}, [out])


def test_rows_signed_with_the_folder_key():
    key = "ab" * 32
    row = sign_row({"task_id": "t/0", "sample": 0, "correct": False, "detail": [1, 2.5]}, key)
    read = json.loads(json.dumps(row))
    assert row_ok(read, key)
    assert not row_ok({**read, "correct": True}, key)  # an edited verdict
    assert not row_ok({k: v for k, v in read.items() if k != "check"}, key)  # an unsigned row
    assert not row_ok(read, "cd" * 32)  # a row of another folder


def test_folder_key_is_kept(tmp_path):
    key = folder_key(tmp_path)
    assert folder_key(tmp_path) == key and len(bytes.fromhex(key)) == 32


@pytest.mark.timeout(30)
def test_file_digest_refuses_what_it_cannot_read_twice(tmp_path):
    # before: a FIFO made the digest wait forever for a writer, /dev/zero never ended
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        with pytest.raises(ValueError, match="not a regular file"):
            file_digest(path)
    (tmp_path / "x").write_bytes(b"abc")
    assert file_digest(tmp_path / "x") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_notes_are_recorded_beside_the_settings_and_never_compared(tmp_path):
    record, results = tmp_path / "fp.json", tmp_path / "results.jsonl"
    note(record, {"precision_used": "fp32"})  # no fingerprint yet: nothing to note into
    assert not record.exists()
    key = claim(record, {"precision": "auto"}, [results])
    note(record, {"precision_used": "fp32", "bf16_time_ratio": 12.5})
    results.write_text("{}\n")
    assert json.loads(record.read_text())["notes"] == {"precision_used": "fp32", "bf16_time_ratio": 12.5}
    assert claim(record, {"precision": "auto"}, [results]) == key  # another machine's note would not refuse it
    note(record, {"precision_used": "bf16"})
    assert json.loads(record.read_text())["notes"]["precision_used"] == "bf16"
    with pytest.raises(RunMismatch, match="precision"):
        claim(record, {"precision": "fp32"}, [results])
