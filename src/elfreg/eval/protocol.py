"""Evaluation protocols (spec §5–§6): per benchmark, the sampler, NFE, ρ, w, samples and reported pass@k.

One table, ``PROTOCOLS``, holds every protocol; ``resolve_settings`` merges a protocol with what the user set
on the command line and records where each value came from ("user", "protocol:<name>" or "default"), so a
report can say exactly how its numbers were produced.

The paper's table (``"paper"``) follows spec §5–§6 and the paper's appendix as summarised in the seeds
(shared/seeds/002, §3.2–§4.2). Where the sources are silent the choice is marked ``chosen`` in the entry's
``source`` and explained in docs/evaluation.md:

- GSM8K: 64 NFE early-stop, ρ = 8, w = 3, 16 samples; pass@1 (Table 2) and pass@4 (Table 24).
- MATH-500: 128 NFE early-stop, w = 2, 16 samples; pass@1 (Table 2), pass@10 (Table 20), pass@16 (Table 3);
  pass@4 is added (chosen: spec §6 "pass@4 elsewhere").
- HumanEval(+), MBPP(+): 128 NFE early-stop, w = 2, 16 samples; pass@1 (Table 1), pass@10 (Tables 17–18),
  pass@16 (the MBPP-500 coverage remark next to Table 18).
- MMLU: full-span 64 NFE (Table 21), 16 samples (spec §6 "16 samples everywhere"); w = 2 (chosen: the seeds
  give no MMLU value; 2 is the paper's value for every task but GSM8K); pass@1 (Table 21) and pass@4 (chosen:
  spec §6 "pass@4 elsewhere"). ρ does not act on full-span; 8 is recorded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


def builtin_defaults() -> dict[str, Any]:
    """What `eval run` uses when neither the user nor a protocol sets a value: SamplerConfig's defaults, 1 sample."""
    from elfreg.sampling.config import SamplerConfig  # imported here: it pulls torch, which `eval score` never needs

    return {"sampler": SamplerConfig.sampler, "nfe": SamplerConfig.nfe, "rho": SamplerConfig.rho, "samples": 1}


def validate_ks(ks, samples: int | None, field: str = "--k") -> None:
    """Every k an integer >= 1 and, when ``samples`` is known, k <= samples (pass@k needs n >= k)."""
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"{field}: every k must be an integer >= 1, got {k!r}")
    if samples is not None:
        big = sorted(k for k in ks if k > samples)
        if big:
            raise ValueError(f"{field}: pass@{big[0]} needs at least {big[0]} samples per problem, "
                             f"but there are {samples}; raise --samples or drop k = {', '.join(map(str, big))}")


@dataclass(frozen=True)
class ProtocolEntry:
    """The settings of one benchmark under one protocol; ``ks`` are the reported pass@k."""

    sampler: str
    nfe: int
    rho: int
    w: float
    samples: int
    ks: tuple[int, ...]
    source: str   # where the values come from (paper table / spec section), or "chosen: why"

    def __post_init__(self) -> None:
        # The sampler name is checked by SamplerConfig when the settings are used (tests build one per entry);
        # importing it here would pull torch into every `eval score`.
        if self.nfe < 2 or self.rho < 1 or self.samples < 1 or not self.w > 0:
            raise ValueError(f"protocol entry: need nfe >= 2, rho >= 1, samples >= 1, w > 0; got {self}")
        validate_ks(self.ks, self.samples, "ks")


_CODE = ProtocolEntry("early-stop", 128, 8, 2.0, 16, (1, 10, 16),
                      "spec §5-§6; seeds Tables 1, 17, 18 (pass@10, pass@16)")

PROTOCOLS: dict[str, dict[str, ProtocolEntry]] = {
    "paper": {
        "gsm8k": ProtocolEntry("early-stop", 64, 8, 3.0, 16, (1, 4), "spec §5-§6; seeds Tables 2, 24 (pass@4)"),
        "math500": ProtocolEntry("early-stop", 128, 8, 2.0, 16, (1, 4, 10, 16),
                                 "spec §5-§6; seeds Tables 2, 3 (pass@16), 20 (pass@10); pass@4 chosen (spec §6)"),
        "humaneval": _CODE,
        "humaneval_plus": _CODE,
        "mbpp": _CODE,
        "mbpp_plus": _CODE,
        "mmlu": ProtocolEntry("full-span", 64, 8, 2.0, 16, (1, 4),
                              "seeds Table 21 (full-span 64 NFE); w = 2 and pass@4 chosen (no MMLU value given)"),
    },
}


def protocol_names() -> list[str]:
    """Names accepted by ``--protocol`` ("none" = no protocol: built-in defaults)."""
    return ["none", *PROTOCOLS]


def protocol_entry(protocol: str, benchmark: str) -> ProtocolEntry | None:
    """The entry of ``benchmark`` under ``protocol`` (None for "none"); ValueError naming what is unknown."""
    if protocol == "none":
        return None
    if protocol not in PROTOCOLS:
        raise ValueError(f"--protocol: unknown protocol {protocol!r}; choose one of {', '.join(protocol_names())}")
    table = PROTOCOLS[protocol]
    if benchmark not in table:
        raise ValueError(f"--protocol {protocol}: no settings for benchmark {benchmark!r} "
                         f"(covered: {', '.join(table)}); use --protocol none and set the sampler flags")
    return table[benchmark]


def parse_ks(text: str) -> tuple[int, ...]:
    """``"1,4,10"`` -> ``(1, 4, 10)`` (sorted, unique); ValueError naming ``--k`` on anything else."""
    parts = [s.strip() for s in text.split(",") if s.strip()]
    if not parts:
        raise ValueError(f"--k: need a comma-separated list of integers >= 1, got {text!r}")
    try:
        ks = [int(s) for s in parts]
    except ValueError:
        raise ValueError(f"--k: need a comma-separated list of integers >= 1, got {text!r}") from None
    validate_ks(ks, None, "--k")
    return tuple(sorted(set(ks)))


def default_ks(benchmark: str, samples: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The paper's ks for ``benchmark`` (pass@1 for benchmarks outside the paper) split into those that fit
    ``samples`` and those dropped because k > samples."""
    entry = PROTOCOLS["paper"].get(benchmark)
    ks = entry.ks if entry else (1,)
    return tuple(k for k in ks if k <= samples), tuple(k for k in ks if k > samples)


@dataclass(frozen=True)
class ResolvedSettings:
    """Evaluation settings after merging user flags, a protocol and the built-in defaults."""

    protocol: str
    values: dict[str, Any]        # sampler, nfe, rho, w, task, samples, ks
    origin: dict[str, str]        # key -> "user" | "protocol:<name>" | "default" | "default (benchmark kind)"
    ks_dropped: tuple[int, ...]   # default ks left out because k > samples (never user-given ones)
    source: str | None            # the protocol entry's source note

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready record for summary.json."""
        d = asdict(self)
        d["values"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.values.items()}
        d["ks_dropped"] = list(self.ks_dropped)
        return d


def resolve_settings(protocol: str, benchmark: str, user: dict[str, Any]) -> ResolvedSettings:
    """Merge ``user`` flags (None = not given) with ``protocol``'s entry for ``benchmark`` and the defaults.

    ``user`` keys: sampler, nfe, rho, samples, w, task (a w preset name), ks. When nothing sets w, origin["w"]
    is "default (benchmark kind)" and values["w"] and values["task"] are None: the caller fills in the kind's
    preset. Raises ValueError before any work on an unknown protocol, a benchmark the protocol does not cover,
    or a user-given k larger than the samples.
    """
    entry = protocol_entry(protocol, benchmark)
    tag = f"protocol:{protocol}"
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    defaults = builtin_defaults() if entry is None else {}
    for key in ("sampler", "nfe", "rho", "samples"):
        if user.get(key) is not None:
            values[key], origin[key] = user[key], "user"
        elif entry is not None:
            values[key], origin[key] = getattr(entry, key), tag
        else:
            values[key], origin[key] = defaults[key], "default"
    if user.get("samples") is not None and user["samples"] < 1:
        raise ValueError(f"--samples: need >= 1, got {user['samples']}")
    # w: an explicit --w or --task preset wins, then the protocol, then the benchmark kind's preset.
    values["w"], values["task"] = user.get("w"), user.get("task")
    if user.get("w") is not None or user.get("task") is not None:
        origin["w"] = "user"
    elif entry is not None:
        values["w"], origin["w"] = entry.w, tag
    else:
        origin["w"] = "default (benchmark kind)"
    dropped: tuple[int, ...] = ()
    if user.get("ks") is not None:
        validate_ks(user["ks"], values["samples"])
        values["ks"], origin["ks"] = tuple(user["ks"]), "user"
    elif entry is not None:
        values["ks"] = tuple(k for k in entry.ks if k <= values["samples"])
        dropped = tuple(k for k in entry.ks if k > values["samples"])
        origin["ks"] = tag
    else:
        values["ks"], dropped = default_ks(benchmark, values["samples"])
        origin["ks"] = "default (the paper's ks)"
    return ResolvedSettings(protocol, values, origin, dropped, entry.source if entry else None)
