"""Evaluation protocols (spec §5–§6): the paper's table, merging with user flags, the k list."""

import re
from pathlib import Path

import pytest

from helpers import shared_dir

from elfreg.eval.protocol import (PROTOCOLS, default_ks, paper_refs, parse_ks, protocol_entry, resolve_runs,
                                  resolve_settings)
from elfreg.sampling.config import SamplerConfig

NONE = {"sampler": None, "nfe": None, "rho": None, "samples": None, "w": None, "task": None, "ks": None}


RUNS = {  # benchmark -> its sampling runs under "paper": (sampler, NFE, w, reported ks)
    "gsm8k": [("early-stop", 64, 3.0, (1, 4))],
    # MATH-500: pass@1 at 128 NFE (Table 2); pass@10 (Table 20) and pass@16 (Table 3) at 64 NFE (seeds/002:294-296)
    "math500": [("early-stop", 128, 2.0, (1,)), ("early-stop", 64, 2.0, (1, 10, 16))],
    "humaneval": [("early-stop", 128, 2.0, (1, 10, 16))],
    "humaneval_plus": [("early-stop", 128, 2.0, (1, 10, 16))],
    "mbpp": [("early-stop", 128, 2.0, (1, 10, 16))],
    "mbpp_plus": [("early-stop", 128, 2.0, (1, 10, 16))],
    "mmlu": [("full-span", 64, 2.0, (1, 4))],
}


@pytest.mark.parametrize("bench", list(RUNS))
def test_paper_protocol_matches_the_spec(bench):
    e = protocol_entry("paper", bench)
    assert [(r.sampler, r.nfe, r.w, r.ks) for r in e.runs] == RUNS[bench]
    for r in e.runs:
        assert (r.rho, r.samples) == (8, 16)
        SamplerConfig(sampler=r.sampler, nfe=r.nfe, rho=r.rho, w=r.w)  # a usable sampler setting


def test_math500_protocol_has_each_k_at_the_papers_nfe():
    """pass@1 at 128 NFE (Table 2), pass@10 and pass@16 at 64 NFE (Tables 20, 3): two runs, two folders."""
    runs = resolve_runs("paper", "math500", NONE)
    nfe_of = {}
    for r in runs:
        for ref in paper_refs(r):
            nfe_of.setdefault(ref.metric, set()).add((r.values["nfe"], ref.table))
    assert nfe_of == {"pass@1": {(128, "Table 2"), (64, "Table 19")}, "pass@10": {(64, "Tables 18, 20")},
                      "pass@16": {(64, "Table 3")}}
    assert [r.label for r in runs] == ["nfe-128", "nfe-64"]
    assert dict(paper_refs(runs[1])[2].values) == {"ELF-L": 44.00, "ELF-REG-L": 52.20}
    # one --nfe for both runs makes them one run (ks joined), compared only with the paper's 64-NFE figures
    (one,) = resolve_runs("paper", "math500", NONE | {"nfe": 64})
    assert one.values["ks"] == (1, 10, 16) and one.label == ""
    assert {r.table for r in paper_refs(one)} == {"Table 19", "Tables 18, 20", "Table 3"}
    with pytest.raises(ValueError, match="2 runs .*nfe-128, nfe-64.*resolve_runs"):
        resolve_settings("paper", "math500", NONE)


def test_every_source_is_a_seed_line_a_spec_section_or_a_choice():
    shared = shared_dir()  # the seed file, where present, checks every quoted figure against the cited lines
    seeds = shared / "seeds" / "002_13b26a02fedc2e0a.txt" if shared else Path("/nonexistent")
    for table in PROTOCOLS.values():
        for entry in table.values():
            for run in entry.runs:
                for src in run.sources:
                    assert re.search(r"seeds/002:\d+|spec §\d|chosen:|no effect", src), src
                for ref in run.refs:
                    assert re.fullmatch(r"seeds/002:\d+(-\d+)?", ref.source) and ref.table.startswith("Table")
                    if seeds.is_file():  # every quoted figure is on the cited lines of the seed file
                        lines = seeds.read_text(encoding="utf-8").splitlines()
                        lo, _, hi = ref.source.split(":")[1].partition("-")
                        text = "\n".join(lines[int(lo) - 1:int(hi or lo)])
                        for _, value in ref.values:
                            assert f"{value:.2f}" in text, (ref, value)
    assert "pass@4 elsewhere" not in " ".join(r.source for t in PROTOCOLS.values() for e in t.values()
                                               for r in e.runs)


def test_paper_figures_are_shown_only_like_with_like():
    r = resolve_settings("paper", "humaneval", NONE)
    refs = paper_refs(r)
    assert {(x.metric, x.table, x.alias) for x in refs} == {("pass@1", "Table 1", "paper"),
                                                            ("pass@1", "Table 15", "off"),
                                                            ("pass@10", "Table 18", "paper"),
                                                            ("pass@16", "Table 18", "paper")}
    assert paper_refs(resolve_settings("paper", "humaneval", NONE | {"nfe": 16})) == []  # another budget
    assert paper_refs(resolve_settings("paper", "humaneval", NONE | {"samples": 4})) == []  # other samples
    assert paper_refs(resolve_settings("paper", "humaneval", NONE | {"nfe": 128})) == refs  # the same, said again
    assert [x.table for x in paper_refs(resolve_settings("paper", "mmlu", NONE))] == ["Table 21"]
    mbpp_plus = {x.tests for x in paper_refs(resolve_settings("paper", "mbpp_plus", NONE))}
    assert mbpp_plus == {"base"}  # MBPP-378 is scored on base tests (seeds/002:210); HumanEval+ on plus
    assert {x.tests for x in paper_refs(resolve_settings("paper", "humaneval_plus", NONE))} == {"plus"}


def test_every_protocol_entry_is_a_valid_sampler_setting():
    for table in PROTOCOLS.values():
        for e in table.values():
            for r in e.runs:
                SamplerConfig(sampler=r.sampler, nfe=r.nfe, rho=r.rho, w=r.w)
                assert max(r.ks) <= r.samples and r.source


def test_protocol_values_are_recorded_with_their_origin_and_user_flags_win():
    r = resolve_settings("paper", "humaneval", NONE | {"nfe": 16, "ks": (1, 10)})
    assert r.values == {"sampler": "early-stop", "nfe": 16, "rho": 8, "samples": 16, "w": 2.0, "task": None,
                        "ks": (1, 10)}
    assert r.origin == {"sampler": "protocol:paper", "nfe": "user", "rho": "protocol:paper",
                        "samples": "protocol:paper", "w": "protocol:paper", "ks": "user"}
    r = resolve_settings("paper", "gsm8k", NONE | {"task": "math"})
    assert r.origin["w"] == "user" and r.values["task"] == "math" and r.values["w"] is None
    assert resolve_settings("paper", "gsm8k", NONE | {"w": 1.5}).values["w"] == 1.5
    d = r.as_dict()
    assert d["values"]["ks"] == [1, 4] and d["protocol"] == "paper" and "Table" in d["source"]
    assert d["paper_refs"] == []  # w set by the user (a task preset): not the paper's run
    d = resolve_settings("paper", "gsm8k", NONE).as_dict()
    assert [x["table"] for x in d["paper_refs"]] == ["Table 2", "Table 24"]


def test_no_protocol_uses_the_builtin_defaults_and_the_papers_ks_that_fit():
    r = resolve_settings("none", "humaneval", NONE)
    assert (r.values["sampler"], r.values["nfe"], r.values["rho"], r.values["samples"]) == (
        SamplerConfig.sampler, SamplerConfig.nfe, SamplerConfig.rho, 1)
    assert set(r.origin.values()) <= {"default", "default (benchmark kind)", "default (the paper's ks)"}
    assert r.values["ks"] == (1,) and r.ks_dropped == (10, 16)
    r = resolve_settings("none", "humaneval", NONE | {"samples": 12})
    assert r.values["ks"] == (1, 10) and r.ks_dropped == (16,)
    assert default_ks("demo-arith", 16) == ((1,), ())


def test_protocol_ks_beyond_user_samples_are_dropped_and_recorded():
    r = resolve_settings("paper", "mbpp", NONE | {"samples": 4})
    assert r.values["ks"] == (1,) and r.ks_dropped == (10, 16) and r.origin["samples"] == "user"


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="--protocol: unknown protocol 'papr'"):
        resolve_settings("papr", "gsm8k", NONE)
    with pytest.raises(ValueError, match="no settings for benchmark 'demo-arith'"):
        resolve_settings("paper", "demo-arith", NONE)
    with pytest.raises(ValueError, match=r"--k: pass@10 needs at least 10 samples .* there are 4"):
        resolve_settings("paper", "humaneval", NONE | {"samples": 4, "ks": (1, 10)})
    with pytest.raises(ValueError, match="pass@8 needs at least 8 samples"):
        resolve_settings("none", "gsm8k", NONE | {"ks": (8,)})  # 1 sample by default
    with pytest.raises(ValueError, match="--samples"):
        resolve_settings("paper", "gsm8k", NONE | {"samples": 0})


def test_parse_ks():
    assert parse_ks("1, 4,10") == (1, 4, 10)
    assert parse_ks("10,1,10") == (1, 10)
    for bad in ("", "0", "1,a", "2.5", "-1", ","):
        with pytest.raises(ValueError, match="--k"):
            parse_ks(bad)


def test_a_distilled_models_own_sampler_and_nfe_stand_in_for_the_builtin_defaults():
    own = {"sampler": "full-span", "grid": "uniform", "nfe": 2}
    (run,) = resolve_runs("none", "gsm8k", NONE, own)
    assert (run.values["sampler"], run.values["nfe"]) == ("full-span", 2)
    assert run.origin["sampler"] == run.origin["nfe"] == "model"
    (given,) = resolve_runs("none", "gsm8k", NONE | {"nfe": 5}, own)
    assert given.values["nfe"] == 5 and given.origin["nfe"] == "user"
    runs = resolve_runs("paper", "math500", NONE, own)            # a protocol's settings are the protocol's
    assert all(r.origin["nfe"] == "protocol:paper" for r in runs)
