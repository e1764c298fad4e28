"""MATH-500 scoring with math-verify 0.9.0, gold first, in worker processes (spec §6).

math-verify's timeouts use ``signal.alarm``, which only works in a main thread; worker processes run
tasks in their main thread, so the timeouts work there, and a stuck worker is bounded by the pool wait.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, TimeoutError as FutureTimeout


def verify_one(gold: str, completion: str, timeout_s: int = 5) -> bool:
    """True if the completion's answer is equivalent to gold (``verify(parse(gold), parse(pred))``)."""
    from math_verify import parse, verify

    g = parse(f"${gold}$", parsing_timeout=timeout_s)
    p = parse(completion, parsing_timeout=timeout_s)
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=timeout_s))


def _safe(args: tuple[str, str, int]) -> bool:
    try:
        return verify_one(*args)
    except Exception:  # noqa: BLE001 - an unparsable or timed-out answer scores 0
        return False


def verify_many(pairs: list[tuple[str, str]], workers: int = 2, timeout_s: int = 5) -> list[bool]:
    """Verify (gold, completion) pairs in ``workers`` processes; a pair that hangs past 4x the timeout is wrong."""
    if not pairs:
        return []
    out: list[bool] = []
    with ProcessPoolExecutor(max_workers=workers) as ex:
        futs = [ex.submit(_safe, (g, c, timeout_s)) for g, c in pairs]
        for f in futs:
            try:
                out.append(bool(f.result(timeout=4 * timeout_s + 30)))
            except (FutureTimeout, Exception):  # noqa: BLE001
                out.append(False)
    return out
