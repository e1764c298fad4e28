"""The playground page of ``elfreg serve`` at ``/``: one self-contained HTML file shipped with the package (nothing
fetched from elsewhere), which talks to the server only through its public API (``/v1/models`` and a streamed
``/v1/chat/completions`` with the trajectory on)."""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from functools import lru_cache
from importlib import resources
from typing import Any, Callable

PAGE = "playground.html"
log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def playground_html() -> str:
    """The page's text, read from the package data once."""
    return resources.files("elfreg.serve").joinpath("static", PAGE).read_text(encoding="utf-8")


def add_playground(app: Any) -> None:
    """Serve the playground at ``/`` of the FastAPI ``app``."""
    from fastapi.responses import HTMLResponse

    @app.get("/", include_in_schema=False)
    async def playground() -> HTMLResponse:
        return HTMLResponse(playground_html())


def open_when_up(url: str, opener: Callable[[str], Any] | None = None, timeout: float = 600) -> threading.Thread:
    """Open the page ``url`` with ``opener`` (default: the system's web browser) once ``url``'s server answers
    ``/health``, from a background thread (``elfreg serve --ui``); returns the thread."""
    import webbrowser

    health = url.rstrip("/") + "/health"

    def wait_then_open() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(health, timeout=5):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            log.warning("the server at %s did not answer within %g s; open the page yourself", url, timeout)
            return
        (opener or webbrowser.open)(url)

    thread = threading.Thread(target=wait_then_open, name="elfreg-ui", daemon=True)
    thread.start()
    return thread


def page_url(host: str, port: int) -> str:
    """The playground's address for a server listening on ``host``: the loopback for every-interface hosts."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"
