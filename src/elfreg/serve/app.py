"""The OpenAI-compatible HTTP API of ``elfreg serve`` (FastAPI): completions, chat completions, models, health.

- ``POST /v1/completions``: ``prompt`` (a string or a list of strings) is encoded as given (OpenAI's completions
  continue raw text; put a bare question in the model's template with the extra field ``"prompt_format":
  "template"``). ``POST /v1/chat/completions``: one user message, put in the model's saved template (the template
  has one question field: system and earlier turns are refused, not silently dropped).
- ``n``: samples per prompt (sample s of prompt i is noise key (i, s), as ``elfreg generate``); ``seed``; the
  sampler settings as extra fields (``nfe``, ``sampler``, ``rho``, ``w``, ``task``, ... any SamplerConfig field),
  each defaulting to the server's (its command-line flags). ``max_tokens`` and ``stop`` cut the answer
  (finish_reason ``length`` / ``stop``). ``temperature``, ``top_p`` and the penalties do not apply to this model
  family and are ignored. ``stream: true`` answers as Server-Sent Events in OpenAI's chunk format, with the
  denoising trajectory on request (``"elfreg": {"trajectory": true, "every": k}``; elfreg.serve.stream).
- Errors are OpenAI's JSON (``{"error": {"message", "type", "param", "code"}}``): 400 for a bad field or a prompt
  over the model's limit (code ``context_length_exceeded``: refused, never truncated), 404 for another model name.
- ``GET /v1/models``, ``GET /health``; ``GET /``: the playground page (elfreg.serve.ui).
"""

import asyncio
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, Iterator

from elfreg.sampling.config import SamplerConfig
from elfreg.serve.batcher import Batcher, Job
from elfreg.serve.stream import check_stream, stream_response
from elfreg.serve.ui import add_playground

MAX_ROWS_PER_REQUEST = 1024   # prompts x n of one request, at most (a bound on one request's work)
IGNORED = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "logit_bias", "user", "logprobs",
           "echo", "best_of", "suffix", "top_logprobs", "response_format", "tools", "tool_choice",
           "parallel_tool_calls", "max_completion_tokens", "store", "metadata", "service_tier", "modalities")
SAMPLER_FIELDS = {f.name for f in fields(SamplerConfig)} | {"task"}


class RequestError(ValueError):
    """A request the server refuses: HTTP status, OpenAI error type, the field, a code."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.code, self.status, self.kind = param, code, status, kind

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class ServeSettings:
    """What the server was started with: the model's name, the default sampler settings, the batching."""

    model_name: str
    defaults: dict[str, Any] = field(default_factory=dict)   # sampler_config keyword arguments (task, w, nfe, ...)
    max_batch: int = 32
    max_wait_ms: float = 10.0


def _int(body: dict, key: str, default: int, low: int = 1) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise RequestError(f"{key}: need an integer >= {low}, got {value!r}", key)
    return value


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise RequestError("stop: a non-empty string or a list of up to 4 of them", "stop")
    return stops


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
        from elfreg.sampling.text import model_pipeline

        self.model = model
        self.settings = settings
        self.created = int(time.time())
        model.tokenizer   # the frozen encoder and tokenizer load now, not on the first request
        self.batcher = Batcher(lambda cfg: model_pipeline(model, cfg, batch_size=settings.max_batch, formatted=True,
                                                          batch_invariant=batch_invariant, precision=precision),
                               settings.max_batch, settings.max_wait_ms)

    # -- requests -> jobs ---------------------------------------------------------------------------------------
    def sampler_config(self, body: dict) -> SamplerConfig:
        from elfreg.sampling.text import model_sampler_config

        options = {**self.settings.defaults, **{k: body[k] for k in SAMPLER_FIELDS if k in body}}
        try:
            return model_sampler_config(self.model, **options)
        except (ValueError, TypeError) as exc:
            name = str(exc).split(":", 1)[0]
            raise RequestError(str(exc), name if name in SAMPLER_FIELDS else None) from None

    def check_common(self, body: dict) -> None:
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        name = body.get("model")
        if name is not None and name != self.settings.model_name:
            raise RequestError(f"The model '{name}' does not exist; this server serves '{self.settings.model_name}'",
                               "model", "model_not_found", status=404)

    async def run(self, texts: list[str], body: dict, watch: Any = None
                  ) -> tuple[list[dict], list[tuple[str, str, int]], int]:
        """Generate every (prompt, sample) of a request: (records in key order, their (text, finish_reason,
        completion tokens), prompt tokens). The tokenizer is used in the worker thread only. ``watch``: an
        elfreg.sampling.watch.Watch of the request's rows (the trajectory stream)."""
        n = _int(body, "n", 1)
        if len(texts) * n > MAX_ROWS_PER_REQUEST:
            raise RequestError(f"n: {len(texts)} prompts x n={n} is over {MAX_ROWS_PER_REQUEST} answers per request",
                               "n")
        name = "max_tokens" if "max_tokens" in body else "max_completion_tokens"
        max_tokens = _int(body, name, 0) if body.get(name) is not None else None
        stops = _stops(body)
        cfg = self.sampler_config(body)
        tok = self.model.tokenizer

        def post(records: list[dict]) -> tuple:
            answers = [_finish(lambda ids: tok.decode(ids, skip_special_tokens=True), r["response_token_ids"],
                               max_tokens, stops) for r in records]
            return records, answers, sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)

        try:
            return await asyncio.wrap_future(self.batcher.submit(Job(texts, n, cfg, post, watch=watch)))
        except ValueError as exc:   # a prompt too long or empty (the batcher checks with the model's tokenizer)
            code = "context_length_exceeded" if "tokens" in str(exc) else None
            raise RequestError(str(exc), "messages" if "messages" in body else "prompt", code) from None

    async def completions(self, body: dict) -> dict:
        self.check_common(body)
        prompt = body.get("prompt")
        texts = [prompt] if isinstance(prompt, str) else prompt
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise RequestError("prompt: a string or a non-empty list of strings (token-id prompts are not supported)",
                               "prompt")
        fmt = body.get("prompt_format", "raw")
        if fmt not in ("raw", "template"):
            raise RequestError(f"prompt_format: 'raw' (default) or 'template', got {fmt!r}", "prompt_format")
        if fmt == "template":
            texts = self.model.format_prompts(texts)
        if check_stream(body):
            return await stream_response(self, "text_completion", texts, body)
        records, answers, prompt_tokens = await self.run(texts, body)
        choices = [{"index": i, "text": text, "finish_reason": reason, "logprobs": None}
                   for i, (text, reason, _) in enumerate(answers)]
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.settings.model_name, "choices": choices,
                "usage": _usage(prompt_tokens, answers), **self._extra(records)}

    async def chat(self, body: dict) -> dict:
        self.check_common(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages: a non-empty list of messages", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise RequestError(f"messages[{i}]: an object with a string 'content'", "messages")
        if len(messages) != 1 or messages[0].get("role") != "user":
            roles = [m.get("role") for m in messages]
            raise RequestError(f"messages: this model's prompt template has one question, so a chat is one user "
                               f"message; got roles {roles}", "messages")
        texts = self.model.format_prompts([messages[0]["content"]])
        if check_stream(body):
            return await stream_response(self, "chat.completion", texts, body)
        records, answers, prompt_tokens = await self.run(texts, body)
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

    def health(self) -> dict:
        return {"status": "ok", "model": self.settings.model_name, "queued": self.batcher.queue.qsize(),
                "batches": self.batcher.batches}


def create_app(server: Server) -> Any:
    """The FastAPI application over ``server``."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        server.batcher.close()

    app = FastAPI(title="elfreg", description="OpenAI-compatible API of an ELF / ELF-REG model", lifespan=lifespan)

    def error(exc: RequestError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    async def body_of(request: Request) -> dict:
        import json

        try:
            return json.loads(await request.body() or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(f"the request body is not valid JSON ({exc})") from None

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
        return error(RequestError(str(exc)))

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await server.completions(await body_of(request))

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        return await server.chat(await body_of(request))

    @app.get("/v1/models")
    async def models() -> Any:
        return server.models()

    @app.get("/health")
    async def health() -> Any:
        return server.health()

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
