import json

import pytest

from elfreg.data.sources import SourceSpec
from elfreg.data.stream import ExampleStream

COLS = {"prompt": "q", "response": "a"}


def _sources(tmp_path, sizes=(23, 17)):
    specs = []
    for k, n in enumerate(sizes):
        path = tmp_path / f"s{k}.jsonl"
        path.write_text("".join(json.dumps({"q": f"s{k}-{i}", "a": "x"}) + "\n" for i in range(n)))
        specs.append(SourceSpec(name=f"s{k}", task="math", path=str(path), columns=COLS))
    return specs


def _prompts(stream, n=None):
    out = []
    for ex in stream:
        out.append(ex["prompt"])
        if n is not None and len(out) == n:
            break
    return out


def test_epoch_is_a_seeded_permutation(tmp_path):
    specs = _sources(tmp_path)
    a = _prompts(ExampleStream(specs, seed=3, shuffle_buffer=8))
    b = _prompts(ExampleStream(specs, seed=3, shuffle_buffer=8))
    c = _prompts(ExampleStream(specs, seed=4, shuffle_buffer=8))
    assert a == b and a != c
    assert sorted(a) == sorted([f"s0-{i}" for i in range(23)] + [f"s1-{i}" for i in range(17)])


def test_epochs_reshuffle_and_buffer_stays_bounded(tmp_path):
    stream = ExampleStream(_sources(tmp_path), seed=0, shuffle_buffer=5, epochs=2)
    seen = []
    for ex in stream:
        assert len(stream._buffer) <= 5  # streaming: never more than the buffer in memory
        seen.append(ex["prompt"])
    first, second = seen[:40], seen[40:]
    assert len(seen) == 80 and sorted(first) == sorted(second) and first != second


@pytest.mark.parametrize("cut", [0, 1, 7, 23, 39, 40, 41, 65])
def test_resume_is_exact_through_json(tmp_path, cut):
    specs = _sources(tmp_path)
    full = _prompts(ExampleStream(specs, seed=11, shuffle_buffer=6, epochs=2))
    s = ExampleStream(specs, seed=11, shuffle_buffer=6, epochs=2)
    head = _prompts(s, cut) if cut else []
    state = json.loads(json.dumps(s.state_dict()))  # must survive a JSON checkpoint
    resumed = ExampleStream(specs, seed=11, shuffle_buffer=6, epochs=2)
    resumed.load_state_dict(state)
    assert head + _prompts(resumed) == full


def test_ranks_partition_the_global_order(tmp_path):
    specs = _sources(tmp_path)
    full = _prompts(ExampleStream(specs, seed=5, shuffle_buffer=4))
    parts = [_prompts(ExampleStream(specs, seed=5, shuffle_buffer=4, rank=r, world_size=3)) for r in range(3)]
    for r in range(3):
        assert parts[r] == full[r::3]


def test_state_of_another_stream_is_refused(tmp_path):
    specs = _sources(tmp_path)
    state = ExampleStream(specs, seed=1).state_dict()
    with pytest.raises(ValueError, match="seed"):
        ExampleStream(specs, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="rank"):
        ExampleStream(specs, seed=1, rank=1, world_size=2).load_state_dict(state)


def test_bad_arguments(tmp_path):
    specs = _sources(tmp_path)
    with pytest.raises(ValueError, match="shuffle_buffer"):
        ExampleStream(specs, shuffle_buffer=0)
    with pytest.raises(ValueError, match="rank"):
        ExampleStream(specs, rank=2, world_size=2)
    with pytest.raises(ValueError, match="unique"):
        ExampleStream([specs[0], specs[0]])


def test_holdout_splits_the_rows_in_two_whatever_the_order(tmp_path):
    specs = _sources(tmp_path, sizes=(200, 100))
    every = set(_prompts(ExampleStream(specs, seed=0, shuffle_buffer=1, epochs=1)))
    train = _prompts(ExampleStream(specs, seed=0, shuffle_buffer=1, epochs=1, holdout=(0.2, "train")))
    held = _prompts(ExampleStream(specs, seed=0, shuffle_buffer=1, epochs=1, holdout=(0.2, "validation")))
    assert set(train) | set(held) == every and not set(train) & set(held)
    assert 30 <= len(held) <= 90   # about 20 % of 300
    # another seed and buffer hold out the same rows (the split is by row, not by place)
    again = _prompts(ExampleStream(specs, seed=5, shuffle_buffer=64, epochs=1, holdout=(0.2, "validation")))
    assert set(again) == set(held)
    with pytest.raises(ValueError, match="holdout"):
        ExampleStream(specs, holdout=(1.5, "train"))
