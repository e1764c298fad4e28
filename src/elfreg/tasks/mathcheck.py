"""MATH-500 scoring with math-verify 0.9.0, gold first (spec §6).

Scoring calls :func:`verify_answer` in a worker process of its text pool (elfreg.eval.scoring): math-verify's timeouts
use ``signal.alarm``, which only works in a main thread, and a worker runs its tasks in its main thread; a sample
stuck anyway is bounded by the pool's per-sample time limit.
"""

from __future__ import annotations

import logging

_LOG_CHARS = 300  # math-verify logs the text it gave up on, whole ("Timeout during parsing: <10 MB completion>")
_LOGGERS = ("math_verify.parser", "math_verify.grader", "math_verify.metric", "math_verify.utils")


class _Shorten(logging.Filter):
    """Cut a log message to its first ``_LOG_CHARS`` characters, saying how long it was."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if len(msg) > _LOG_CHARS:
            record.msg, record.args = f"{msg[:_LOG_CHARS]}... [{len(msg)} characters in all]", ()
        return True


def _shorten_logs() -> None:
    """Install :class:`_Shorten` on math-verify's loggers (a logger's filters do not reach its children)."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Shorten) for f in logger.filters):
            logger.addFilter(_Shorten())


def verify_one(gold: str, completion: str, timeout_s: int = 5) -> bool:
    """True if the completion's answer is equivalent to gold (``verify(parse(gold), parse(pred))``); the verdict
    reads the whole completion, math-verify's log lines only its head."""
    from math_verify import parse, verify

    _shorten_logs()
    g = parse(f"${gold}$", parsing_timeout=timeout_s)
    p = parse(completion, parsing_timeout=timeout_s)
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=timeout_s))


def verify_answer(gold: str, completion: str, timeout_s: int = 5) -> bool:
    """:func:`verify_one`, with an unparsable or timed-out answer (math-verify raising) scored wrong."""
    try:
        return verify_one(gold, completion, timeout_s)
    except Exception:  # noqa: BLE001 - an unparsable or timed-out answer scores 0
        return False
