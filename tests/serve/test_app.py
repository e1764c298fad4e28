"""`elfreg serve` with the real openai client against a served demo-size model: the same answers as
ElfModel.generate under concurrent requests (batch invariance), OpenAI-style errors."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai", reason="the serving tests need the test extras (openai, fastapi, uvicorn)")
pytest.importorskip("fastapi", reason="elfreg[serve] is not installed")
pytest.importorskip("uvicorn", reason="elfreg[serve] is not installed")

from elfreg.serve.app import Server, ServeSettings, served  # noqa: E402

QUESTIONS = ["what is 3 plus 4 ?", "sort a b c", "what is 9 minus 2 ?", "copy d", "2 times 3", "reverse a b c d",
             "what is the answer ?", "what is 1 plus 2 plus 3 ?"]
NFE = {"nfe": 6, "rho": 2}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def live(model):
    """The server (a 300 ms window: concurrent requests share batches) and an openai client."""
    server = Server(model, ServeSettings("tiny", defaults=dict(NFE), max_batch=16, max_wait_ms=300))
    with served(server) as url:
        yield server, openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), url


def test_concurrent_chat_requests_answer_as_generate_does(model, live):
    server, client, _ = live
    before = len(server.batcher.batch_rows)
    jobs = [(q, seed, n) for seed in (0, 5) for q in QUESTIONS for n in (1 if seed else 2,)]

    def ask(job):
        q, seed, n = job
        r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": q}], n=n, seed=seed)
        return [c.message.content for c in sorted(r.choices, key=lambda c: c.index)]

    with ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(ask, jobs))
    for (q, seed, n), answers in zip(jobs, got):
        assert answers == model.generate([q], seed=seed, samples=n, **NFE)[0] if n > 1 else \
            answers == model.generate([q], seed=seed, **NFE), (q, seed)
    rows = server.batcher.batch_rows[before:]
    assert max(rows) > 2, f"no two requests shared a batch: {rows}"   # batched, and still each alone's answer


def test_completions_take_raw_prompts_and_a_list(model, live):
    _, client, _ = live
    raw = model.format_prompts(QUESTIONS[:3])
    r = client.completions.create(model="tiny", prompt=raw, seed=2, extra_body={"nfe": 8, "rho": 2})
    assert [c.text for c in r.choices] == model.generate(QUESTIONS[:3], seed=2, nfe=8, rho=2)
    assert r.usage.prompt_tokens == sum(len(ids) for ids in model.prompt_token_ids(QUESTIONS[:3]))
    templated = client.completions.create(model="tiny", prompt=QUESTIONS[:3], seed=2,
                                          extra_body={"nfe": 8, "rho": 2, "prompt_format": "template"})
    assert [c.text for c in templated.choices] == [c.text for c in r.choices]
    assert r.model_extra["elfreg"]["nfe_spent"] == [8, 8, 8] and r.model_extra["elfreg"]["sampler"] == "early-stop"


def test_sampler_settings_come_from_extra_fields_with_the_servers_defaults(model, live):
    _, client, _ = live
    r = client.completions.create(model="tiny", prompt=model.format_prompts(["copy d"]),
                                  extra_body={"sampler": "full-span", "nfe": 4})
    assert r.model_extra["elfreg"]["sampler"] == "full-span" and r.model_extra["elfreg"]["nfe"] == 4
    assert r.choices[0].text == model.generate(["copy d"], sampler="full-span", nfe=4, rho=2)[0]
    default = client.completions.create(model="tiny", prompt=model.format_prompts(["copy d"]))
    assert default.model_extra["elfreg"]["nfe"] == 6   # the server's default (its --nfe)


def test_max_tokens_and_stop_cut_the_answer(model, live):
    _, client, _ = live
    full = client.completions.create(model="tiny", prompt=model.format_prompts(["sort a b c"]))
    assert full.choices[0].finish_reason == "stop" and full.usage.completion_tokens >= 2
    short = client.completions.create(model="tiny", prompt=model.format_prompts(["sort a b c"]), max_tokens=1)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 1
    assert full.choices[0].text.startswith(short.choices[0].text)


@pytest.mark.parametrize("call, error, status, param, code", [
    (lambda c: c.completions.create(model="tiny", prompt=" ".join(["a"] * 40)), "BadRequestError", 400, "prompt",
     "context_length_exceeded"),
    (lambda c: c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "a " * 40}]),
     "BadRequestError", 400, "messages", "context_length_exceeded"),
    (lambda c: c.completions.create(model="gpt-4", prompt="x"), "NotFoundError", 404, "model", "model_not_found"),
    (lambda c: c.completions.create(model="tiny", prompt="x", extra_body={"nfe": 1}), "BadRequestError", 400, "nfe",
     None),
    (lambda c: c.completions.create(model="tiny", prompt="x", n=0), "BadRequestError", 400, "n", None),
    (lambda c: c.chat.completions.create(model="tiny", messages=[{"role": "system", "content": "be brief"},
                                                                 {"role": "user", "content": "copy d"}]),
     "BadRequestError", 400, "messages", None),
])
def test_bad_requests_get_openai_errors(live, call, error, status, param, code):
    _, client, _ = live
    with pytest.raises(getattr(openai, error)) as info:
        call(client)
    assert info.value.status_code == status
    body = info.value.body
    assert body["param"] == param and body["code"] == code and body["type"]


def _http(method, url, data=None, headers=None, timeout=30):
    """(status, JSON body) of a plain HTTP request (errors included; a non-JSON body fails the test)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_models_health_and_malformed_bodies(live):
    server, client, url = live
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert _http("GET", f"{url}/health") == (200, {"status": "ok", "model": "tiny", "queued": 0,
                                                   "batches": server.batcher.batches, "restarts": 0})
    status, body = _http("POST", f"{url}/v1/completions", b"{not json")
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    status, body = _http("GET", f"{url}/v1/nothing")
    assert status == 404 and body["error"]["type"] == "not_found_error"
    status, body = _http("POST", f"{url}/v1/completions", json.dumps({"prompt": []}).encode())
    assert status == 400 and body["error"]["param"] == "prompt"


@pytest.mark.signals
def test_elfreg_serve_command_serves_until_stopped(tmp_path, tiny_lm_dir, model):
    """The command as a user runs it: a process on a free port, one request, then SIGINT."""
    import os
    import re
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "elfreg.cli", "serve", "--model", str(model.folder), "--port", "0",
                             "--nfe", "6", "--rho", "2", "--served-model-name", "tiny", "--api-key", "k3y"],
                            env={**os.environ, "PYTHONPATH": str(repo / "src")}, stderr=subprocess.PIPE, text=True)
    try:
        port, seen, deadline = None, [], time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
            assert line or proc.poll() is None, "".join(seen)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k3y", max_retries=0)
        r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "copy d"}])
        with pytest.raises(openai.AuthenticationError):
            client.with_options(api_key="other").models.list()
        assert r.choices[0].message.content == model.generate(["copy d"], nfe=6, rho=2)[0]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_elfreg_serve_refuses_bad_flags_before_loading(tmp_path, capsys):
    from elfreg.cli import main

    assert main(["serve", "--model", str(tmp_path), "--port", "70000"]) == 2
    assert "argument --port: need an integer in [0, 65535] (0: any free port), got 70000" in capsys.readouterr().err


# -- hostile requests: each is that request's error; the server goes on -------------------------------------------
def _post(url, path, body, **kw):
    return _http("POST", f"{url}{path}", json.dumps(body).encode(), **kw)


def _chat(q, **fields):
    return {"model": "tiny", "messages": [{"role": "user", "content": q}], **fields}


def _answer_is_generates(model, url, q="copy d", timeout=30):
    status, body = _post(url, "/v1/chat/completions", _chat(q), timeout=timeout)
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == model.generate([q], **NFE)[0]


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", _chat("\ud800 lone surrogate"), "messages"),
    ("/v1/completions", {"model": "tiny", "prompt": "a \udfff b"}, "prompt"),
    ("/v1/completions", {"model": "tiny", "prompt": ["fine", "\ud800"]}, "prompt"),
    ("/v1/chat/completions", _chat("copy d", drop_reg=[1]), "drop_reg"),
    ("/v1/chat/completions", _chat("copy d", rho="2"), "rho"),
    ("/v1/chat/completions", _chat("copy d", nfe=6.5), "nfe"),
    ("/v1/chat/completions", _chat("copy d", w=True), "w"),
    ("/v1/chat/completions", _chat("copy d", sampler=["full-span"]), "sampler"),
    ("/v1/chat/completions", _chat("copy d", seed={"a": 1}), "seed"),
    ("/v1/chat/completions", _chat("copy d", stream="yes"), "stream"),
    ("/v1/chat/completions", _chat("copy d", stop=["\ud800"]), "stop"),
    ("/v1/chat/completions", {"model": ["tiny"], "messages": [{"role": "user", "content": "x"}]}, "model"),
])
def test_requests_that_killed_the_worker_are_their_own_errors(model, live, path, body, param):
    """A lone surrogate, a list where a flag goes, a string where a number goes: 400 naming the field, and the
    worker still answers the next request as ElfModel.generate does."""
    _, _, url = live
    status, got = _post(url, path, body)
    assert status == 400 and got["error"]["param"] == param, got
    _answer_is_generates(model, url)


NULLABLE = ("seed", "n", "max_tokens", "stop", "model", "stream", "prompt_format", "nfe", "rho", "p", "eta", "w",
            "sigma", "t_eps", "p_mean", "p_std", "grid", "sampler", "drop_reg", "task", "extract", "check_every")


def test_null_fields_take_the_servers_defaults(model, live):
    _, _, url = live
    want = model.generate(["copy d"], **NFE)[0]
    for name in NULLABLE:
        status, body = _post(url, "/v1/completions", {"model": "tiny", "prompt": model.format_prompts(["copy d"]),
                                                       name: None})
        assert status == 200 and body["choices"][0]["text"] == want, (name, body)
    status, body = _post(url, "/v1/chat/completions", {**_chat("copy d"), **{k: None for k in NULLABLE}})
    assert status == 200 and body["choices"][0]["message"]["content"] == want, body
    for name in ("prompt", "messages"):   # no default: refused, named
        status, body = _post(url, f"/v1/{'chat/' if name == 'messages' else ''}completions", {name: None})
        assert status == 400 and body["error"]["param"] == name


@pytest.mark.parametrize("raw, says", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"prompt": "x", "n": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (b'{"prompt": "x", "w": NaN}', "NaN"),
    (b'{"prompt": "x", "rho": Infinity}', "Infinity"),
    (b'{"prompt": "\\xff"}'.replace(b"\\xff", b"\xff"), "not valid JSON"),
])
def test_malformed_bodies_are_json_errors(model, live, raw, says):
    _, _, url = live
    status, body = _http("POST", f"{url}/v1/completions", raw)
    assert status == 400 and says in body["error"]["message"], body
    _answer_is_generates(model, url)


def test_huge_integers_in_range_checked_fields_are_refused_by_name(live):
    _, _, url = live
    for name in ("n", "nfe", "seed", "rho", "max_tokens"):
        status, body = _post(url, "/v1/completions", {"prompt": "x", name: 10 ** 4000})
        assert status == 400 and body["error"]["param"] == name and len(body["error"]["message"]) < 300, body


def _rss_bytes():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.parametrize("limit, status, code", [(None, 413, "request_too_large"),
                                                  (64 << 20, 400, "context_length_exceeded")])
def test_a_10mb_body_is_refused_at_once_while_a_normal_request_answers(model, limit, status, code):
    """Over the body limit: 413 before the body is read whole; under a raised limit, a 10 MB prompt is refused by its
    length in characters before any tokenizing. Either way within 2 s, the request beside it answers, the memory
    stays put."""
    settings = ServeSettings("tiny", defaults=dict(NFE), max_batch=16, max_wait_ms=0,
                             **({"max_body_bytes": limit} if limit else {}))
    with served(Server(model, settings)) as url:
        _answer_is_generates(model, url)   # warm
        t0 = time.perf_counter()
        _answer_is_generates(model, url)
        solo = time.perf_counter() - t0
        rss = _rss_bytes()
        with ThreadPoolExecutor(2) as pool:
            t0 = time.perf_counter()
            big = pool.submit(_post, url, "/v1/completions", {"model": "tiny", "prompt": "a " * 5_000_000})
            beside = pool.submit(_answer_is_generates, model, url, "copy d", 30)
            got, body = big.result()
            refused_in = time.perf_counter() - t0
            beside.result()
            beside_in = time.perf_counter() - t0
        assert got == status and body["error"]["code"] == code, body
        assert refused_in < 2, refused_in
        assert beside_in < 2 + 5 * solo, (beside_in, solo)
        assert _rss_bytes() - rss < 200 << 20


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(model):
    import http.client

    with served(Server(model, ServeSettings("tiny", defaults=dict(NFE), max_body_bytes=1000))) as url:
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/v1/completions", body=iter([b'{"prompt": "', b"x" * 2000, b'"}']),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        r = conn.getresponse()
        assert r.status == 413 and json.loads(r.read())["error"]["code"] == "request_too_large"


def test_the_work_budget_refuses_rows_times_nfe_beyond_it(model, live):
    _, _, url = live
    status, body = _post(url, "/v1/completions", {"prompt": "x", "n": 2, "nfe": 65536, "rho": 1})
    assert status == 400 and body["error"]["code"] == "work_budget_exceeded" and body["error"]["param"] == "nfe"
    assert "131072" in body["error"]["message"]
    _answer_is_generates(model, url)


def _raw_request(url, body):
    """A socket that has sent a chat request (its answer unread)."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
    return sock


def _wait_for(check, seconds=30):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_disconnect_cancels_the_work_and_a_full_queue_answers_429(model):
    """A long request (65535 network calls) occupies the worker; one more waits (the queue holds one), the next gets
    429 and a prompt too long its 400 meanwhile. The long one's client goes away: its batch stops before its next
    network call, and the waiting one runs."""
    settings = ServeSettings("tiny", defaults=dict(NFE), max_batch=16, max_wait_ms=0, max_queue=1, max_work=1 << 20)
    server = Server(model, settings)
    with served(server) as url:
        long = _raw_request(url, _chat("copy d", nfe=65535, rho=1))
        _wait_for(lambda: server.batcher.calls > 2)
        waiting = _raw_request(url, _chat("copy d"))
        _wait_for(lambda: server.batcher.queue.qsize() == 1)
        status, body = _post(url, "/v1/chat/completions", _chat("sort a b c"))
        assert status == 429 and body["error"]["code"] == "queue_full", body
        # prompts are tokenized off the worker: a prompt too long is refused while the worker is busy
        status, body = _post(url, "/v1/chat/completions", _chat("a " * 40))
        assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
        long.close()
        _wait_for(lambda: server.batcher.cancelled == 1, 10)
        assert server.batcher.calls < 65535
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = waiting.recv(65536)
            assert chunk, reply
            reply += chunk
        waiting.close()
        assert reply.startswith(b"HTTP/1.1 200")
        got = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert got["choices"][0]["message"]["content"] == model.generate(["copy d"], **NFE)[0]
        assert server.batcher.batches >= 1 and server.batcher.alive


def test_a_dead_worker_makes_health_fail_and_is_restarted(model):
    class Dies(BaseException):
        pass

    server = Server(model, ServeSettings("tiny", defaults=dict(NFE), max_wait_ms=0))
    real = server.batcher.make_pipeline

    def once(cfg):
        server.batcher.make_pipeline = real
        raise Dies("the worker thread dies")

    server.batcher.make_pipeline = once
    with served(server) as url:
        status, body = _post(url, "/v1/chat/completions", _chat("copy d"))
        assert status == 500 and body["error"]["type"] == "server_error", body
        status, body = _http("GET", f"{url}/health")
        assert status == 503 and "Dies: the worker thread dies" in body["status"], body
        status, body = _http("GET", f"{url}/health")
        assert status == 200 and body["restarts"] == 1
        _answer_is_generates(model, url)


def test_an_api_key_is_asked_for_on_v1_but_not_health(model):
    with served(Server(model, ServeSettings("tiny", defaults=dict(NFE), api_key="s3cret"))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
        status, body = _post(url, "/v1/chat/completions", _chat("copy d"))
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        good = openai.OpenAI(base_url=f"{url}/v1", api_key="s3cret", max_retries=0)
        r = good.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "copy d"}])
        assert r.choices[0].message.content == model.generate(["copy d"], **NFE)[0]
        assert _http("GET", f"{url}/health")[0] == 200


def test_each_request_is_logged_and_counted(model, live, caplog):
    import logging

    server, _, url = live
    before = _http("GET", f"{url}/metrics")[1]
    with caplog.at_level(logging.INFO, logger="elfreg.serve"):
        _post(url, "/v1/chat/completions", _chat("copy d", n=2))
        _post(url, "/v1/chat/completions", _chat("copy d", n=0))
    lines = [r.getMessage() for r in caplog.records if r.name == "elfreg.serve"]
    assert any(line.startswith("POST /v1/chat/completions 200 ") and "rows=2 nfe=12" in line for line in lines), lines
    assert any(line.startswith("POST /v1/chat/completions 400 ") and "n: need" in line for line in lines), lines
    after = _http("GET", f"{url}/metrics")[1]
    assert after["requests"] - before["requests"] == 2 and after["nfe_spent"] - before["nfe_spent"] == 12
    assert after["responses"]["400"] - before["responses"].get("400", 0) == 1


@pytest.mark.parametrize("flag, value, says", [("--max-work", "1", "argument --max-work: need an integer in [2, "),
                                               ("--max-queue", "0", "argument --max-queue: need an integer in [1, "),
                                               ("--max-body-bytes", "10", "argument --max-body-bytes: need an")])
def test_elfreg_serve_refuses_bad_bounds_before_loading(tmp_path, capsys, flag, value, says):
    from elfreg.cli import main

    assert main(["serve", "--model", str(tmp_path), flag, value]) == 2
    assert says in capsys.readouterr().err
