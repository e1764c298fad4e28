"""The Hugging Face hub from elfreg's side, torch-free: whether it is reachable, and where a model's files are.

A low module: the model layer (elfreg.pretrained), pushing (elfreg.push), the data commands and lm-eval read it, and it
reads none of them.
"""

from __future__ import annotations

import os
from pathlib import Path

# The files ElfModel.from_pretrained reads from a model folder.
FILES = ("config.json", "model.safetensors", "stats.safetensors")

_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_unreachable(timeout_s: float = 3.0) -> str | None:
    """Why the Hugging Face hub cannot be reached right now, or None when it can.

    Offline mode (``HF_HUB_OFFLINE``) answers at once; otherwise one TCP connection to the hub endpoint (or to the
    HTTPS proxy, when one is set) within ``timeout_s``, instead of the ~40 s of retries a download makes before it
    fails."""
    import socket
    import urllib.request
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE or constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT)
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(endpoint.scheme or "https")
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        host, port = p.hostname or host, p.port or 8080
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"{host}:{port} not reachable within {timeout_s:g} s ({exc})"
    return None


def resolve_model_dir(name_or_path: str | Path, revision: str | None = None) -> Path:
    """A local model folder, or a hub repo id downloaded through huggingface_hub."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        missing = [f for f in FILES[:2] if not (path / f).is_file()]
        if missing:
            raise FileNotFoundError(f"{path} is not an elfreg model folder: missing {', '.join(missing)}")
        return path
    text = str(name_or_path)
    if text.startswith((".", "/", "~")) or os.sep in text.strip("/").replace("/", "", 1):
        raise FileNotFoundError(f"model folder {path} does not exist")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(text, revision=revision, allow_patterns=[*FILES, "README.md", "distill.json"]))
    except Exception as exc:  # network errors, missing repos: say which model could not be had
        raise FileNotFoundError(f"cannot load model {text!r} from the Hugging Face hub: {exc}") from exc
