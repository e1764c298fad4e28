"""`elfreg push`: a model folder, with its model card, to a Hugging Face Hub repository (huggingface_hub)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from elfreg.cliargs import error_line

# What a model repo holds: the files ElfModel.from_pretrained reads, and the card.
UPLOADED = ("config.json", "model.safetensors", "stats.safetensors", "README.md")


def push_folder(folder: str | Path, repo_id: str, *, private: bool | None = None, token: str | None = None,
                revision: str | None = None, commit_message: str = "Upload elfreg model") -> str:
    """Upload an elfreg model folder to ``repo_id`` (created when missing) in one commit; returns the commit's URL.

    The folder is checked first (an elfreg model: config.json, model.safetensors, stats.safetensors); its card is
    re-rendered with the repo id as its title (a folder without one gets one). Only the model's files and the card
    are uploaded. Hub errors (no token, no right to write, no network) are an OSError whose message is one line.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

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
    record_results(folder, [], name=repo_id)
    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), allow_patterns=list(UPLOADED),
                                 commit_message=commit_message, revision=revision)
    except HfHubHTTPError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        status = getattr(getattr(exc, "response", None), "status_code", None)
        hint = ("; a token with write access is needed: set HF_TOKEN, pass --token, or run `hf auth login`"
                if status in (401, 403) else "")
        raise OSError(f"cannot push to the Hub repo {repo_id!r}: {first}{hint}") from None
    except OSError as exc:   # no connection, a proxy refusing, ...
        raise OSError(f"cannot reach the Hugging Face Hub to push {repo_id!r}: {exc}") from None
    return str(getattr(info, "commit_url", None) or info or url)


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
