"""pass@1 over problems and seeds with the std across seeds; unbiased pass@k (spec §6)."""

from __future__ import annotations

import math
from statistics import mean, pstdev


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator 1 - C(n-c, k) / C(n, k) for one problem with n samples, c correct (spec §6).

    Computed as (C(n, k) - C(n-c, k)) / C(n, k) in exact integers, so the one rounding is the final
    division: no cancellation when the estimate is tiny, no overflow for large n.
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"pass_at_k: {name} must be an integer, got {v!r}")
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass_at_k: k={k} exceeds the number of samples n={n}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    total = math.comb(n, k)
    return (total - math.comb(n - c, k)) / total


def summarize(correct: dict[str, dict[int, bool]], ks: tuple[int, ...] = (1,)) -> dict:
    """``correct[task_id][sample] -> bool`` -> pass@1 mean/std across seeds and pass@k (as fractions).

    pass@1 per seed = mean over problems of that seed's correctness; the reported pass@1 is the mean
    over seeds and problems, with the (population) standard deviation of the per-seed values. pass@k
    for every k in ``ks`` is the mean over problems of the unbiased estimator; a k larger than the
    fewest samples of a problem is a ValueError (callers check it before any work).
    """
    if not correct:
        raise ValueError("summarize: no results")
    seeds = sorted({s for per in correct.values() for s in per})
    per_seed = [mean(float(correct[t].get(s, False)) for t in correct) for s in seeds]
    n_min = min(len(per) for per in correct.values())
    big = [k for k in ks if k > n_min]
    if big:
        raise ValueError(f"pass@{big[0]} needs at least {big[0]} samples per problem; the fewest here is {n_min}")
    out = {"problems": len(correct), "samples_per_problem": n_min, "seeds": seeds,
           "pass@1": mean(float(v) for per in correct.values() for v in per.values()),
           "pass@1_std_across_seeds": pstdev(per_seed) if len(per_seed) > 1 else 0.0,
           "pass@1_per_seed": per_seed, "ks": sorted(set(ks))}
    for k in sorted(set(ks)):
        if k != 1:  # pass@1 above is the same estimator when every problem has the same n
            out[f"pass@{k}"] = mean(pass_at_k(len(per), sum(per.values()), k) for per in correct.values())
    return out
