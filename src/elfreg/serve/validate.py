"""A request body of ``elfreg serve``, checked before anything of it is queued: the JSON parsed under bounds (no
NaN, no nesting past the parser's limit, no integer past Python's digit limit), every field type-checked (null:
the server's default where OpenAI allows null, and for elfreg's sampler fields), the prompts' text encodable and
no longer than the model could take (a bound in characters, decided without tokenizing), and the request's work
(rows x NFE) within the server's budget. Every refusal is a :class:`RequestError` naming the field."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any

from elfreg.sampling.config import SamplerConfig

# The sampler settings a request may carry as extra fields, by their type (SamplerConfig's, plus the task name).
SAMPLER_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(SamplerConfig)} | {"task": "str"}
SAMPLER_FIELDS = set(SAMPLER_TYPES)
MAX_STOPS = 4   # OpenAI's limit on stop strings


class RequestError(ValueError):
    """A request the server refuses: HTTP status, OpenAI error type, the field, a code."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.code, self.status, self.kind = param, code, status, kind

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the server."""

    max_rows: int = 1024          # prompts x n
    max_work: int = 1 << 16       # rows x NFE (network calls of the request's rows)
    max_prompt_chars: int = 1 << 20   # characters of a prompt text (see prompt_char_bound)


@dataclass
class Generation:
    """A checked completions or chat request: the texts to generate from (formatted for the model) and its options."""

    texts: list[str]
    n: int
    max_tokens: int | None
    stops: list[str]
    options: dict[str, Any] = field(default_factory=dict)   # sampler settings the request gives (server's otherwise)
    param: str = "prompt"                                   # the field a prompt error names


def parse_body(raw: bytes) -> Any:
    """The JSON value of a request body; RequestError for invalid JSON, NaN or Infinity, nesting too deep for the
    parser, an integer of more digits than Python converts."""
    def constant(name: str) -> Any:
        raise RequestError(f"the request body is not valid JSON ({name} is not a JSON number)")

    try:
        return json.loads(raw or b"null", parse_constant=constant)
    except RecursionError:
        raise RequestError("the request body is nested too deeply") from None
    except RequestError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:   # JSONDecodeError, bad UTF-8, integers past the digit limit
        raise RequestError(f"the request body is not valid JSON ({str(exc).splitlines()[0][:200]})") from None


def prompt_char_bound(tokenizer: Any, tokens: int) -> int:
    """Characters beyond which a text cannot be ``tokens`` tokens: each token stands for at most as many characters
    as its longest vocabulary entry (byte-level or SentencePiece spelling), with a factor 4 for normalizers that
    fold several characters into one; so a longer text is refused without tokenizing it."""
    longest = max((len(t) for t in tokenizer.get_vocab()), default=1)
    return 4 * max(1, longest) * max(1, tokens)


def _int(body: dict, key: str, default: int | None, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 2 ** 63:
        raise RequestError(f"{key}: need an integer >= {low}, got {_short(value)}", key)
    return value


def _short(value: Any) -> str:
    """A value for an error message: at most 80 characters (a huge integer by its number of digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(value: Any, name: str, limits: Limits) -> str:
    """A prompt text that UTF-8 can encode (no lone surrogate) and short enough to be tokenized at all."""
    if len(value) > limits.max_prompt_chars:
        raise RequestError(f"{name}: {len(value)} characters, more than any prompt this model takes "
                           f"({limits.max_prompt_chars} characters at most)", name, "context_length_exceeded")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RequestError(f"{name}: text that cannot be encoded as UTF-8 at character {exc.start} "
                               f"({exc.reason})", name) from None
    return value


def _stops(body: dict) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > MAX_STOPS:
        raise RequestError(f"stop: a non-empty string or a list of up to {MAX_STOPS} of them", "stop")
    for s in stops:
        _text(s, "stop", Limits())
    return stops


def sampler_options(body: dict) -> dict[str, Any]:
    """The request's sampler settings, each of its field's type (null or absent: the server's default)."""
    options = {}
    for key, kind in SAMPLER_TYPES.items():
        value = body.get(key)
        if value is None:
            continue
        if kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, str)
        if not ok:
            need = {"bool": "true or false", "int": "an integer", "float": "a number"}.get(kind, "a string")
            raise RequestError(f"{key}: need {need}, got {_short(value)}", key)
        if kind == "int" and not -(2 ** 63) <= value < 2 ** 63:
            raise RequestError(f"{key}: out of range, got {_short(value)}", key)
        options[key] = value
    return options


def check_common(body: Any, model_name: str) -> dict:
    """The checks every generation request shares: a JSON object, this server's model, ``stream`` a boolean (the
    stream's own fields: elfreg.serve.stream.check_stream)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    name = body.get("model")
    if name is not None and not isinstance(name, str):
        raise RequestError(f"model: need a string, got {_short(name)}", "model")
    if name is not None and name != model_name:
        raise RequestError(f"The model '{_short(name)[1:-1]}' does not exist; this server serves '{model_name}'",
                           "model", "model_not_found", status=404)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(f"stream: need true or false, got {_short(stream)}", "stream")
    return body


def _generation(body: dict, texts: list[str], param: str) -> Generation:
    name = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    return Generation(texts, _int(body, "n", 1, 1), _int(body, name, None, 0), _stops(body), sampler_options(body),
                      param)


def completion_request(body: Any, model_name: str, limits: Limits) -> tuple[Generation, str]:
    """A /v1/completions body -> (its generation, the prompt format: 'raw' or 'template')."""
    check_common(body, model_name)
    prompt = body.get("prompt")
    texts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise RequestError("prompt: a string or a non-empty list of strings (token-id prompts are not supported)",
                           "prompt")
    if len(texts) > limits.max_rows:
        raise RequestError(f"prompt: {len(texts)} prompts, over {limits.max_rows} per request", "prompt")
    fmt = body.get("prompt_format")
    if fmt is None:
        fmt = "raw"
    if fmt not in ("raw", "template"):
        raise RequestError(f"prompt_format: 'raw' (default) or 'template', got {_short(fmt)}", "prompt_format")
    return _generation(body, [_text(t, "prompt", limits) for t in texts], "prompt"), fmt


def chat_request(body: Any, model_name: str, limits: Limits) -> Generation:
    """A /v1/chat/completions body -> its generation (texts: the one user message, not yet in the template)."""
    check_common(body, model_name)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: a non-empty list of messages", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            raise RequestError(f"messages[{i}]: an object with a string 'content'", "messages")
    if len(messages) != 1 or messages[0].get("role") != "user":
        roles = [_short(m.get("role")) for m in messages[:8]]
        raise RequestError(f"messages: this model's prompt template has one question, so a chat is one user "
                           f"message; got roles {', '.join(roles)}{', ...' if len(messages) > 8 else ''}", "messages")
    return _generation(body, [_text(messages[0]["content"], "messages", limits)], "messages")


def check_work(gen: Generation, nfe: int, limits: Limits) -> None:
    """Refuse a request over the per-request bounds: rows (prompts x n) and work (rows x NFE)."""
    rows = len(gen.texts) * gen.n
    if rows > limits.max_rows:
        raise RequestError(f"n: {len(gen.texts)} prompts x n={gen.n} is over {limits.max_rows} answers per request",
                           "n")
    if rows * nfe > limits.max_work:
        raise RequestError(f"nfe: {rows} answers x {nfe} NFE = {rows * nfe} network-call rows, over this server's "
                           f"budget of {limits.max_work} per request (--max-work)", "nfe", "work_budget_exceeded")
