"""The playground page of ``elfreg serve`` at ``/``: one self-contained HTML file shipped with the package (nothing
fetched from elsewhere), which talks to the server only through its public API (``/v1/models`` and a streamed
``/v1/chat/completions`` with the trajectory on)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

PAGE = "playground.html"


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
