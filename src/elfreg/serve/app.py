"""The OpenAI-compatible HTTP API of ``elfreg serve`` (FastAPI): completions, chat completions, models, health.

- ``POST /v1/completions``: ``prompt`` (a string or a list of strings) is encoded as given (OpenAI's completions
  continue raw text; put a bare question in the model's template with the extra field ``"prompt_format":
  "template"``). ``POST /v1/chat/completions``: one user message, put in the model's saved template (the template
  has one question field: system and earlier turns are refused, not silently dropped).
- ``n``: samples per prompt (sample s of prompt i is noise key (i, s), as ``elfreg generate``); ``seed``; the
  sampler settings as extra fields (``nfe``, ``sampler``, ``rho``, ``w``, ``task``, ... any SamplerConfig field),
  each defaulting to the server's (its command-line flags; null too). ``max_tokens`` and ``stop`` cut the answer
  (finish_reason ``length`` / ``stop``). ``temperature``, ``top_p`` and the penalties do not apply to this model
  family and are ignored. ``stream: true`` answers as Server-Sent Events in OpenAI's chunk format, with the
  denoising trajectory on request (``"elfreg": {"trajectory": true, "every": k}``; elfreg.serve.stream).
- Errors are OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``): 400 for a bad field or a prompt
  over the model's limit (code ``context_length_exceeded``: refused, never truncated), 401 without the server's
  API key, 404 for another model name, 413 for a body over the size limit, 429 when the queue is full, 500 (JSON
  too) for the server's own failure. A request is checked whole (validate.py) before it is queued, and one whose
  client disconnects is cancelled (a stream too).
- ``GET /v1/models``, ``GET /health`` (503 while the worker is down; the call restarts it), ``GET /metrics``;
  ``GET /``: the playground page (elfreg.serve.ui).
"""

import asyncio
import copy
import hmac
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator

from elfreg.sampling.config import SamplerConfig
from elfreg.serve.batcher import Batcher, Job, QueueFull
from elfreg.serve.metrics import RequestStats, log
from elfreg.serve.stream import check_stream, stream_response
from elfreg.serve.ui import add_playground
from elfreg.serve.validate import (SAMPLER_FIELDS, Generation, Limits, RequestError, chat_request, check_work,
                                   completion_request, parse_body, prompt_char_bound)

__all__ = ["RequestError", "SAMPLER_FIELDS", "Server", "ServeSettings", "create_app", "served"]

DRAIN_BYTES = 256 << 20       # a body over the limit is read and dropped up to this, then the connection is closed
MAX_ROWS_PER_REQUEST = 1024   # prompts x n of one request, at most (a bound on one request's work)
IGNORED = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "logit_bias", "user", "logprobs",
           "echo", "best_of", "suffix", "top_logprobs", "response_format", "tools", "tool_choice",
           "parallel_tool_calls", "max_completion_tokens", "store", "metadata", "service_tier", "modalities")


class ClientGone(Exception):
    """The client disconnected before its answer: the request was cancelled."""


@dataclass
class ServeSettings:
    """What the server was started with: the model's name, the default sampler settings, the batching, the bounds
    on a request, the API key (None: none asked)."""

    model_name: str
    defaults: dict[str, Any] = field(default_factory=dict)   # sampler_config keyword arguments (task, w, nfe, ...)
    max_batch: int = 32
    max_wait_ms: float = 10.0
    max_body_bytes: int = 4 << 20      # bytes of a request body
    max_work: int = 1 << 16            # rows x NFE of one request
    max_queue: int = 256               # requests waiting for the worker
    api_key: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_work", "max_queue"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name.replace('_', '-')}: need an integer >= 1, got {value!r}")


def _finish(text_of: Any, ids: list[int], max_tokens: int | None, stops: list[str]) -> tuple[str, str, int]:
    """(text, finish_reason, completion tokens) of one answer under max_tokens and stop."""
    reason = "stop"
    if max_tokens is not None and len(ids) > max_tokens:
        ids, reason = ids[:max_tokens], "length"
    text = text_of(ids)
    cuts = [text.find(s) for s in stops if s in text]
    if cuts:
        text, reason = text[:min(cuts)], "stop"
    return text, reason, len(ids)


def _usage(prompt_tokens: int, answers: list[tuple[str, str, int]]) -> dict:
    done = sum(a[2] for a in answers)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": prompt_tokens + done}


class Server:
    """The model behind the API: request bodies -> sampler settings and jobs -> OpenAI responses."""

    def __init__(self, model: Any, settings: ServeSettings, batch_invariant: bool | None = None,
                 precision: str = "auto") -> None:
        from elfreg.sampling.pipeline import prompt_limit
        from elfreg.sampling.text import model_pipeline

        self.model = model
        self.settings = settings
        self.created = int(time.time())
        self.stats = RequestStats()
        tokens = prompt_limit(int(model.config.model.max_len), model.config.model.max_prompt_len)
        # the frozen encoder and tokenizer load now, not on the first request
        self.limits = Limits(MAX_ROWS_PER_REQUEST, settings.max_work, prompt_char_bound(model.tokenizer, tokens))
        # prompts are tokenized (their lengths checked) off the worker, in a thread of their own with a tokenizer of
        # their own: the worker's is never used by two threads at once
        self.check_tokenizer = copy.deepcopy(model.tokenizer)
        self.check_pool = ThreadPoolExecutor(1, thread_name_prefix="elfreg-check")
        self.batcher = Batcher(lambda cfg: model_pipeline(model, cfg, batch_size=settings.max_batch, formatted=True,
                                                          batch_invariant=batch_invariant, precision=precision),
                               settings.max_batch, settings.max_wait_ms, settings.max_queue)

    # -- requests -> jobs ---------------------------------------------------------------------------------------
    def sampler_config(self, options: dict) -> SamplerConfig:
        """The request's sampler settings (type-checked by validate.sampler_options) over the server's defaults."""
        from elfreg.sampling.text import model_sampler_config

        try:
            return model_sampler_config(self.model, **{**self.settings.defaults, **options})
        except (ValueError, TypeError) as exc:
            name = str(exc).split(":", 1)[0]
            raise RequestError(str(exc), name if name in SAMPLER_FIELDS else None) from None

    async def run(self, gen: Generation, gone: Callable[[], Awaitable[None]] | None = None, watch: Any = None
                  ) -> tuple[list[dict], list[tuple[str, str, int]], int]:
        """Generate every (prompt, sample) of a checked request: (records in key order, their (text, finish_reason,
        completion tokens), prompt tokens). The prompts are tokenized in the check thread, the answers decoded in the
        worker. ``gone()``: finishes when the client disconnects, which cancels the request (ClientGone). ``watch``: an
        elfreg.sampling.watch.Watch of the request's rows (the trajectory stream)."""
        cfg = self.sampler_config(gen.options)
        check_work(gen, cfg.nfe, self.limits)
        try:
            prompt_tokens = await asyncio.get_running_loop().run_in_executor(self.check_pool, self.prompt_tokens,
                                                                             gen.texts)
        except ValueError as exc:   # a prompt too long or empty
            code = "context_length_exceeded" if "tokens" in str(exc) else None
            raise RequestError(str(exc), gen.param, code) from None
        tok = self.model.tokenizer

        def post(records: list[dict]) -> tuple:
            answers = [_finish(lambda ids: tok.decode(ids, skip_special_tokens=True), r["response_token_ids"],
                               gen.max_tokens, gen.stops) for r in records]
            return records, answers, prompt_tokens

        job = Job(gen.texts, gen.n, cfg, post, watch=watch, checked=True)
        try:
            waiter = asyncio.wrap_future(self.batcher.submit(job))
        except QueueFull as exc:
            raise RequestError(str(exc), None, "queue_full", status=429, kind="rate_limit_error") from None
        waiter.add_done_callback(lambda f: f.cancelled() or f.exception())   # retrieved even when nobody awaits
        if gone is not None:
            left = asyncio.ensure_future(gone())
            try:
                await asyncio.wait({waiter, left}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not waiter.done():
                    job.cancel()
                left.cancel()
            if not waiter.done():
                raise ClientGone()
        try:
            return await waiter
        except ValueError as exc:   # e.g. the sampler's memory estimate refusing the batch
            raise RequestError(str(exc), gen.param) from None

    def prompt_tokens(self, texts: list[str]) -> int:
        """Check that each formatted prompt fits the model (ValueError naming it otherwise); its tokens in all. In
        the check thread, with its own tokenizer: the texts are bounded in characters already."""
        from elfreg.sampling.pipeline import validate_prompts

        ids = [self.check_tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

        class Counted:   # the encoder validate_prompts asks: the ids just computed
            @staticmethod
            def prompt_token_ids(prompts: list[str]) -> list[list[int]]:
                return ids

        config = self.model.config.model
        validate_prompts(texts, Counted(), int(config.max_len), config.max_prompt_len, "prompt", range(len(texts)))
        return sum(map(len, ids))

    async def completions(self, body: Any, gone: Callable[[], Awaitable[None]] | None = None) -> Any:
        gen, fmt = completion_request(body, self.settings.model_name, self.limits)
        if fmt == "template":
            gen.texts = self.model.format_prompts(gen.texts)
        if check_stream(body):
            return await stream_response(self, "text_completion", gen, body, gone)
        records, answers, prompt_tokens = await self.run(gen, gone)
        choices = [{"index": i, "text": text, "finish_reason": reason, "logprobs": None}
                   for i, (text, reason, _) in enumerate(answers)]
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.settings.model_name, "choices": choices,
                "usage": _usage(prompt_tokens, answers), **self._extra(records)}

    async def chat(self, body: Any, gone: Callable[[], Awaitable[None]] | None = None) -> Any:
        gen = chat_request(body, self.settings.model_name, self.limits)
        gen.texts = self.model.format_prompts(gen.texts)
        if check_stream(body):
            return await stream_response(self, "chat.completion", gen, body, gone)
        records, answers, prompt_tokens = await self.run(gen, gone)
        choices = [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": reason,
                    "logprobs": None} for i, (text, reason, _) in enumerate(answers)]
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.settings.model_name, "choices": choices,
                "usage": _usage(prompt_tokens, answers), **self._extra(records)}

    @staticmethod
    def _extra(records: list[dict]) -> dict:
        """elfreg's own fields beside OpenAI's: each answer's NFE and the sampler settings used."""
        first = records[0]
        keys = ("sampler", "nfe", "rho", "w", "seed", "sigma", "batch_invariant")
        return {"elfreg": {"nfe_spent": [r["nfe_spent"] for r in records], **{k: first.get(k) for k in keys}}}

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.settings.model_name, "object": "model",
                                            "created": self.created, "owned_by": "elfreg"}]}

    def health(self) -> tuple[int, dict]:
        """(HTTP status, body): 200 while the worker runs; 503 naming why it stopped, and a new one is started."""
        body = {"status": "ok", "model": self.settings.model_name, "queued": self.batcher.queue.qsize(),
                "batches": self.batcher.batches, "restarts": self.batcher.restarts}
        if self.batcher.alive:
            return 200, body
        died = self.batcher.died or "stopped"
        log.error("the batcher worker is down (%s); restarting it", died)
        restarted = self.batcher.revive()
        return 503, {**body, "status": f"worker down ({died})" + ("; restarted" if restarted else "")}

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header carries the server's API key (always, when it has none)."""
        key = self.settings.api_key
        if not key:
            return True
        given = (header or "").removeprefix("Bearer ").strip()
        return bool(header and header.startswith("Bearer ")) and hmac.compare_digest(given.encode(), key.encode())


async def read_body(request: Any, limit: int) -> bytes:
    """The request body, refused (413) past ``limit`` bytes, by its declared length or as the chunks arrive: never
    held whole. The rest is read and dropped (up to DRAIN_BYTES), so that the client, still sending, gets the 413
    rather than a reset connection."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or len(declared) > 18):
        raise RequestError(f"Content-Length: not a byte count, got {declared[:40]!r}")
    chunks, size = [], 0
    over = declared is not None and int(declared) > limit
    async for chunk in request.stream():
        size += len(chunk)
        over = over or size > limit
        if over:
            chunks.clear()
            if size > DRAIN_BYTES:
                break
        else:
            chunks.append(chunk)
    if over:
        raise RequestError(f"the request body is over this server's limit of {limit} bytes (--max-body-bytes)",
                           None, "request_too_large", status=413)
    return b"".join(chunks)


async def disconnected(request: Any) -> None:
    """Finishes when the client of ``request`` (its body already read) disconnects."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(server: Server) -> Any:
    """The FastAPI application over ``server``."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        server.batcher.close()
        server.check_pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="elfreg", description="OpenAI-compatible API of an ELF / ELF-REG model", lifespan=lifespan)

    def error(exc: RequestError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    def check_key(request: Request) -> None:
        if not server.authorized(request.headers.get("authorization")):
            raise RequestError("a valid API key is needed: Authorization: Bearer KEY (the server's --api-key)",
                               None, "invalid_api_key", status=401)

    async def answer(request: Request, handle: Callable[..., Awaitable[dict]]) -> Response:
        """One generation request, whatever happens: its JSON answer or error, its log line and counts."""
        t0 = time.perf_counter()
        rows = nfe = 0
        note = ""
        try:
            check_key(request)
            body = parse_body(await read_body(request, server.settings.max_body_bytes))
            result = await handle(body, lambda: disconnected(request))
            if isinstance(result, Response):   # a stream (elfreg.serve.stream): its rows and NFE come as it runs
                response, note = result, "stream"
            else:
                rows, nfe = len(result["choices"]), sum(result["elfreg"]["nfe_spent"])
                response = JSONResponse(result)
        except RequestError as exc:
            response, note = error(exc), str(exc)[:200]
        except ClientGone:
            response, note = Response(status_code=499), "the client disconnected; cancelled"
        except Exception as exc:   # the server's own failure: this request's 500, never the process's
            note = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            log.debug("request failed", exc_info=True)
            response = error(RequestError(f"internal error ({note})", None, "internal_error", status=500,
                                          kind="server_error"))
        server.stats.record(request.method, request.url.path, response.status_code, time.perf_counter() - t0,
                            rows, nfe, note)
        return response

    @app.exception_handler(RequestError)
    async def _refused(request: Request, exc: RequestError) -> JSONResponse:
        return error(exc)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error(RequestError(f"{request.method} {request.url.path}: {exc.detail}", status=exc.status_code,
                                  kind=kind))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(RequestError(str(exc)[:500]))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await answer(request, server.completions)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await answer(request, server.chat)

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        check_key(request)
        return server.models()

    @app.get("/health")
    async def health() -> Any:
        status, body = server.health()
        return JSONResponse(body, status_code=status)

    @app.get("/metrics")
    async def metrics(request: Request) -> Any:
        check_key(request)
        return {**server.stats.snapshot(), "queued": server.batcher.queue.qsize(), "batches": server.batcher.batches,
                "network_calls": server.batcher.calls, "cancelled_batches": server.batcher.cancelled,
                "worker_restarts": server.batcher.restarts}

    add_playground(app)
    return app


@contextmanager
def served(server: Server, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Run the app over ``server`` with uvicorn in a background thread (port 0: a free one); yields its base URL and
    stops it on exit (notebooks, tests, benchmarks/bench_serve.py)."""
    import socket
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, port))
    uv = uvicorn.Server(uvicorn.Config(create_app(server), log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, name="elfreg-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uv.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not uv.started:
        raise OSError(f"the server did not start on {host}:{sock.getsockname()[1]}")
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        uv.should_exit = True
        thread.join(timeout=60)
        sock.close()
