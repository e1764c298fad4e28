"""`elfreg push`: a model folder, with its model card, to a Hugging Face Hub repository (huggingface_hub)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from elfreg.cliargs import error_line

# What a model repo holds: the files ElfModel.from_pretrained reads, and the card.
UPLOADED = ("config.json", "model.safetensors", "stats.safetensors", "README.md")


def push_folder(folder: str | Path, repo_id: str, *, private: bool | None = None, token: str | None = None,
                revision: str | None = None, commit_message: str = "Upload elfreg model") -> str:
    """Upload an elfreg model folder to ``repo_id`` (created when missing) in one commit; returns the commit's URL.

    The folder is checked first (an elfreg model: config.json, model.safetensors, stats.safetensors); its card is
    rendered with the repo id as its title in a temporary folder, and written into the folder only once the upload
    succeeded (a folder without one gets one): a failed push changes nothing. Only the model's files and the card
    are uploaded. Hub errors (no token, no right to write, HTTP errors, no network: refused, DNS, timeout, TLS) are
    an OSError whose message is one line naming the cause.
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    from elfreg.atomic import atomic_write_bytes
    from elfreg.card import record_results
    from elfreg.hubaccess import FILES, resolve_model_dir

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    resolve_model_dir(folder)
    if not (folder / FILES[2]).is_file():
        raise FileNotFoundError(f"{folder}: missing {FILES[2]} (the feature statistics the model was trained with)")
    if "/" not in repo_id.strip("/") or repo_id.count("/") != 1:
        raise ValueError(f"--repo: a Hub repo id is OWNER/NAME, got {repo_id!r}")
    card = repo_card(folder, repo_id, record_results)
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name))
                  for name in UPLOADED if name != "README.md" and (folder / name).is_file()]
    operations.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card))
    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.create_commit(repo_id, operations=operations, commit_message=commit_message, revision=revision)
    except Exception as exc:   # whatever the Hub client raises is one line naming its cause
        raise OSError(hub_failure(exc, repo_id, api.endpoint)) from None
    if not (folder / "README.md").is_file() or (folder / "README.md").read_bytes() != card:
        atomic_write_bytes(folder / "README.md", card)   # the folder's card is the one the repo has now
    return str(getattr(info, "commit_url", None) or info or url)


def repo_card(folder: Path, repo_id: str, record_results: Any) -> bytes:
    """The folder's model card titled with the repo id, rendered in a temporary copy (the folder is not touched)."""
    with tempfile.TemporaryDirectory(prefix="elfreg-push-") as tmp:
        for name in ("config.json", "README.md"):
            if (folder / name).is_file():
                shutil.copyfile(folder / name, Path(tmp) / name)
        return Path(record_results(tmp, [], name=repo_id)).read_bytes()


def hub_failure(exc: Exception, repo_id: str, endpoint: str) -> str:
    """One line for a failed push: the Hub's HTTP refusal (with a hint for 401/403), or why it could not be
    reached (connection refused, DNS, timeout, TLS, offline mode)."""
    text = " ".join(str(exc).split())
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        hint = ("; a token with write access is needed: set HF_TOKEN, pass --token, or run `hf auth login`"
                if status in (401, 403) else "")
        return f"cannot push to the Hub repo {repo_id!r}: HTTP {status}: {first}{hint}"
    low, name = text.lower(), type(exc).__name__
    if "timeout" in name.lower() or "timed out" in low:
        cause = "the connection timed out"
    elif any(s in low for s in ("ssl", "certificate", "tls")):
        cause = "the TLS handshake failed"
    elif any(s in low for s in ("name or service not known", "name resolution", "nodename nor servname",
                                "getaddrinfo", "no address associated")):
        cause = "the host name did not resolve (DNS)"
    elif "refused" in low:
        cause = "the connection was refused"
    elif "offline" in name.lower() or "offline" in low:
        cause = "offline mode is on (HF_HUB_OFFLINE)"
    else:
        cause = name
    return f"cannot reach the Hugging Face Hub at {endpoint} to push {repo_id!r}: {cause} ({first})"


def register(subparsers) -> None:
    """Add the `push` subcommand."""
    p = subparsers.add_parser("push", help="upload a model folder and its model card to the Hugging Face Hub",
                              description=__doc__)
    p.add_argument("--model", required=True, help="model folder (config.json, model.safetensors, stats.safetensors)")
    p.add_argument("--repo", required=True, help="Hub repo id, OWNER/NAME (created when missing)")
    p.add_argument("--private", action="store_true", default=None, help="create the repo private")
    p.add_argument("--revision", default=None, help="branch to push to (created when missing; default: main)")
    p.add_argument("--message", default="Upload elfreg model", help="commit message")
    p.add_argument("--token", default=None,
                   help="Hub token (default: $HF_TOKEN, else the one `hf auth login` saved)")
    p.set_defaults(func=cmd_push)


def cmd_push(args: argparse.Namespace) -> int:
    """Run `elfreg push`; returns an exit code (2: bad input or a Hub refusal, one line)."""
    import logging

    for name in ("httpx", "httpx2", "httpcore"):   # one line per HTTP request at the CLI's INFO level otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        url = push_folder(args.model, args.repo, private=args.private, token=args.token, revision=args.revision,
                          commit_message=args.message)
    except (ValueError, OSError) as exc:
        print(f"elfreg push: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
    print(url)
    print(f"elfreg push: {args.model} -> {args.repo}", file=sys.stderr)
    return 0
