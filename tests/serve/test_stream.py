"""`stream: true` with the real openai client's streaming API against a served demo-size model: OpenAI's chunks
(role, content, finish_reason, usage, [DONE]) carrying the answers of the same request without streaming, and the
opt-in denoising trajectory (views at every k-th step, counted apart from the NFE, final answer unchanged)."""

import json
import urllib.request

import pytest

openai = pytest.importorskip("openai", reason="the serving tests need the test extras (openai, fastapi, uvicorn)")
pytest.importorskip("fastapi", reason="elfreg[serve] is not installed")
pytest.importorskip("uvicorn", reason="elfreg[serve] is not installed")

from elfreg.serve.app import Server, ServeSettings, served  # noqa: E402

NFE = {"nfe": 6, "rho": 2}
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def live(model):
    server = Server(model, ServeSettings("tiny", defaults=dict(NFE), max_batch=16, max_wait_ms=5))
    with served(server) as url:
        yield server, openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), url


def _chat(question):
    return [{"role": "user", "content": question}]


def test_chat_stream_sends_openais_chunks_with_the_plain_answers(model, live):
    _, client, _ = live
    plain = client.chat.completions.create(model="tiny", messages=_chat("sort a b c"), n=3, seed=4)
    chunks = list(client.chat.completions.create(model="tiny", messages=_chat("sort a b c"), n=3, seed=4,
                                                 stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role == "assistant"]
    assert roles == [0, 1, 2]
    text = {i: "" for i in range(3)}
    reasons = {}
    for c in chunks:
        for ch in c.choices:
            text[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                reasons[ch.index] = ch.finish_reason
    want = sorted(plain.choices, key=lambda c: c.index)
    assert [text[i] for i in range(3)] == [c.message.content for c in want]
    assert [text[i] for i in range(3)] == model.generate(["sort a b c"], seed=4, samples=3, **NFE)[0]
    assert reasons == {c.index: c.finish_reason for c in want}
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == plain.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])
    extra = chunks[-1].model_extra["elfreg"]
    assert extra["nfe_spent"] == [6, 6, 6] and extra["view_calls"] == [0, 0, 0]


def test_completions_stream_takes_a_list_of_prompts_and_no_usage_unless_asked(model, live):
    _, client, _ = live
    raw = model.format_prompts(["copy d", "2 times 3"])
    chunks = list(client.completions.create(model="tiny", prompt=raw, n=2, seed=1, stream=True))
    assert all(c.object == "text_completion" and not getattr(c, "usage", None) for c in chunks)
    text = {}
    for c in chunks:
        for ch in c.choices:
            text[ch.index] = text.get(ch.index, "") + ch.text
    got = [text[i] for i in range(4)]
    assert got == [t for row in model.generate(["copy d", "2 times 3"], seed=1, samples=2, **NFE) for t in row]
    assert sum(1 for c in chunks for ch in c.choices if ch.finish_reason) == 4


def _sse(url, body):
    """The data fields of a streamed response, raw (JSON objects and the final [DONE])."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = [block[len("data: "):] for block in raw.split("\n\n") if block]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


@pytest.mark.parametrize("every", [1, 2])
def test_trajectory_stream_sends_views_then_the_unchanged_answer(model, live, every):
    _, client, url = live
    q = "what is 3 plus 4 ?"
    events = _sse(f"{url}/v1/chat/completions", {"messages": _chat(q), "stream": True, "n": 2, "seed": 7,
                                                 "nfe": 8, "rho": 2, "elfreg": {"trajectory": True, "every": every}})
    views = [v for e in events for v in e.get("elfreg", {}).get("views", [])]
    first_answer = next(i for i, e in enumerate(events) if any(c.get("delta", {}).get("content") for c in e["choices"]))
    assert all("views" not in e.get("elfreg", {}) for e in events[first_answer:])   # views come before the answer
    steps = [1, 2, 3, 4, 5, 6, 7] if every == 1 else [2, 4, 6, 7]
    for index in (0, 1):
        mine = [v for v in views if v["index"] == index]
        assert [v["step"] for v in mine] == steps and all(v["steps"] == 7 for v in mine)
        assert [v["t"] for v in mine] == sorted(v["t"] for v in mine)
        assert all(len(v["tokens"]) == len(v["stable"]) for v in mine) and not any(mine[0]["stable"])
    answers = {c["index"]: c["delta"]["content"] for e in events for c in e["choices"] if c["delta"].get("content")}
    want = model.generate([q], seed=7, samples=2, nfe=8, rho=2)[0]
    assert [answers[0], answers[1]] == want                    # bit for bit the answer without the stream
    assert [v["text"] for v in views if v["step"] == 7] == want   # early-stop decodes its last clean prediction
    extra = events[-1]["elfreg"]
    assert extra["nfe_spent"] == [8, 8] and extra["view_calls"] == [len(steps)] * 2   # apart from the NFE
    # the same with the openai client: the views are extra fields of chunks without choices
    chunks = list(client.chat.completions.create(model="tiny", messages=_chat(q), seed=7, stream=True,
                                                 extra_body={"nfe": 8, "rho": 2,
                                                             "elfreg": {"trajectory": True, "every": every}}))
    seen = [v for c in chunks if not c.choices for v in (c.model_extra.get("elfreg") or {}).get("views", [])]
    assert [v["step"] for v in seen] == steps
    assert "".join(ch.delta.content or "" for c in chunks for ch in c.choices) == want[0]


@pytest.mark.parametrize("body, param", [
    ({"stream": True, "messages": [{"role": "user", "content": "a " * 40}]}, "messages"),
    ({"stream": "yes", "messages": [{"role": "user", "content": "x"}]}, "stream"),
    ({"stream_options": {"include_usage": True}, "messages": [{"role": "user", "content": "x"}]}, "stream_options"),
    ({"elfreg": {"trajectory": True}, "messages": [{"role": "user", "content": "x"}]}, "elfreg.trajectory"),
    ({"stream": True, "elfreg": {"trajectory": True, "every": 0}, "messages": [{"role": "user", "content": "x"}]},
     "elfreg.every"),
    ({"stream": True, "elfreg": {"trajectry": True}, "messages": [{"role": "user", "content": "x"}]}, "elfreg"),
    ({"stream": True, "elfreg": {"trajectory": True}, "nfe": 1, "messages": [{"role": "user", "content": "x"}]},
     "nfe"),
])
def test_a_refused_stream_is_an_http_error_and_the_server_goes_on(model, live, body, param):
    import urllib.error

    _, client, url = live
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=60)
    assert info.value.code == 400 and json.loads(info.value.read())["error"]["param"] == param
    r = client.chat.completions.create(model="tiny", messages=_chat("copy d"), stream=True)
    assert "".join(ch.delta.content or "" for c in r for ch in c.choices) == model.generate(["copy d"], **NFE)[0]


def test_the_openai_client_raises_on_a_refused_stream(live):
    _, client, _ = live
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=_chat("a " * 40), stream=True)
    assert info.value.body["code"] == "context_length_exceeded"


def test_a_client_leaving_mid_stream_harms_no_other_request(model, live):
    import http.client

    server, client, url = live
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps(
        {"messages": _chat("reverse a b c d"), "stream": True, "nfe": 12, "rho": 2,
         "elfreg": {"trajectory": True, "every": 1}}), {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200 and r.read(64)   # the first chunk came, then the client goes
    conn.close()
    chunks = list(client.chat.completions.create(model="tiny", messages=_chat("copy d"), stream=True))
    assert "".join(ch.delta.content or "" for c in chunks for ch in c.choices) == model.generate(["copy d"], **NFE)[0]
    status, body = 0, {}
    with urllib.request.urlopen(f"{url}/health", timeout=30) as h:
        status, body = h.status, json.loads(h.read())
    assert status == 200 and body["status"] == "ok"


def test_a_client_leaving_mid_stream_cancels_its_work(model):
    """A long streamed request (65,535 network calls) whose client goes while it runs (a plain stream's first chunk
    comes with the answer): its batch stops before the next network call, as a plain request's does, and the next
    request is answered."""
    import http.client
    import time

    server = Server(model, ServeSettings("tiny", defaults=dict(NFE), max_batch=16, max_wait_ms=0))
    with served(server) as url:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request("POST", "/v1/chat/completions", json.dumps(
            {"messages": _chat("copy d"), "stream": True, "nfe": 65535, "rho": 1}), {"Content-Type": "application/json"})
        deadline = time.monotonic() + 60
        while server.batcher.calls < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        conn.close()
        while server.batcher.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.batcher.cancelled == 1 and server.batcher.calls < 65535
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        r = client.chat.completions.create(model="tiny", messages=_chat("copy d"))
        assert r.choices[0].message.content == model.generate(["copy d"], **NFE)[0]
