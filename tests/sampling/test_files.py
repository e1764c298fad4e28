import json

import pytest

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.results_io import read_records
from elfreg.sampling.files import generate_to_file, merge_parts, part_path, read_prompts

from ._fixtures import pipeline, strip_timing, write_prompts


class Killed(Exception):
    pass


def _kill_after(pipe, batches):
    """Make the pipeline die (like a kill) after `batches` batches were written."""
    run_batch = pipe.run_batch
    state = {"n": 0}

    def wrapped(prompts, keys):
        if state["n"] == batches:
            raise Killed()
        state["n"] += 1
        return run_batch(prompts, keys)

    pipe.run_batch = wrapped
    return pipe


def test_resume_after_kill_neither_repeats_nor_loses(tmp_path):
    cfg = SamplerConfig(sampler="early-stop", nfe=4, rho=2, seed=3)
    prompts = read_prompts(write_prompts(tmp_path / "p.jsonl"))
    ref = tmp_path / "ref.jsonl"
    assert generate_to_file(pipeline(cfg, 3), prompts, ref, samples=4, progress=False) == 20
    out = tmp_path / "out.jsonl"
    with pytest.raises(Killed):
        generate_to_file(_kill_after(pipeline(cfg, 3), 2), prompts, out, samples=4, progress=False)
    assert len(read_records(out)) == 6
    with open(out, "a") as f:               # a kill mid-line leaves a partial record
        f.write('{"prompt_index": 9, "sample_')
    with pytest.warns(UserWarning, match="truncated last line"):
        n = generate_to_file(pipeline(cfg, 5), prompts, out, samples=4, progress=False)
    assert n == 14
    recs = read_records(out)
    assert len({(r["prompt_index"], r["sample_index"]) for r in recs}) == len(recs) == 20
    assert strip_timing(recs) == strip_timing(read_records(ref))
    assert recs[0]["prompt_id"] == "q0"


def test_leftover_part_files_are_merged(tmp_path):
    cfg = SamplerConfig(sampler="full-span", nfe=3, seed=0)
    prompts = read_prompts(write_prompts(tmp_path / "p.jsonl"))
    out = tmp_path / "out.jsonl"
    part = part_path(out, 1)
    rec = {"prompt_index": 1, "sample_index": 0, "response": "x"}
    part.write_text(json.dumps(rec) + "\n")
    n = generate_to_file(pipeline(cfg, 4), prompts, out, samples=1, progress=False)
    assert n == 4 and not part.exists()
    recs = read_records(out)
    assert sorted((r["prompt_index"], r["sample_index"]) for r in recs) == [(i, 0) for i in range(5)]
    assert merge_parts(out) == 0


def test_read_prompts_errors(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_prompts(empty)
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"prompt": "one"}\n{"text": "two"}\n')
    with pytest.raises(ValueError, match=r"b\.jsonl:2: expected an object with a string field 'prompt'"):
        read_prompts(bad)
    with pytest.raises(FileNotFoundError):
        read_prompts(tmp_path / "none.jsonl")
