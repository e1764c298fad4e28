"""Typed settings of a diagnostics run (spec §9), validated on construction."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from elfreg.bounds import SEED, Range
from elfreg.sampling.config import BATCH, NFE, SamplerConfig
from elfreg.sampling.exit import DEFAULT_EXIT, ExitRule

STATE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Points of a path (the full-span sampler's N, bounded alike); the read-outs are NFE values on it
STEPS = Range(3, NFE.hi, integer=True, why="points of the master path")
READOUT = Range(2, NFE.hi, integer=True)
ACCEL_STEPS = Range(0, NFE.hi, integer=True, why="0 skips the acceleration path")
KEEP_TEXTS = Range(0, 100_000, integer=True, why="samples whose text is kept at every read-out; 0: none")


def _int_list(name: str, values) -> tuple[int, ...]:
    out = tuple(values)
    if not out or any(isinstance(v, bool) or not isinstance(v, int) for v in out):
        raise ValueError(f"{name}: need a non-empty list of integers, got {values!r}")
    return out


@dataclass(frozen=True)
class DiagnoseConfig:
    """One diagnostics run: the master path, its read-outs, seeds and the acceleration path.

    readouts are NFE values N: N < steps reads the clean prediction d_{N-2} (what prefix early-stop
    decodes with N NFE); N = steps is the end point y_{M-1} (what full-span decodes with M NFE), which
    is always added as the reference.
    """

    steps: int = 512                                  # M: points of the master path (M - 1 updates)
    readouts: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256, 512)
    seeds: tuple[int, ...] = (0,)
    early_nfe: int = 64                               # the early-stop NFE of the closing table
    w: float = 3.0
    sigma: float = 2.0
    t_eps: float = 0.05
    p_mean: float = -1.5
    p_std: float = 0.8
    drop_reg: bool = False
    accel_steps: int = 512                            # points of the uniform acceleration path; 0 = skip
    state_dtype: str = "float32"                      # storage of d_j at read-outs until the end is known
    batch_size: int = 8
    task: str = "gsm8k"
    extra: dict = field(default_factory=dict)         # free-form provenance (model paths, labels)
    # where the adaptive exit rule (elfreg.sampling.exit) would fire on each path; 0 = not measured
    exit_check_every: int = 0
    exit_patience: int = DEFAULT_EXIT["patience"]
    exit_min_nfe: int = DEFAULT_EXIT["min_nfe"]
    exit_max_nfe: int = 0                             # 0: early_nfe; the rule is the adaptive sampler with this
                                                      # nfe and rho = steps / exit_max_nfe (the same path)
    keep_texts: int = 4                               # the first samples (seed-major) keep their decoded texts

    def __post_init__(self) -> None:
        STEPS.check(self.steps, "steps")
        readouts = _int_list("readouts", self.readouts)
        bad = [n for n in readouts if not 2 <= n <= self.steps]
        if bad:
            raise ValueError(f"readouts: NFE values must lie in [2, steps = {self.steps}], got {bad}")
        object.__setattr__(self, "readouts", tuple(sorted(set(readouts) | {self.steps})))
        seeds = _int_list("seeds", self.seeds)
        for s in seeds:
            SEED.check(s, "seeds")
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds: need distinct integers >= 0, got {list(seeds)}")
        object.__setattr__(self, "seeds", seeds)
        if self.early_nfe not in self.readouts:
            raise ValueError(f"early_nfe: {self.early_nfe} is not one of the readouts {list(self.readouts)}")
        if isinstance(self.exit_check_every, bool) or not isinstance(self.exit_check_every, int) \
                or self.exit_check_every < 0:
            raise ValueError(f"exit_check_every: need an integer >= 0 (0: no exit rule), got {self.exit_check_every!r}")
        if self.exit_check_every:
            top = self.exit_max_nfe or self.early_nfe
            if isinstance(top, bool) or not isinstance(top, int) or top < 2 or self.steps % top:
                raise ValueError(f"exit_max_nfe: need an integer that divides steps = {self.steps} (the adaptive "
                                 f"sampler's master grid has rho * max_nfe points, here rho = steps / max_nfe), "
                                 f"got {top!r}")
            object.__setattr__(self, "exit_max_nfe", top)
            self.exit_rule()   # validates, errors naming exit_check_every / exit_patience / exit_min_nfe
            # fixed early-stop at the rule's max_nfe is read out too: both are compared on the same path
            object.__setattr__(self, "readouts", tuple(sorted(set(self.readouts) | {top})))
        ACCEL_STEPS.check(self.accel_steps, "accel_steps")
        if self.accel_steps != 0 and self.accel_steps < 3:
            raise ValueError(f"accel_steps: need 0 (skip) or >= 3, got {self.accel_steps!r}")
        if self.state_dtype not in STATE_DTYPES:
            raise ValueError(f"state_dtype: choose one of {', '.join(STATE_DTYPES)}, got {self.state_dtype!r}")
        BATCH.check(self.batch_size, "batch_size")
        KEEP_TEXTS.check(self.keep_texts, "keep_texts")
        self.sampler_config(0)   # validates w, sigma, t_eps, p_std

    def exit_rule(self) -> ExitRule | None:
        """The adaptive exit rule to follow along each path (max_nfe = exit_max_nfe), None when off."""
        if not self.exit_check_every:
            return None
        return ExitRule.checked(self.exit_check_every, self.exit_patience, self.exit_min_nfe, self.exit_max_nfe,
                                prefix="exit_")

    @property
    def readout_steps(self) -> list[int]:
        """Step j = N - 2 of each read-out except the end (N = steps)."""
        return [n - 2 for n in self.readouts if n < self.steps]

    def sampler_config(self, seed: int, grid: str = "logit-normal", points: int | None = None) -> SamplerConfig:
        """The full-span SamplerConfig whose path is the master (or acceleration) path for one seed."""
        return SamplerConfig(sampler="full-span", nfe=points or self.steps, grid=grid, w=self.w, sigma=self.sigma,
                             t_eps=self.t_eps, p_mean=self.p_mean, p_std=self.p_std, drop_reg=self.drop_reg,
                             seed=seed)

    def to_dict(self) -> dict:
        """Plain dict of every setting."""
        d = asdict(self)
        d["readouts"], d["seeds"] = list(self.readouts), list(self.seeds)
        return d
