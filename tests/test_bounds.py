"""Ranges of numeric settings (elfreg.bounds): finite, inside the range, whole where counted; one line when not."""

import argparse
import math

import pytest

from elfreg.bounds import INT64_MAX, SEED, Range, check_ranges
from elfreg.configtools import ConfigError


@pytest.mark.parametrize("rng, text", [
    (Range(2, 65536, integer=True), "an integer in [2, 65536]"),
    (Range(0, 100, lo_open=True), "a number in (0, 100]"),
    (Range(0, 1, hi_open=True), "a number in [0, 1)"),
    (Range(1, 86400.0, unit="s"), "a number in [1, 86400] s"),
    (Range(1 / 16, 2.5), "a number in [0.0625, 2.5]"),
    (Range(0, None), "a number >= 0"),
    (SEED, "an integer in [0, 2^63-1]"),
])
def test_the_range_text_help_shows(rng, text):
    assert rng.text == text


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e30, -1, 0, 101, True, "3", None])
def test_out_of_range_values_are_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match=r"^sampler\.w: need a number in \(0, 100\] \(guidance\), got "):
        Range(0, 100, lo_open=True, why="guidance").check(value, "sampler.w")


@pytest.mark.parametrize("value", [1e-9, 0.5, 100, 100.0])
def test_in_range_values_pass_unchanged(value):
    assert Range(0, 100, lo_open=True).check(value, "w") is value


def test_integers_must_be_whole_and_fit_64_bits():
    rng = Range(0, None, integer=True)
    assert rng.hi == INT64_MAX and rng.check(INT64_MAX, "n") == INT64_MAX
    for bad in (INT64_MAX + 1, 2.0, 2.5, math.nan):
        with pytest.raises(ConfigError, match="^n: need an integer in"):
            rng.check(bad, "n")


def test_a_huge_value_is_cut_short_in_the_message():
    with pytest.raises(ConfigError) as info:
        SEED.check(10 ** 400, "seed")
    assert len(str(info.value)) < 120 and "(401 characters)" in str(info.value)


@pytest.mark.parametrize("text, value", [("8", 8), ("1e3", 1000), (" 16 ", 16)])
def test_an_integer_flag_reads_whole_numbers_written_as_floats(text, value):
    assert Range(1, 2 ** 16, integer=True).arg(text) == value


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e30", "1e308", "1e999", "-1", "0", "2.5", "x", ""])
def test_a_flag_type_refuses_in_one_line(text):
    parse = Range(1, 2 ** 16, integer=True).arg
    with pytest.raises(argparse.ArgumentTypeError, match=r"^need an integer in \[1, 65536\], got "):
        parse(text)


def test_a_list_flag_checks_each_item():
    parse = SEED.list_arg()
    assert parse("0,1, 2") == [0, 1, 2]
    with pytest.raises(argparse.ArgumentTypeError, match="got -1"):
        parse("0,-1")
    assert parse.range is SEED and parse.__name__ == "list"


def test_check_ranges_skips_optional_fields_left_unset():
    class Settings:
        steps, epochs = None, math.inf

    with pytest.raises(ConfigError, match="^train.epochs: need a number in"):
        check_ranges(Settings(), {"steps": Range(1, None, integer=True), "epochs": Range(0, 1e6)}, "train.")
