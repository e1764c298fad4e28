"""JSON every reader parses: NaN and Infinity (which ``json.dumps`` writes by default, and JSON does not have) are
never written. Results files refuse them with an error naming where they sit; a training log writes null."""

from __future__ import annotations

import json
import math
from typing import Any


def non_finite(obj: Any, where: str = "") -> tuple[str, float] | None:
    """(path, value) of the first NaN or infinite float inside ``obj`` (``rows[3].w``), or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "the value", obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = non_finite(value, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found:
            return found
    return None


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN and Infinity: ValueError ``w is nan: JSON has no such number``."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        found = non_finite(obj)
        if found is None:
            raise
        raise ValueError(f"{found[0]} is {found[1]}: JSON has no such number, so it is not written") from None


def finite_or_null(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None (a log line that must still be written)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj
