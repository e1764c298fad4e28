"""Expectations cannot be poisoned (issue 19): every cached row is verified (HMAC) before use; a tampered row is
rebuilt with a warning naming the file; an unisolated run works on its own file and key, and leaves the isolated
runs' key deleted, so even a program that read the key and re-signed its forgery is caught."""

import logging
import marshal
import os
import struct

import pytest

from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.completions import Completion
from elfreg.eval.scoring import ScoreOptions, score_completions, score_program
from elfreg.sandbox import ExpectedOutputs, IsolationUnavailable, Sandbox, SandboxConfig, TimeRule

from ._isolation import isolated_sandbox

RULE = TimeRule(min_time_s=2.0, sample_cap_s=10.0)
TASKS = {"humaneval": ["HumanEval/0", "HumanEval/1"], "humaneval_plus": ["HumanEval/0", "HumanEval/1"]}
EMPTY = {"humaneval": {"calls": [], "outputs": []},  # no calls: any program "answers" them all
         "humaneval_plus": {"base": [], "plus": []}}  # no inputs: any program passes


COUNTS = struct.Struct("<HQ")  # a record: MAC (32 bytes), the id's and the row's byte counts, the id, the row


def _records(path) -> list[tuple[bytes, str, bytes]]:
    """The cache file's records as (MAC, task id, row bytes), read the way a program without the key could."""
    data, at, out = path.read_bytes(), 0, []
    while at < len(data):
        n_id, n_row = COUNTS.unpack_from(data, at + 32)
        head = at + 32 + COUNTS.size
        out.append((data[at:at + 32], data[head:head + n_id].decode(), data[head + n_id:head + n_id + n_row]))
        at = head + n_id + n_row
    return out


def _rewrite(path, task_id: str, change: dict) -> None:
    """Change one row of the cache and keep its record's old MAC (what a program without the key can do)."""
    records = _records(path)
    with open(path, "wb") as f:
        for mac, tid, body in records:
            if tid == task_id:
                body = marshal.dumps({**marshal.loads(body), **change}, 4)
            f.write(mac + COUNTS.pack(len(tid.encode()), len(body)) + tid.encode() + body)


def _untimed(row: dict) -> dict:
    """A cached row without its (machine- and load-dependent) times."""
    return {k: [{f: x for f, x in e.items() if f != "t"} for e in v] if k in ("base", "plus") else v
            for k, v in row.items() if k not in ("ref_time", "check_time", "base_load", "plus_load")}


def _wrong(p) -> str:
    return p.extra["preamble"] + f"\ndef {p.entry_point}(*args):\n    return None\n"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_tampered_row_is_detected_rebuilt_and_named(name, tmp_path, caplog):
    bench = load_benchmark(name)
    p = bench.by_id[TASKS[name][0]]
    with isolated_sandbox(memory_bytes=1 << 30) as sb:
        exp = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only=set(TASKS[name]))
        _rewrite(exp.path, p.task_id, EMPTY[name])
        with caplog.at_level(logging.WARNING):
            again = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only=set(TASKS[name]))
        assert str(exp.path) in caplog.text and p.task_id in caplog.text and "integrity" in caplog.text
        assert _untimed(again.table[p.task_id]) == _untimed(exp.table[p.task_id])  # recomputed
        res = score_program(bench, p, _wrong(p), sb, again, RULE)
        assert res["base"] != "pass"
        # the file was rewritten: a third load trusts it without a warning
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only=set(TASKS[name]))
        assert "integrity" not in caplog.text


def test_an_unreadable_cache_is_rebuilt_with_a_warning(tmp_path, caplog):
    bench = load_benchmark("humaneval")
    with isolated_sandbox(memory_bytes=1 << 30) as sb:
        exp = ExpectedOutputs(bench, sb, tmp_path)
        exp.path.parent.mkdir(parents=True, exist_ok=True)
        exp.path.write_bytes(b"not a cache file")
        with caplog.at_level(logging.WARNING):
            exp.load_or_compute(progress=False, only={"HumanEval/0"})
    assert str(exp.path) in caplog.text and exp.table["HumanEval/0"]["calls"]


def test_a_cut_short_cache_keeps_the_rows_before_the_cut(tmp_path, caplog):
    bench = load_benchmark("humaneval")
    only = set(TASKS["humaneval"])
    with isolated_sandbox(memory_bytes=1 << 30) as sb:
        exp = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only=only)
        first, second = _records(exp.path)
        exp.path.write_bytes(exp.path.read_bytes()[:-len(second[2]) // 2])
        kept = ExpectedOutputs(bench, sb, tmp_path)
        with caplog.at_level(logging.WARNING):
            kept._read(bytes.fromhex(kept.key_path.read_text()))
        assert list(kept.table) == [first[1]] and "truncated" in caplog.text and str(exp.path) in caplog.text
        again = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only=only)
        assert set(again.table) == only and len(_records(exp.path)) == 2  # the missing row recomputed and written


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_cached_test_sets_are_what_the_checks_would_prepare(name, tmp_path):
    """The cache keeps parts of each task's checks (the inputs' marshal form, the calls' text and tails): read back,
    the checks equal those computed from the rows themselves."""
    from elfreg.sandbox.codecheck import IOTests, encode_calls, tail

    bench = load_benchmark(name)
    with isolated_sandbox(memory_bytes=1 << 30) as sb:
        ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only=set(TASKS[name]))
        exp = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only=set(TASKS[name]))
    for tid in TASKS[name]:
        p, row = bench.by_id[tid], exp.table[tid]
        if name == "humaneval":
            got = exp.original(p)
            assert got.calls_text == encode_calls(row["calls"]) and got.tails == [tail(o) for o in row["outputs"]]
            continue
        for s, inputs in (("base", p.base_inputs), ("plus", p.plus_inputs)):
            fresh = IOTests.build(s, inputs, row[f"{s}_inputs"], row[s], p.entry_point, row[f"{s}_load"])
            cached = exp.io(p, (s,))[0]
            assert cached == fresh and cached.inputs_marshal is not None and any(cached.tails)


# The program of the unisolated run: it runs with the harness's rights, reads the isolated runs' key (or plants one
# of its own), and rewrites another task's row in the isolated cache with a valid MAC: no calls, so any program
# "answers" them all.
FORGER = """
import hashlib, hmac, marshal, os, secrets, struct
def {ep}(*args):
    key_path = {key!r}
    if not os.path.exists(key_path):
        with open(key_path, "w") as f:
            f.write(secrets.token_hex(32))
    key = bytes.fromhex(open(key_path).read().strip())
    with open({used!r}, "w") as f:  # for the test: the key the forgery is signed with
        f.write(key.hex())
    counts = struct.Struct("<HQ")
    data, at, out = open({cache!r}, "rb").read(), 0, []
    while at < len(data):
        n_id, n_row = counts.unpack_from(data, at + 32)
        head = at + 32 + counts.size
        mac, tid, body = data[at:at + 32], data[head:head + n_id], data[head + n_id:head + n_id + n_row]
        if tid == {victim!r}.encode():
            body = marshal.dumps({{"calls": [], "outputs": [], "ref_time": 1.0, "check_time": 1.0,
                                   "calls_text": "[]", "tails": []}}, 4)
            c = counts.pack(len(tid), len(body))
            msg = os.path.basename({cache!r}).encode() + b"\\0" + c + tid + body
            mac = hmac.new(key, msg, hashlib.sha256).digest()
        out.append(mac + counts.pack(len(tid), len(body)) + tid + body)
        at = head + n_id + n_row
    with open({cache!r}, "wb") as f:
        f.write(b"".join(out))
    return None
"""


def test_an_unisolated_run_writes_nothing_an_isolated_run_trusts(tmp_path, monkeypatch, caplog):
    bench = load_benchmark("humaneval")
    victim, other = (bench.by_id[t] for t in TASKS["humaneval"])
    with isolated_sandbox(memory_bytes=1 << 30) as sb:
        iso = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only={victim.task_id})
    assert iso.key_path.exists()
    try:
        none = Sandbox(SandboxConfig(isolation="none", memory_bytes=1 << 30))
    except IsolationUnavailable as e:  # pragma: no cover - `none` always works
        pytest.skip(str(e))
    if none.isolation.uid_drop:
        pytest.skip("the unisolated programs run as a private uid here: they cannot read or write the cache")
    forger = other.extra["preamble"] + FORGER.format(ep=other.entry_point, key=str(iso.key_path),
                                                     cache=str(iso.path), victim=victim.task_id,
                                                     used=str(tmp_path / "used-key"))
    opts = ScoreOptions(workers=1, cache_dir=str(tmp_path), allow_subset=True, progress=False, time_rule=RULE,
                        ks=(1,))
    score_completions(bench, [Completion(other.task_id, 0, forger, 1, "solution")], tmp_path / "none.jsonl",
                      opts, none)
    unisolated = ExpectedOutputs(bench, none, tmp_path)
    assert unisolated.path != iso.path and unisolated.path.exists()  # its own file...
    assert unisolated.key_path != iso.key_path and not iso.key_path.exists()  # ...its own key; the isolated one gone
    mac, _, body = next(r for r in _records(iso.path) if r[1] == victim.task_id)
    assert marshal.loads(body)["calls"] == []  # the program did rewrite the isolated cache...
    tid = victim.task_id.encode()
    used = bytes.fromhex((tmp_path / "used-key").read_text())
    assert mac == iso._mac(used, COUNTS.pack(len(tid), len(body)), tid, body)  # ...with a valid MAC
    with isolated_sandbox(memory_bytes=1 << 30) as sb, caplog.at_level(logging.WARNING):
        exp = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only={victim.task_id})
        assert str(iso.path) in caplog.text and victim.task_id in caplog.text
        assert exp.table[victim.task_id]["calls"]
        assert score_program(bench, victim, _wrong(victim), sb, exp, RULE)["base"] != "pass"
        summary = score_completions(bench, [Completion(victim.task_id, 0, _wrong(victim), 1, "solution")],
                                    tmp_path / "iso.jsonl", opts, sb)
    assert summary["isolated"] and summary["metrics"]["noalias"]["base"]["pass@1"] == 0.0


def test_keys_are_private(tmp_path, caplog):
    bench = load_benchmark("humaneval")
    with isolated_sandbox(memory_bytes=1 << 30) as sb:
        exp = ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only={"HumanEval/0"})
        assert os.stat(exp.key_path).st_mode & 0o077 == 0
        os.chmod(exp.key_path, 0o644)  # a key others could read signs nothing
        with caplog.at_level(logging.WARNING):
            ExpectedOutputs(bench, sb, tmp_path).load_or_compute(progress=False, only={"HumanEval/0"})
    assert "not private" in caplog.text and "integrity" in caplog.text
    assert os.stat(exp.key_path).st_mode & 0o077 == 0
