"""The playground page at `/`, self-contained, driven in a real headless Chromium against a served demo-size model:
a typed question, the text settling view by view, the final text equal to ElfModel.generate's for the same seed,
a server error shown as a message. Screenshots go to $ELFREG_TEST_ARTIFACTS (default: the test's tmp folder)."""

import os
import re
import time
from pathlib import Path

import pytest


pytest.importorskip("fastapi", reason="elfreg[serve] is not installed")
pytest.importorskip("uvicorn", reason="elfreg[serve] is not installed")

from elfreg.serve.app import Server, ServeSettings, served  # noqa: E402

from ._browser import browser, chromium_path  # noqa: E402

QUESTION = "what is 3 plus 4 ?"
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def url(model):
    server = Server(model, ServeSettings("tiny", defaults={"nfe": 6, "rho": 2}, max_batch=16, max_wait_ms=5))
    with served(server) as base:
        yield base


def test_the_page_is_served_at_the_root_and_fetches_nothing_from_elsewhere(url):
    import urllib.request

    with urllib.request.urlopen(f"{url}/", timeout=30) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/html")
        page = r.read().decode()
    assert "<textarea id=\"prompt\"" in page and "/v1/chat/completions" in page
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page)   # no script, style or font from elsewhere
    assert not re.search(r"fetch\(\s*[\"'`]https?:", page) and "@import" not in page


def test_serve_ui_opens_the_page_once_the_server_answers(url):
    from elfreg.serve.ui import open_when_up, page_url

    opened = []
    open_when_up(f"{url}/", opener=opened.append, timeout=30).join(timeout=60)
    assert opened == [f"{url}/"]
    assert page_url("0.0.0.0", 8000) == "http://127.0.0.1:8000/" and page_url("::", 80) == "http://[::1]:80/"


def test_serve_ui_needs_a_known_port(tmp_path, capsys):
    from elfreg.cli import main

    assert main(["serve", "--model", str(tmp_path), "--port", "0", "--ui"]) == 2
    assert "--ui: needs the server's --port" in capsys.readouterr().err


def _artifacts(tmp_path: Path) -> Path:
    return Path(os.environ.get("ELFREG_TEST_ARTIFACTS") or tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(chromium_path() is None, reason="chromium is not installed (.ci/run installs Debian's package)")
def test_a_typed_question_settles_in_the_browser_to_generates_answer(model, url, tmp_path):
    pytest.importorskip("websockets", reason="the browser test drives Chromium over websockets (test extras)")
    started = time.monotonic()
    shots = _artifacts(tmp_path)
    with browser(tmp_path / "profile") as page:
        page.call("Page.navigate", url=f"{url}/")
        page.wait_for("document.readyState === 'complete' && "
                      "document.getElementById('model').textContent === 'model: tiny'")
        page.type("#prompt", QUESTION)
        page.type("#nfe", "10")
        page.type("#seed", "2")
        page.eval("window.seen = []; new MutationObserver(() => { const s = document.getElementById('status');"
                  " window.seen.push([s.dataset.state, Number(s.dataset.views),"
                  " document.getElementById('final').textContent]); })"
                  ".observe(document.getElementById('status'), {attributes: true, childList: true, subtree: true})")
        page.click("#run")
        page.wait_for("document.getElementById('status').dataset.state === 'done'")
        seen = page.eval("window.seen")
        assert any(state == "running" and views > 0 and final == "" for state, views, final in seen), seen
        want = model.generate([QUESTION], seed=2, nfe=10, rho=2)[0]
        assert want and page.eval("document.getElementById('final').textContent") == want
        assert page.eval("document.getElementById('status').dataset.views") == "9"   # every denoiser call: 10 - 1
        assert page.eval("document.getElementById('nfe-spent').textContent") == "10"
        assert page.eval("document.getElementById('view-calls').textContent") == "9"
        last = page.eval("Array.from(document.querySelectorAll('#view .tok')).map(s => s.textContent).join('')")
        assert last == want   # the last view: the state the answer is decoded from
        # back to the middle of the path: an intermediate view, its tokens coloured by stability
        mixed = None
        for step in range(1, 9):  # an intermediate view that kept some tokens and changed others (which one: the model's)
            page.eval(f"(() => {{ const s = document.getElementById('scrub'); s.value = '{step}';"
                      " s.dispatchEvent(new Event('input')); })()")
            assert page.eval("document.getElementById('stepinfo').textContent").startswith(
                f"— step {step + 1} of 9, t = ")
            kinds = set(page.eval("Array.from(document.querySelectorAll('#view .tok')).map(s => s.className)"))
            assert kinds <= {"tok stable", "tok changed"}, kinds
            if kinds == {"tok stable", "tok changed"}:
                mixed = step
                break
        assert mixed is not None, "no intermediate view coloured both stable and changed tokens"
        page.screenshot(shots / "playground-mid-denoising.png")
        # a prompt over the model's limit: the server's message on the page, not a blank
        page.type("#prompt", "a " * 40)
        page.click("#run")
        page.wait_for("document.getElementById('status').dataset.state === 'error'")
        message = page.eval("document.getElementById('error').textContent")
        assert message.startswith("HTTP 400: ") and "tokens" in message
        assert page.eval("getComputedStyle(document.getElementById('error')).display") == "block"
        assert page.eval("document.getElementById('stepinfo').textContent") == ""   # nothing left of the last run
        page.screenshot(shots / "playground-error.png")
    print(f"browser test: {time.monotonic() - started:.1f} s; screenshots in {shots}")
