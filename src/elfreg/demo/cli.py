"""`elfreg demo`: the embedded CPU demo (the README's first command)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from elfreg.cliargs import output_dir, quiet_loaders
from elfreg.configtools import apply_overrides, from_dict, to_dict
from elfreg.fingerprint import add_restart_argument


# The default demo's time as asked (3 training seeds x 1,100 steps, nothing cut), `elfreg demo` alone (`make demo`
# adds its set-up), per CPU class, 2 cores: measured (docs/demo.md, "Time per CPU class").
TIME_PER_CPU_CLASS = ("as asked, the default run takes about {native} on 2 cores of a CPU with native bf16 "
                      "(AVX512-BF16 / AMX: Intel Sapphire Rapids and later, AMD Zen 4 and later) and about {avx2} "
                      "on 2 cores of an AVX2-only CPU (most laptops, older cloud VMs; docs/demo.md)")
MEASURED = {"native": "7.5 minutes", "avx2": "9 minutes or more"}  # docs/demo.md, "Time per CPU class"


def register(subparsers: Any) -> None:
    """Add the `demo` subcommand."""
    p = subparsers.add_parser("demo", help="train ELF and ELF-REG on a built-in task with a real frozen SmolLM2, "
                                           "evaluate every sampler, write a report (CPU; fits --budget, 10 min)",
                              description="Train ELF and ELF-REG on a built-in task with SmolLM2-135M as frozen "
                                          "encoder and teacher, evaluate every sampler, write report.md. It first "
                                          "times a few steps, prints its estimate and plan, and cuts what does not "
                                          "fit --budget; " + TIME_PER_CPU_CLASS.format(**MEASURED) + ".")
    p.add_argument("--out", default=None, type=output_dir,
                   help="output folder (report.md, plots, results.json, models; resumed when it exists; default "
                        "demo_out, with --distill demo_distill)")
    p.add_argument("--quick", action="store_true", help="a reduced run (about a minute): every stage, tiny budgets "
                                                         "(the same as --preset quick)")
    p.add_argument("--preset", default=None, help="named settings applied before the overrides: quick, or harder "
                                                  "(three dependent steps, where NFE and the samplers differ; "
                                                  "docs/demo.md); default: the defaults")
    p.add_argument("--cache-dir", default=None, type=output_dir,
                   help="feature cache (default $ELFREG_CACHE_DIR/features or ~/.cache/elfreg/features)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    p.add_argument("--budget", type=budget_minutes, default=10.0, metavar="MINUTES",
                   help="minutes the demo may take (default 10; 0: no limit). Before training it times a few steps, "
                        "prints its estimate and plan, and cuts what does not fit: training seeds first, then "
                        "sampling seeds, then steps, never below train.min_steps (the fewest this task learns in); "
                        "the report says what was cut and what that does to its claims")
    p.add_argument("--budget-since", type=budget_since, default=None, metavar="UNIX_TIME",
                   help="count --budget from this time (seconds since the epoch) instead of the demo's own start: "
                        "`make demo` passes the time it began, so its set-up counts against the budget")
    p.add_argument("--ablations", action="store_true",
                   help="run the ablation ladder instead (ELF, REPA only, REG only, ELF-REG, REG removed at inference, "
                        "one learnable token, and settings that might make REG pay) over the training seeds, paired "
                        "per seed, and write ladder.md and ladder.json; --budget does not apply (docs/demo.md)")
    p.add_argument("--distill", action="store_true",
                   help="run the distillation study instead: a task where the teacher needs its steps, the teacher, "
                        "its PD and flow-map students over training seeds, each scored at NFE 2, 3, 5 and 16; writes "
                        "distill.md and distill.json; overrides are the study's (seeds=[0,1,2] samples=100 ...); "
                        "--budget does not apply (docs/distill.md; about 8 minutes a seed on 2 cores)")
    p.add_argument("--arms", default=None, metavar="A,B,...",
                   help="with --ablations: these arms only (ELF is always run: the baseline)")
    p.add_argument("--arm", action="append", default=[], metavar="'NAME=KIND key=value ...'",
                   help="with --ablations: one more arm, a student (ELF, ELF-REG, REPA-only, REG-only, OLT) with "
                        "settings of its own; repeatable")
    add_restart_argument(p)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="settings, e.g. train.steps=300 eval.seeds=[0]")
    p.set_defaults(func=cmd_demo)


def demo_config(quick: bool, overrides: list[str], preset: str | None = None):
    """The resolved DemoConfig: defaults, then the named preset (``quick=True`` is preset "quick"), then the
    overrides."""
    from elfreg.configtools import ConfigError
    from elfreg.demo.config import PRESETS, DemoConfig

    if quick and preset not in (None, "quick"):
        raise ConfigError(f"--quick is --preset quick; it cannot be combined with --preset {preset}")
    name = "quick" if quick else preset
    data = to_dict(DemoConfig())
    if name is not None:
        if name not in PRESETS:
            raise ConfigError(f"--preset: unknown {name!r}; choose one of {sorted(PRESETS)}")
        for section, values in PRESETS[name].items():
            data[section].update(values)
    return from_dict(DemoConfig, apply_overrides(data, overrides))


def budget_minutes(text: str) -> float:
    """``--budget``: minutes >= 0 (0: no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be minutes >= 0 (0: no limit), got {text}")
    return value


def budget_since(text: str) -> float:
    """``--budget-since``: a Unix time (seconds) not in the future; returns the seconds since then."""
    try:
        since = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a Unix time in seconds: {text!r}") from None
    ago = time.time() - since
    # a few seconds of slack for clocks read in two processes; a day bounds a stale or mistyped value
    if not -5 <= ago <= 86400:
        raise argparse.ArgumentTypeError(f"must be a Unix time within the last day, got {text}")
    return max(ago, 0.0)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo; prints where the report is and the total wall time."""
    from elfreg.demo.runner import run_demo

    t0 = time.perf_counter()
    if args.distill:
        return distill_study(args)
    args.out = args.out or "demo_out"
    cfg = demo_config(args.quick, args.overrides, args.preset)
    if args.no_progress:
        quiet_loaders()
    if args.ablations or args.arms or args.arm:
        return ladder(args, cfg)
    spent_before = args.budget_since or 0.0  # seconds before this process (make demo's set-up)
    run_demo(cfg, args.out, args.cache_dir, progress=not args.no_progress, restart=args.restart,
             budget_s=60 * args.budget if args.budget else None,
             spent_before_s=spent_before + time.perf_counter() - t0)
    took = time.perf_counter() - t0
    since = f", {spent_before + took:.0f} s since --budget-since" if args.budget_since is not None else ""
    print(f"elfreg demo: report {args.out}/report.md; total wall time {took:.0f} s{since}")
    return 0


def ladder(args: argparse.Namespace, cfg) -> int:
    """``elfreg demo --ablations``: the ablation ladder (elfreg.demo.ablations) into --out."""
    from elfreg.configtools import ConfigError
    from elfreg.demo.ablations import parse_arm, run_ladder, select_arms
    from elfreg.fingerprint import move_aside

    if not args.ablations:
        raise ConfigError("--arms and --arm choose the arms of --ablations; add --ablations")
    arms = select_arms([a for a in args.arms.split(",") if a] if args.arms else None,
                       [parse_arm(a) for a in args.arm])
    if args.restart:
        move_aside([args.out])
    t0 = time.perf_counter()
    run_ladder(cfg, args.out, arms, args.cache_dir, progress=not args.no_progress)
    print(f"elfreg demo --ablations: report {args.out}/ladder.md; total wall time {time.perf_counter() - t0:.0f} s")
    return 0


def distill_study(args: argparse.Namespace) -> int:
    """``elfreg demo --distill``: the distillation study (elfreg.demo.distill) into --out."""
    from elfreg.configtools import ConfigError
    from elfreg.demo.distill import REPORT, run_study, study_config
    from elfreg.fingerprint import move_aside

    for flag, given in (("--ablations", args.ablations or args.arms or args.arm), ("--quick", args.quick),
                        ("--preset", args.preset), ("--cache-dir", args.cache_dir)):
        if given:
            raise ConfigError(f"--distill runs a study of its own: {flag} does not apply to it")
    out = args.out = args.out or "demo_distill"
    cfg = study_config(args.overrides)
    if args.no_progress:
        quiet_loaders()
    if args.restart:
        move_aside([out])
    t0 = time.perf_counter()
    run_study(cfg, out, progress=not args.no_progress)
    print(f"elfreg demo --distill: report {out}/{REPORT}; total wall time {time.perf_counter() - t0:.0f} s")
    return 0
