"""A headless Chromium driven over the DevTools protocol (websockets): open a page, type, click, read, screenshot.

Debian's ``chromium`` package; the flags keep it off the network and away from any profile of this machine."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1100,1000", "--remote-debugging-port=0"]


def chromium_path() -> str | None:
    """The chromium executable, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One page target over its DevTools websocket: calls wait for their answer (events are skipped)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict:
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (promises awaited)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120) -> Any:
        """Poll ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"waited {timeout:g} s for {expression}")

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element."""
        box = self.eval(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                        f" return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def type(self, selector: str, text: str) -> None:
        """Click the field, select what it holds and type ``text`` key by key."""
        self.click(selector)
        self.eval(f"document.querySelector({json.dumps(selector)}).select()")
        self.call("Input.dispatchKeyEvent", type="keyDown", key="Backspace", code="Backspace",
                  windowsVirtualKeyCode=8)
        self.call("Input.dispatchKeyEvent", type="keyUp", key="Backspace", code="Backspace", windowsVirtualKeyCode=8)
        for ch in text:
            self.call("Input.dispatchKeyEvent", type="keyDown", text=ch, key=ch, unmodifiedText=ch)
            self.call("Input.dispatchKeyEvent", type="keyUp", key=ch)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


@contextmanager
def browser(profile: Path, timeout: float = 60) -> Iterator[Page]:
    """A headless Chromium with a fresh profile in ``profile``; yields its first page, stops it on exit."""
    profile.mkdir(parents=True, exist_ok=True)
    log = open(profile.parent / "chromium.log", "w")
    proc = subprocess.Popen([chromium_path(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "LANG": "C.UTF-8"})
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start: {(profile.parent / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            targets = json.loads(r.read())
        from websockets.sync.client import connect

        with connect(next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page"), max_size=None,
                     open_timeout=30) as ws:
            page = Page(ws)
            page.call("Page.enable")
            page.call("Runtime.enable")
            yield page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
