"""``stream: true`` for ``elfreg serve``: OpenAI's Server-Sent Events, and the denoising trajectory on request.

A diffusion model makes its whole answer at once, so a stream is, per choice, OpenAI's usual chunks: (chat) a role
chunk, one content chunk when the answer is ready, a chunk with its ``finish_reason``; then, with
``stream_options: {"include_usage": true}``, a usage chunk (choices empty; every other chunk has ``"usage": null``);
then ``data: [DONE]``. The answers are those of the same request without ``stream``.

The extra field ``"elfreg": {"trajectory": true, "every": k}`` also streams, while the answer is being made, a chunk
at every k-th denoising step (and at the path's last) with no choices and ``"elfreg": {"views": [...]}``: per choice
its ``index``, the ``step`` and planned ``steps`` (denoiser calls), the time ``t``, the ``text`` decoded from its
current clean prediction, its ``tokens`` and per token ``stable`` (the same token as in that choice's last view).
Those decoder calls are counted apart (``view_calls``, never in ``nfe_spent``) and change no answer. The last chunk
before ``[DONE]`` carries elfreg's fields (``nfe_spent``, ``view_calls``, the sampler settings, and each choice's
``answer`` as the request's task extractor reads it).

A request refused before its generation starts (a bad field, a prompt over the model's limit) is an HTTP error as
without ``stream``; a failure after the stream began is a last ``data: {"error": ...}`` event (OpenAI's clients
raise it).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from elfreg.sampling.watch import EVERY, StepView, Watch
from elfreg.serve.validate import Generation, RequestError, _short

if TYPE_CHECKING:
    from elfreg.serve.app import Server

TRAJECTORY_KEYS = ("trajectory", "every")


def trajectory_every(body: dict) -> int | None:
    """k of the request's ``"elfreg": {"trajectory": true, "every": k}`` (default 1), None without a trajectory."""
    ext = body.get("elfreg")
    if ext is None:
        return None
    if not isinstance(ext, dict) or set(ext) - set(TRAJECTORY_KEYS):
        raise RequestError(f'elfreg: an object with the fields {", ".join(TRAJECTORY_KEYS)} '
                      f'(e.g. {{"trajectory": true, "every": 4}}), got {json.dumps(ext)[:200]}', "elfreg")
    on = ext.get("trajectory", False)
    if not isinstance(on, bool):
        raise RequestError(f"elfreg.trajectory: true or false, got {_short(on)}", "elfreg.trajectory")
    every = ext.get("every", 1)
    problem = EVERY.problem(every)
    if problem:
        raise RequestError(f"elfreg.every: {problem}", "elfreg.every")
    return every if on else None


def check_stream(body: dict) -> bool:
    """Whether the request streams, its stream fields checked (a RequestError naming the field). For a body that
    ``validate.check_common`` passed: a JSON object whose ``stream`` is a boolean or null."""
    stream = body.get("stream")
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise RequestError("stream_options: only allowed with stream: true", "stream_options")
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise RequestError('stream_options: an object like {"include_usage": true}', "stream_options")
    if trajectory_every(body) is not None and not stream:
        raise RequestError("elfreg.trajectory: needs stream: true (the views are sent while the answer is made)",
                      "elfreg.trajectory")
    return bool(stream)


def sse(data: Any) -> str:
    """One Server-Sent Event carrying ``data`` as JSON."""
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


def view_fields(view: StepView, samples: int) -> dict:
    """A view as its stream fields: the OpenAI choice index (prompt-major, as the answers) and what it shows."""
    return {"index": view.prompt_index * samples + view.sample_index, "step": view.step, "steps": view.steps,
            "t": view.t, "text": view.text, "tokens": view.tokens, "stable": view.stable}


class ChunkMaker:
    """The chunks of one streamed response (chat.completion.chunk or text_completion)."""

    def __init__(self, kind: str, model: str, include_usage: bool) -> None:
        self.chat = kind == "chat.completion"
        self.id = f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.object = "chat.completion.chunk" if self.chat else "text_completion"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def chunk(self, choices: list[dict], **extra: Any) -> dict:
        body = {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                "choices": choices}
        if self.include_usage:
            body["usage"] = None
        return {**body, **extra}

    def choice(self, index: int, text: str | None, finish_reason: str | None = None, role: bool = False) -> dict:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else ({} if text is None else {"content": text})
            return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish_reason}


async def stream_response(server: "Server", kind: str, gen: Generation, body: dict,
                          gone: Callable[[], Awaitable[None]] | None = None) -> Any:
    """The streamed answer of a checked request (``kind`` chat.completion or text_completion): a StreamingResponse,
    or the request's RequestError when it is refused before its generation starts. A client that leaves mid-stream
    cancels the request's rows before their next network call, as without a stream: ``gone()`` finishes when the
    client disconnects (before the first chunk), the stream's end tells after."""
    from fastapi.responses import StreamingResponse

    from elfreg.serve.app import _usage

    every = trajectory_every(body)
    samples = gen.n
    make = ChunkMaker(kind, server.settings.model_name, bool((body.get("stream_options") or {}).get("include_usage")))
    loop = asyncio.get_running_loop()
    views: asyncio.Queue[list[StepView]] = asyncio.Queue()   # at most one item per step of the request's batches
    watch = Watch(lambda vs: loop.call_soon_threadsafe(views.put_nowait, vs), every) if every else None
    left = asyncio.Event()   # set when the stream ends before the answer: the client went away

    async def until_gone() -> None:
        waits = [asyncio.ensure_future(left.wait())] + ([asyncio.ensure_future(gone())] if gone else [])
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    task = asyncio.ensure_future(server.run(gen, until_gone, watch))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())   # retrieved even when the stream was left
    pending: asyncio.Future | None = asyncio.ensure_future(views.get())
    # the first view or the end: a request refused before its generation is an HTTP error, not a broken stream
    await asyncio.wait({task, pending}, return_when=asyncio.FIRST_COMPLETED)
    if task.done() and task.exception() is not None and not pending.done():
        pending.cancel()
        raise task.exception()

    def view_chunk(vs: list[StepView]) -> str:
        return sse(make.chunk([], elfreg={"views": [view_fields(v, samples) for v in vs]}))

    async def events() -> AsyncIterator[str]:
        nonlocal pending
        try:
            if make.chat:
                for i in range(len(gen.texts) * samples):
                    yield sse(make.chunk([make.choice(i, None, role=True)]))
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(views.get())
                await asyncio.wait({task, pending}, return_when=asyncio.FIRST_COMPLETED)
                if pending.done():
                    yield view_chunk(pending.result())
                    pending = None
                elif task.done():
                    break
            pending.cancel()
            pending = None
            while not views.empty():   # views made before the end reach the loop before it
                yield view_chunk(views.get_nowait())
            try:
                records, answers, prompt_tokens = task.result()
            except RequestError as exc:
                yield sse(exc.body())
                return
            except Exception as exc:   # the request's failure, reported in its stream; the server goes on
                yield sse({"error": {"message": f"generation failed: {exc}", "type": "server_error", "param": None,
                                     "code": None}})
                return
            extra = _stream_extra(server, gen, records, answers)
            last = len(answers) - 1
            for i, (text, reason, _) in enumerate(answers):
                yield sse(make.chunk([make.choice(i, text)]))
                fields = {"elfreg": extra} if i == last and not make.include_usage else {}
                yield sse(make.chunk([make.choice(i, "" if not make.chat else None, reason)], **fields))
            if make.include_usage:
                yield sse({**make.chunk([]), "usage": _usage(prompt_tokens, answers), "elfreg": extra})
            yield "data: [DONE]\n\n"
        finally:
            if pending is not None:
                pending.cancel()
            if not task.done():
                left.set()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _stream_extra(server: "Server", gen: Generation, records: list[dict], answers: list[tuple[str, str, int]]
                  ) -> dict:
    """elfreg's fields of a streamed response: those of the plain response, the view decoder calls per choice and
    each choice's answer as the request's extractor reads it."""
    from elfreg.tasks.answers import extractor

    read = extractor(server.sampler_config(gen.options).extract)
    extra = server._extra(records)["elfreg"]
    return {**extra, "view_calls": [r.get("view_calls", 0) for r in records],
            "answer": [read(text) for text, _, _ in answers]}
