"""elfreg models inside EleutherAI's lm-evaluation-harness (``pip install "elfreg[lm-eval]"``; docs/lm_eval.md).

Importing this package registers the lm-eval model type ``elfreg`` (``elfreg.lm_eval.model.ElfLM``) when lm-eval is
installed; ``elfreg lm-eval`` / ``python -m elfreg.lm_eval`` run lm-eval's own command line with it.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

INSTALL_HINT = 'lm-eval is not installed: pip install "elfreg[lm-eval]"'

if find_spec("lm_eval") is not None:
    from elfreg.lm_eval.model import ElfLM  # noqa: F401  (registers the model type "elfreg")


def __getattr__(name: str) -> Any:
    if name == "ElfLM":
        raise ImportError(INSTALL_HINT)
    raise AttributeError(name)
