"""Evaluation protocols (spec §5–§6): the paper's table, merging with user flags, the k list."""

import pytest

from elfreg.eval.protocol import PROTOCOLS, default_ks, parse_ks, protocol_entry, resolve_settings
from elfreg.sampling.config import SamplerConfig

NONE = {"sampler": None, "nfe": None, "rho": None, "samples": None, "w": None, "task": None, "ks": None}


@pytest.mark.parametrize("bench, sampler, nfe, w, ks", [
    ("gsm8k", "early-stop", 64, 3.0, (1, 4)),
    ("math500", "early-stop", 128, 2.0, (1, 4, 10, 16)),
    ("humaneval", "early-stop", 128, 2.0, (1, 10, 16)),
    ("humaneval_plus", "early-stop", 128, 2.0, (1, 10, 16)),
    ("mbpp", "early-stop", 128, 2.0, (1, 10, 16)),
    ("mbpp_plus", "early-stop", 128, 2.0, (1, 10, 16)),
    ("mmlu", "full-span", 64, 2.0, (1, 4)),
])
def test_paper_protocol_matches_the_spec(bench, sampler, nfe, w, ks):
    e = protocol_entry("paper", bench)
    assert (e.sampler, e.nfe, e.rho, e.w, e.samples, e.ks) == (sampler, nfe, 8, w, 16, ks)
    SamplerConfig(sampler=e.sampler, nfe=e.nfe, rho=e.rho, w=e.w)  # a usable sampler setting


def test_every_protocol_entry_is_a_valid_sampler_setting():
    for table in PROTOCOLS.values():
        for e in table.values():
            SamplerConfig(sampler=e.sampler, nfe=e.nfe, rho=e.rho, w=e.w)
            assert max(e.ks) <= e.samples and e.source


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
