"""Ranges of numeric settings: one check for command-line flags and typed-config fields, and the text ``--help`` shows.

A value is refused unless it is a finite number inside its range, and whole where it counts something. Every
integer setting is at most ``INT64_MAX``: values are recorded in JSON, hashed into seeds and handed to torch, and no
count past that means anything. Upper bounds of sizes are sanity bounds far beyond any model of this kind; what
actually fits is the memory estimate's call (``elfreg.resources``). Light: no torch at import.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Callable

from elfreg.configtools import ConfigError, short_repr

INT64_MAX = 2 ** 63 - 1
DAY_S = 24 * 3600.0   # the longest wall-clock limit of any one step: a "limit" past a day is a hang, not a limit


def _number(value: float) -> str:
    """A bound as help reads it: 65536, 0.5, 2^63-1."""
    if value == INT64_MAX:
        return "2^63-1"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:g}"
    return str(int(value))


@dataclass(frozen=True)
class Range:
    """The numbers a setting may take: [lo, hi] (either end open when told), whole numbers when ``integer``.

    ``why`` (optional) says what the setting is, in the error; ``unit`` follows the bounds in the help text."""

    lo: float | None
    hi: float | None
    integer: bool = False
    lo_open: bool = False
    hi_open: bool = False
    unit: str = ""
    why: str = ""

    def __post_init__(self) -> None:
        if self.integer and self.hi is None:
            object.__setattr__(self, "hi", INT64_MAX)

    @property
    def text(self) -> str:
        """``an integer in [2, 65536]``, ``a number in (0, 100]``, ``a number >= 0``."""
        kind = "an integer" if self.integer else "a number"
        unit = f" {self.unit}" if self.unit else ""
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"{kind} in {left}{_number(self.lo)}, {_number(self.hi)}{right}{unit}"
        if self.lo is not None:
            return f"{kind} {'>' if self.lo_open else '>='} {_number(self.lo)}{unit}"
        if self.hi is not None:
            return f"{kind} {'<' if self.hi_open else '<='} {_number(self.hi)}{unit}"
        return f"a finite number{unit}"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not in the range (``need an integer in [2, 65536], got 1``), or None when it is."""
        bad = f"need {self.text}" + (f" ({self.why})" if self.why else "") + f", got {short_repr(value)}"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return bad
        if isinstance(value, float) and not math.isfinite(value) or self.integer and not isinstance(value, int):
            return bad
        low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        high = self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi)
        return bad if low or high else None

    def check(self, value: Any, field: str) -> Any:
        """``value`` unchanged, or ConfigError (a ValueError) ``field: need ..., got ...``."""
        problem = self.problem(value)
        if problem:
            raise ConfigError(f"{field}: {problem}")
        return value

    def parse(self, text: str) -> int | float:
        """The number ``text`` says (``1e3`` is 1000 for an integer setting), ValueError when it is none."""
        text = text.strip()
        if self.integer:
            try:
                return int(text)
            except ValueError:
                number = float(text)   # "1e3"; "inf", "nan" and 2.5 are refused by problem()
                return int(number) if math.isfinite(number) and number.is_integer() else number
        return float(text)

    @property
    def arg(self) -> Callable[[str], int | float]:
        """An argparse ``type=``: the number, or one line saying the range (argparse names the flag)."""
        def parse(text: str) -> int | float:
            try:
                value = self.parse(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"need {self.text}, got {text!r}") from None
            problem = self.problem(value)
            if problem:
                raise argparse.ArgumentTypeError(problem)
            return value

        parse.range = self   # type: ignore[attr-defined]  (read by the help text, elfreg.cli)
        parse.__name__ = "integer" if self.integer else "number"
        return parse

    def list_arg(self) -> Callable[[str], list]:
        """An argparse ``type=`` for a comma-separated list of such numbers (``0,1,2``)."""
        one = self.arg

        def parse(text: str) -> list:
            return [one(part) for part in text.split(",") if part.strip()]

        parse.range = self   # type: ignore[attr-defined]
        parse.__name__ = "list"
        return parse


def check_ranges(obj: Any, ranges: dict[str, Range], prefix: str = "") -> None:
    """Check each field of ``obj`` named in ``ranges`` (None allowed where the field is optional and is None)."""
    for name, rng in ranges.items():
        value = getattr(obj, name)
        if value is not None:
            rng.check(value, f"{prefix}{name}")


# Shared ranges: every seed, and a count with no bound of its own (of problems, rows, steps).
SEED = Range(0, INT64_MAX, integer=True)
COUNT = Range(1, None, integer=True)
