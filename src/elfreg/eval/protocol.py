"""Evaluation protocols (spec §5–§6): per benchmark, the sampling runs (sampler, NFE, ρ, w, samples) and the
pass@k each reports, every value with its source, and the paper figures each number is compared with.

One table, ``PROTOCOLS``, holds every protocol. A benchmark's entry is one or more runs: the paper reports
MATH-500's pass@1 at 128 NFE (Table 2) but its pass@10 and pass@16 at 64 NFE (Tables 20 and 3), so that entry
has two sampling runs. ``resolve_runs`` merges a protocol with what the user set on the command line and records
where each value came from ("user", "protocol:<name>" or "default"), so a report can say exactly how its numbers
were produced; ``paper_refs`` gives the paper figures a run's numbers compare with, like with like (same
benchmark, sampler, NFE, ρ, w and samples), or none.

Sources (``SRC``) are lines of the reading of the paper in ``shared/seeds/002_13b26a02fedc2e0a.txt`` ("seeds/002:N"),
sections of the spec (shared/spec/ELF-REG.md), or "chosen: why" where the sources are silent; docs/evaluation.md
lists them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Where each setting of the paper's protocol comes from (one home; entries below refer to these).
SRC = {
    "rho": "rho 8: spec §5, seeds/002:132",
    "w_gsm8k": "w 3: spec §5, seeds/002:128 (GSM8K)",
    "w_2": "w 2: spec §5, seeds/002:128 (code and MATH)",
    "samples": "16 samples: spec §6, seeds/002:213",
    "gsm8k": "GSM8K: early-stop, 64 NFE (spec §6, seeds/002:207)",
    "math500_128": "MATH-500: early-stop, 128 NFE for pass@1 (spec §6, seeds/002:208; Table 2, seeds/002:261)",
    "math500_64": ("MATH-500: early-stop, 64 NFE for pass@10 and pass@16 (Tables 20 and 3, seeds/002:294-296; "
                   "Table 19 has pass@1 at 64 NFE, seeds/002:265)"),
    "code": "HumanEval(+), MBPP(+): early-stop, 128 NFE (spec §6, seeds/002:209-210)",
    "mmlu": "MMLU: full-span (spec §6, seeds/002:211), 64 NFE (Table 21, seeds/002:382), B model",
    "mmlu_w": "w 2, chosen: the seeds give w for GSM8K, code and MATH only (seeds/002:128); MMLU is none of them",
    "mmlu_samples": ("16 samples, chosen: as the main tables (seeds/002:213); the seeds give no sample count "
                     "for the appendix's Table 21"),
    "mmlu_ks": ("pass@4, chosen: coverage beside pass@1; four options make chance 25 % at pass@1 and "
                "1 - 0.75^4 = 68.4 % at pass@4, so it is no skill score"),
}


@dataclass(frozen=True)
class PaperRef:
    """A paper figure an elfreg number is compared with, and where it is printed (table and seed line).

    ``tests``/``alias`` say which code column it belongs to: tests "base" or "plus" (HumanEval+ is the plus tests,
    MBPP-500/378 use base tests, seeds/002:210); alias "paper" (EvalPlus sanitizer + the paper's alias rule: Table 1)
    or "off" (sanitizer only: Table 15). ``values`` are (model, percent) pairs."""

    metric: str
    table: str
    source: str
    values: tuple[tuple[str, float], ...]
    tests: str | None = None
    alias: str | None = None
    note: str = ""

    def describe(self) -> str:
        """``Table 2 (seeds/002:261): ELF-L 10.55, ELF-REG-L 13.39``."""
        vals = ", ".join(f"{m} {v:.2f}" for m, v in self.values) or "no figure quoted"
        return f"{self.table} ({self.source}): {vals}" + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True)
class ProtocolRun:
    """One sampling run of a protocol entry: its settings, the pass@k it reports, and their sources."""

    sampler: str
    nfe: int
    rho: int
    w: float
    samples: int
    ks: tuple[int, ...]
    sources: tuple[str, ...]  # each setting's source: a spec section, a seed line, or "chosen: why"
    refs: tuple[PaperRef, ...] = ()
    label: str = ""  # folder of the run when an entry has several ("nfe-64"); "" = the run folder itself

    def __post_init__(self) -> None:
        # The sampler name is checked by SamplerConfig when the settings are used (tests build one per run);
        # importing it here would pull torch into every `eval score`.
        if self.nfe < 2 or self.rho < 1 or self.samples < 1 or not self.w > 0:
            raise ValueError(f"protocol run: need nfe >= 2, rho >= 1, samples >= 1, w > 0; got {self}")
        validate_ks(self.ks, self.samples, "ks")
        if not self.sources:
            raise ValueError(f"protocol run: every setting needs a source; got {self}")

    @property
    def source(self) -> str:
        return "; ".join(self.sources)

    def settings(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "nfe": self.nfe, "rho": self.rho, "w": self.w, "samples": self.samples}


@dataclass(frozen=True)
class ProtocolEntry:
    """A benchmark's settings under one protocol: one or more sampling runs."""

    runs: tuple[ProtocolRun, ...]

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("protocol entry: needs at least one run")
        if len(self.runs) > 1 and len({r.label for r in self.runs}) != len(self.runs) or \
                any(not r.label for r in self.runs[1:]):
            raise ValueError("protocol entry: several runs need distinct labels (their folders)")

    @property
    def ks(self) -> tuple[int, ...]:
        """Every k the entry reports, over its runs."""
        return tuple(sorted({k for r in self.runs for k in r.ks}))


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


def _code_refs(col: str, tests: str) -> tuple[PaperRef, ...]:
    """The paper's code figures for one column of Tables 1, 15 and 18 (ELF-L / ELF-REG-L, 128 NFE)."""
    t1 = {"mbpp": (17.19, 19.10), "mbpp_plus": (26.75, 28.92), "humaneval": (19.66, 22.56),
          "humaneval_plus": (18.75, 21.46)}[col]
    t15 = {"mbpp": 15.95, "mbpp_plus": 24.21, "humaneval": 22.26, "humaneval_plus": 21.15}[col]
    t18 = {"mbpp": (40.50, 39.92), "mbpp_plus": (52.90, 55.05), "humaneval": (45.93, 48.87),
           "humaneval_plus": (42.84, 46.69)}[col]
    return (PaperRef("pass@1", "Table 1", "seeds/002:269-274", (("ELF-L", t1[0]), ("ELF-REG-L", t1[1])),
                     tests, "paper"),
            PaperRef("pass@1", "Table 15", "seeds/002:280-283", (("ELF-REG-L", t15),), tests, "off",
                     "the same generations rescored without the alias rule"),
            PaperRef("pass@10", "Table 18", "seeds/002:289-293", (("ELF-L", t18[0]), ("ELF-REG-L", t18[1])),
                     tests, "paper"),
            PaperRef("pass@16", "Table 18", "seeds/002:296", (), tests, "paper",
                     "reported by the paper; the seeds quote no value (MBPP-500: ELF-REG-L below ELF-L)"))


def _code_run(col: str, tests: str) -> ProtocolRun:
    return ProtocolRun("early-stop", 128, 8, 2.0, 16, (1, 10, 16),
                       (SRC["code"], SRC["rho"], SRC["w_2"], SRC["samples"],
                        "pass@1: Table 1 (seeds/002:269-274); pass@10: Table 18 (seeds/002:289-293); "
                        "pass@16: seeds/002:296"),
                       _code_refs(col, tests))


PROTOCOLS: dict[str, dict[str, ProtocolEntry]] = {
    "paper": {
        "gsm8k": ProtocolEntry((ProtocolRun(
            "early-stop", 64, 8, 3.0, 16, (1, 4),
            (SRC["gsm8k"], SRC["rho"], SRC["w_gsm8k"], SRC["samples"],
             "pass@1: Table 2 (seeds/002:259-260); pass@4: Table 24 (seeds/002:343)"),
            (PaperRef("pass@1", "Table 2", "seeds/002:259-260",
                      (("ELF-B", 37.71), ("ELF-REG-B", 38.11), ("ELF-L", 51.85), ("ELF-REG-L", 55.96))),
             PaperRef("pass@4", "Table 24", "seeds/002:343", (("ELF-REG-L", 72.48),),
                      note="default sampler, in the re-noising section (whose runs use 4 generation seeds, "
                           "seeds/002:335)"))),)),
        "math500": ProtocolEntry((
            ProtocolRun("early-stop", 128, 8, 2.0, 16, (1,),
                        (SRC["math500_128"], SRC["rho"], SRC["w_2"], SRC["samples"]),
                        (PaperRef("pass@1", "Table 2", "seeds/002:261", (("ELF-L", 10.55), ("ELF-REG-L", 13.39))),),
                        label="nfe-128"),
            ProtocolRun("early-stop", 64, 8, 2.0, 16, (1, 10, 16),
                        (SRC["math500_64"], SRC["rho"], SRC["w_2"], SRC["samples"]),
                        (PaperRef("pass@1", "Table 19", "seeds/002:265", (("ELF-REG-L", 13.31),)),
                         PaperRef("pass@10", "Tables 18, 20", "seeds/002:289-294",
                                  (("ELF-L", 36.73), ("ELF-REG-L", 44.04))),
                         PaperRef("pass@16", "Table 3", "seeds/002:296", (("ELF-L", 44.00), ("ELF-REG-L", 52.20)))),
                        label="nfe-64"))),
        "humaneval": ProtocolEntry((_code_run("humaneval", "base"),)),
        "humaneval_plus": ProtocolEntry((_code_run("humaneval_plus", "plus"),)),
        "mbpp": ProtocolEntry((_code_run("mbpp", "base"),)),
        "mbpp_plus": ProtocolEntry((_code_run("mbpp_plus", "base"),)),
        "mmlu": ProtocolEntry((ProtocolRun(
            "full-span", 64, 8, 2.0, 16, (1, 4),
            (SRC["mmlu"], "rho: no effect on full-span (8 recorded)", SRC["mmlu_w"], SRC["mmlu_samples"],
             "pass@1: Table 21 (seeds/002:382)", SRC["mmlu_ks"]),
            (PaperRef("pass@1", "Table 21", "seeds/002:382", (("ELF-B", 45.34), ("ELF-REG-B", 46.71))),)),)),
    },
}


def builtin_defaults() -> dict[str, Any]:
    """What `eval run` uses when neither the user nor a protocol sets a value: SamplerConfig's defaults, 1 sample."""
    from elfreg.sampling.config import SamplerConfig  # imported here: it pulls torch, which `eval score` never needs

    return {"sampler": SamplerConfig.sampler, "nfe": SamplerConfig.nfe, "rho": SamplerConfig.rho, "samples": 1}


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
    """The paper's ks for ``benchmark`` over all its runs (pass@1 for benchmarks outside the paper), split into
    those that fit ``samples`` and those dropped because k > samples."""
    entry = PROTOCOLS["paper"].get(benchmark)
    ks = entry.ks if entry else (1,)
    return tuple(k for k in ks if k <= samples), tuple(k for k in ks if k > samples)


@dataclass(frozen=True)
class ResolvedSettings:
    """One sampling run's settings after merging user flags, a protocol and the built-in defaults."""

    protocol: str
    values: dict[str, Any]        # sampler, nfe, rho, w, task, samples, ks
    origin: dict[str, str]        # key -> "user" | "protocol:<name>" | "default" | "default (benchmark kind)"
    ks_dropped: tuple[int, ...]   # default ks left out because k > samples (never user-given ones)
    source: str | None            # the protocol run's sources
    label: str = ""               # the run's folder when a protocol entry has several runs
    protocol_runs: tuple[ProtocolRun, ...] = field(default=(), repr=False)  # the protocol runs merged into this one

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready record for summary.json (with the paper figures these numbers compare with)."""
        d = {k: v for k, v in asdict(self).items() if k != "protocol_runs"}
        d["values"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.values.items()}
        d["ks_dropped"] = list(self.ks_dropped)
        d["paper_refs"] = [dict(asdict(r), values=[list(v) for v in r.values]) for r in paper_refs(self)]
        return d


def _resolve_run(protocol: str, run: ProtocolRun | None, user: dict[str, Any], benchmark: str,
                 model_defaults: dict[str, Any] | None = None) -> ResolvedSettings:
    tag = f"protocol:{protocol}"
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    defaults = builtin_defaults() if run is None else {}
    own = {k: v for k, v in (model_defaults or {}).items() if k in ("sampler", "nfe")}
    for key in ("sampler", "nfe", "rho", "samples"):
        if user.get(key) is not None:
            values[key], origin[key] = user[key], "user"
        elif run is not None:
            values[key], origin[key] = getattr(run, key), tag
        elif key in own:
            values[key], origin[key] = own[key], "model"
        else:
            values[key], origin[key] = defaults[key], "default"
    # w: an explicit --w or --task preset wins, then the protocol, then the benchmark kind's preset.
    values["w"], values["task"] = user.get("w"), user.get("task")
    if user.get("w") is not None or user.get("task") is not None:
        origin["w"] = "user"
    elif run is not None:
        values["w"], origin["w"] = run.w, tag
    else:
        origin["w"] = "default (benchmark kind)"
    dropped: tuple[int, ...] = ()
    if user.get("ks") is not None:
        validate_ks(user["ks"], values["samples"])
        values["ks"], origin["ks"] = tuple(user["ks"]), "user"
    elif run is not None:
        values["ks"] = tuple(k for k in run.ks if k <= values["samples"])
        dropped = tuple(k for k in run.ks if k > values["samples"])
        origin["ks"] = tag
    else:
        values["ks"], dropped = default_ks(benchmark, values["samples"])
        origin["ks"] = "default (the paper's ks)"
    return ResolvedSettings(protocol, values, origin, dropped, run.source if run else None,
                            run.label if run else "", (run,) if run else ())


def resolve_runs(protocol: str, benchmark: str, user: dict[str, Any],
                 model_defaults: dict[str, Any] | None = None) -> list[ResolvedSettings]:
    """The sampling runs of ``benchmark`` under ``protocol``, each merged with the ``user`` flags (None = not given).

    ``user`` keys: sampler, nfe, rho, samples, w, task (a w preset name), ks. A flag applies to every run; runs that
    the flags make identical are merged into one (their ks joined). When nothing sets w, origin["w"] is
    "default (benchmark kind)" and values["w"] and values["task"] are None: the caller fills in the kind's preset.
    Raises ValueError before any work on an unknown protocol, a benchmark the protocol does not cover, a bad
    --samples, or a user-given k larger than the samples. ``model_defaults``: the model's own sampler and NFE (a
    distilled model's record), used in place of the built-in defaults (origin "model").
    """
    if user.get("samples") is not None and user["samples"] < 1:
        raise ValueError(f"--samples: need >= 1, got {user['samples']}")
    entry = protocol_entry(protocol, benchmark)
    runs = [_resolve_run(protocol, r, user, benchmark, model_defaults) for r in (entry.runs if entry else (None,))]
    merged: list[ResolvedSettings] = []
    for r in runs:
        key = {k: r.values[k] for k in ("sampler", "nfe", "rho", "samples", "w", "task")}
        same = next((m for m in merged if {k: m.values[k] for k in key} == key), None)
        if same is None:
            merged.append(r)
            continue
        ks = tuple(sorted(set(same.values["ks"]) | set(r.values["ks"])))
        merged[merged.index(same)] = replace(
            same, values={**same.values, "ks": ks}, ks_dropped=tuple(sorted(set(same.ks_dropped) | set(r.ks_dropped))),
            source=f"{same.source}; {r.source}", protocol_runs=same.protocol_runs + r.protocol_runs)
    if len(merged) == 1:
        merged[0] = replace(merged[0], label="")
    return merged


def resolve_settings(protocol: str, benchmark: str, user: dict[str, Any]) -> ResolvedSettings:
    """The single run of ``benchmark`` under ``protocol`` merged with ``user`` (see :func:`resolve_runs`);
    ValueError when the protocol samples it in several runs (MATH-500 under "paper": use resolve_runs)."""
    runs = resolve_runs(protocol, benchmark, user)
    if len(runs) != 1:
        raise ValueError(f"--protocol {protocol}: {benchmark} is sampled in {len(runs)} runs "
                         f"({', '.join(r.label for r in runs)}); use resolve_runs")
    return runs[0]


def paper_refs(resolved: ResolvedSettings) -> list[PaperRef]:
    """The paper figures a resolved run's numbers compare with, like with like: those of each protocol run whose
    sampler, NFE, ρ, w and samples all equal this run's, for the pass@k it reports ([] when none matches)."""
    v = resolved.values
    ks = {f"pass@{k}" for k in v["ks"]}
    return [ref for run in resolved.protocol_runs
            if all(v.get(k) == x for k, x in run.settings().items()) for ref in run.refs if ref.metric in ks]
