"""Typed sampler settings (spec §5); every paper default is a field, validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from elfreg.bounds import SEED, Range, check_ranges
from elfreg.config import GUIDANCE, LOGIT_MEAN, LOGIT_STD, SIGMA
from elfreg.sampling.exit import DEFAULT_EXIT, ExitRule
from elfreg.tasks.answers import extractor
from elfreg.tasks.registry import w_presets

SAMPLERS = ("full-span", "early-stop", "renoise", "adaptive")
GRIDS = ("logit-normal", "uniform")

# Network calls per sample: sanity bound 2^16 (128x the paper's largest path, 512 points); a master grid of rho * N
# points larger than memory allows is the memory estimate's refusal (elfreg.resources.sampler_grid_need).
NFE = Range(2, 2 ** 16, integer=True, why="N - 1 denoiser calls + 1 decoder call")
SAMPLER_RANGES = {
    "nfe": NFE, "rho": Range(1, 2 ** 16, integer=True, why="master grid of rho * N points"),
    "p": Range(0, 100, lo_open=True, why="re-noising grid power"),
    "eta": Range(0, 100, why="re-noising noise multiplier"), "w": GUIDANCE, "sigma": SIGMA,
    "t_eps": Range(0, 1, lo_open=True), "p_mean": LOGIT_MEAN, "p_std": LOGIT_STD, "seed": SEED,
}
# Samples per prompt (pass@k needs k of them; the paper's largest k is 16) and rows per network call: sanity bounds;
# what a batch needs in memory is the memory estimate's call.
SAMPLES = Range(1, 2 ** 16, integer=True)
BATCH = Range(1, 2 ** 16, integer=True)
# The adaptive exit rule's counts, as flags (ExitRule.checked relates them to the budget)
EXIT_RANGES = {"check_every": Range(1, NFE.hi, integer=True), "patience": Range(1, NFE.hi, integer=True),
               "min_nfe": Range(0, NFE.hi, integer=True)}

# Inference self-conditioning guidance scale w per task (spec §5), from the task registry (elfreg.tasks.registry):
# the same in `generate --task`, `eval run` and lm-eval.
W_PRESETS: dict[str, float] = w_presets()


@dataclass(frozen=True)
class SamplerConfig:
    """All settings of one sampling run (spec §5); recorded beside every generated sample."""

    sampler: str = "early-stop"   # full-span | early-stop | renoise | adaptive
    nfe: int = 64                 # N: total network calls = N - 1 denoiser calls + 1 decoder call (adaptive: at most)
    rho: int = 8                  # early-stop / renoise: master grid has M = rho * N points
    grid: str = "logit-normal"    # master-grid kind for full-span and early-stop
    p: float = 0.5                # renoise: power of the grid t_i = t* (i / (N - 2))^p
    eta: float = 1.2              # renoise: noise multiplier
    w: float = 3.0                # inference self-conditioning guidance scale (network input)
    sigma: float = 2.0            # noise scale of y_0 = sigma * eps
    t_eps: float = 0.05           # clamp of c_t = max(1 - t, t_eps)
    p_mean: float = -1.5          # logit-normal grid: t = sigmoid(N(p_mean, p_std))
    p_std: float = 0.8
    drop_reg: bool = False        # ablation: omit the REG token at inference (reg=None)
    seed: int = 0
    # adaptive exit rule (elfreg.sampling.exit, docs/sampling.md): nfe is its max_nfe, check decodes included
    check_every: int = DEFAULT_EXIT["check_every"]   # decode the clean prediction every this many denoiser calls
    patience: int = DEFAULT_EXIT["patience"]         # stop once the answer repeated at this many consecutive checks
    min_nfe: int = DEFAULT_EXIT["min_nfe"]           # ... and at least this many NFE are spent
    extract: str = "text"         # answer extractor the rule compares (elfreg.tasks.answers)

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler: unknown sampler {self.sampler!r}; choose one of {', '.join(SAMPLERS)}")
        if self.grid not in GRIDS:
            raise ValueError(f"grid: unknown grid {self.grid!r}; choose one of {', '.join(GRIDS)}")
        check_ranges(self, SAMPLER_RANGES)
        extractor(self.extract)
        ExitRule.checked(self.check_every, self.patience, self.min_nfe, self.nfe, max_name="nfe",
                         need_fire=self.sampler == "adaptive")

    def exit_rule(self) -> ExitRule | None:
        """The adaptive sampler's exit rule (max_nfe = nfe); None for the fixed-NFE samplers."""
        if self.sampler != "adaptive":
            return None
        return ExitRule(self.check_every, self.patience, self.min_nfe, self.nfe)

    @property
    def master_points(self) -> int:
        """Number of points M of the grid that is built (N for full-span, rho * N otherwise; adaptive: rho * max_nfe)."""
        return self.nfe if self.sampler == "full-span" else self.rho * self.nfe

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field, for result records."""
        return asdict(self)


def task_w(task: str | None) -> float:
    """The guidance scale a task name implies: its preset (spec §5), else the default w (a task with no preset)."""
    return W_PRESETS.get(task.lower(), SamplerConfig.w) if task else SamplerConfig.w


def w_for_task(task: str) -> float:
    """Paper inference guidance scale for a task name (spec §5); ValueError on an unknown task."""
    key = task.lower()
    if key not in W_PRESETS:
        raise ValueError(f"task: no w preset for {task!r}; known: {', '.join(sorted(W_PRESETS))}")
    return W_PRESETS[key]


def with_model_defaults(model_defaults: dict[str, Any], sampler: str | None = None, nfe: int | None = None,
                        grid: str | None = None) -> dict[str, Any]:
    """sampler, nfe and grid as given; each one not given from the model's own defaults (a distilled model's record,
    elfreg.distilled.sampler_defaults: full-span on the uniform grid at its steps + 1), else SamplerConfig's.
    The model's grid goes with its sampler: another sampler asked for gets SamplerConfig's grid."""
    chosen = sampler if sampler is not None else model_defaults.get("sampler", SamplerConfig.sampler)
    if grid is None:
        grid = model_defaults.get("grid") if chosen == model_defaults.get("sampler") else None
    return {"sampler": chosen, "nfe": nfe if nfe is not None else model_defaults.get("nfe", SamplerConfig.nfe),
            "grid": grid if grid is not None else SamplerConfig.grid}
