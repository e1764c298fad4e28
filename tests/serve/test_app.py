"""`elfreg serve` with the real openai client against a served demo-size model: the same answers as
ElfModel.generate under concurrent requests (batch invariance), OpenAI-style errors."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from elfreg.pretrained import ElfModel
from helpers import make_tiny_elf_model

openai = pytest.importorskip("openai", reason="the serving tests need the test extras (openai, fastapi, uvicorn)")
pytest.importorskip("fastapi", reason="elfreg[serve] is not installed")
pytest.importorskip("uvicorn", reason="elfreg[serve] is not installed")

from elfreg.serve.app import Server, ServeSettings, served  # noqa: E402

QUESTIONS = ["what is 3 plus 4 ?", "sort a b c", "what is 9 minus 2 ?", "copy d", "2 times 3", "reverse a b c d",
             "what is the answer ?", "what is 1 plus 2 plus 3 ?"]
NFE = {"nfe": 6, "rho": 2}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model(tmp_path_factory, tiny_lm_dir):
    return ElfModel.from_pretrained(make_tiny_elf_model(tmp_path_factory.mktemp("serve") / "model", tiny_lm_dir))


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
    (lambda c: c.completions.create(model="tiny", prompt="x", stream=True), "BadRequestError", 400, "stream", None),
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


def _http(method, url, data=None):
    """(status, JSON body) of a plain HTTP request (errors included)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
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
                             "--nfe", "6", "--rho", "2", "--served-model-name", "tiny"],
                            env={**os.environ, "PYTHONPATH": str(repo / "src")}, stderr=subprocess.PIPE, text=True)
    try:
        port, seen, deadline = None, [], time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
            assert line or proc.poll() is None, "".join(seen)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        r = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "copy d"}])
        assert r.choices[0].message.content == model.generate(["copy d"], nfe=6, rho=2)[0]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_elfreg_serve_refuses_bad_flags_before_loading(tmp_path, capsys):
    from elfreg.cli import main

    assert main(["serve", "--model", str(tmp_path), "--port", "70000"]) == 2
    assert "argument --port: need an integer in [0, 65535] (0: any free port), got 70000" in capsys.readouterr().err
