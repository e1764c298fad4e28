"""The dependency ranges pyproject.toml declares hold what is installed, and what elfreg uses of huggingface_hub
(the imports and the exceptions it catches) exists in it."""

import importlib.metadata
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def _requirement(name: str) -> Requirement:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(Requirement(d) for d in deps if Requirement(d).name.replace("_", "-") == name)


def test_huggingface_hub_is_bounded_and_the_installed_one_is_in_range():
    req = _requirement("huggingface-hub")
    assert any(s.operator in ("<", "<=", "~=", "==") for s in req.specifier), "huggingface_hub needs an upper bound"
    assert req.specifier.contains(importlib.metadata.version("huggingface_hub"))


def test_what_elfreg_uses_of_huggingface_hub_exists():
    from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData, constants, snapshot_download  # noqa: F401
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import disable_progress_bars  # noqa: F401

    assert issubclass(HfHubHTTPError, Exception)
    assert isinstance(constants.ENDPOINT, str) and isinstance(constants.HF_HUB_OFFLINE, bool)
    assert all(callable(getattr(HfApi, m)) for m in ("create_repo", "create_branch", "upload_folder"))
