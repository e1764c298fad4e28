"""`elfreg serve`: the OpenAI-compatible server over a model folder (``pip install "elfreg[serve]"``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from elfreg.bounds import Range
from elfreg.cliargs import error_line, model_ref
from elfreg.serve import MAX_BATCH, MAX_WAIT_MS

# The sampler flags of `elfreg generate` that set the server's defaults (a request's extra fields override them).
DEFAULT_FLAGS = ("sampler", "nfe", "rho", "grid", "p", "eta", "w", "task", "sigma", "drop_reg", "check_every",
                 "patience", "min_nfe", "extract", "seed", "device", "batch_invariant", "precision")
log = logging.getLogger(__name__)
PORT = Range(0, 65535, integer=True, why="0: any free port")
BODY_BYTES = Range(1024, 1 << 34, integer=True)
WORK = Range(2, 1 << 40, integer=True, why="rows x NFE of one request")
QUEUE = Range(1, 1 << 20, integer=True)
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def register(subparsers) -> None:
    """Add the `serve` subcommand."""
    from elfreg.sampling.flags import add_sampler_arguments

    p = subparsers.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API", description=__doc__)
    p.add_argument("--model", required=True, type=model_ref, help="model folder or hub id")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=PORT.arg, default=8000, help="port to listen on")
    p.add_argument("--max-batch", type=MAX_BATCH.arg, default=32, help="rows (prompts x n) per network call, at most")
    p.add_argument("--max-wait-ms", type=MAX_WAIT_MS.arg, default=10.0,
                   help="requests arriving within this window after the first waiting one share its batch")
    p.add_argument("--served-model-name", default=None, help="the model's name in the API (default: --model)")
    p.add_argument("--ui", action="store_true",
                   help="open the playground page (always served at /) in a web browser once the server is up")
    p.add_argument("--max-body-bytes", type=BODY_BYTES.arg, default=4 << 20,
                   help="a request body over this many bytes is refused (413) before it is read whole")
    p.add_argument("--max-work", type=WORK.arg, default=1 << 16,
                   help="a request asking for more network-call rows than this (prompts x n x NFE) is refused (400)")
    p.add_argument("--max-queue", type=QUEUE.arg, default=256,
                   help="requests waiting for the model, at most; beyond, a request is answered 429 (retry later)")
    p.add_argument("--api-key", default=os.environ.get("ELFREG_API_KEY") or None,
                   help="the key clients must send (Authorization: Bearer KEY) on /v1/ and /metrics (default: "
                        "$ELFREG_API_KEY; none: no key asked, fine on 127.0.0.1 only)")
    scratch = argparse.ArgumentParser(add_help=False)
    add_sampler_arguments(scratch)
    for action in scratch._actions:
        if action.dest in DEFAULT_FLAGS:
            if action.help and action.dest != "device":
                action.help += " (the server's default; a request's extra field overrides it)"
            p._add_action(action)
    p.set_defaults(func=cmd_serve)


def settings_of(args: argparse.Namespace) -> dict:
    """The default sampler settings of the server's flags (sampler_config keyword arguments)."""
    keys = [k for k in DEFAULT_FLAGS if k not in ("device", "batch_invariant", "precision")]
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


def cmd_serve(args: argparse.Namespace) -> int:
    """Run `elfreg serve` until interrupted; returns an exit code (2: bad input, before the model loads)."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as exc:
        print(f"elfreg serve: error: {exc.name} is not installed; pip install \"elfreg[serve]\"", file=sys.stderr)
        return 2
    if args.ui and args.port == 0:
        print("elfreg serve: error: --ui: needs the server's --port (not 0: any free port) to open its page",
              file=sys.stderr)
        return 2
    from elfreg.pretrained import ElfModel
    from elfreg.sampling.generate import generation_device
    from elfreg.sampling.text import model_sampler_config
    from elfreg.serve.app import Server, ServeSettings, create_app

    settings = ServeSettings(model_name=args.served_model_name or str(args.model), defaults=settings_of(args),
                             max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                             max_body_bytes=args.max_body_bytes, max_work=args.max_work, max_queue=args.max_queue,
                             api_key=args.api_key)
    if args.api_key is None and args.host not in LOOPBACK:
        log.warning("serving on %s without --api-key: anyone who reaches this address can use the model", args.host)
    try:
        model = ElfModel.from_pretrained(args.model, device=generation_device(args.device))
        model_sampler_config(model, **settings.defaults)   # bad defaults fail here, naming the field
        server = Server(model, settings, args.batch_invariant, args.precision)
    except (ValueError, OSError) as exc:
        print(f"elfreg serve: error: {error_line(exc, args)}", file=sys.stderr)
        return 2
    log.info("serving %s on http://%s:%d/v1 (max batch %d, window %g ms); playground: http://%s:%d/",
             settings.model_name, args.host, args.port, args.max_batch, args.max_wait_ms, args.host, args.port)
    if args.ui:
        from elfreg.serve.ui import open_when_up, page_url

        open_when_up(page_url(args.host, args.port))
    uvicorn.run(create_app(server), host=args.host, port=args.port, log_level=args.log_level.lower())
    return 0
