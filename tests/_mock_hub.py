"""A local HTTP server answering the few Hugging Face Hub endpoints an upload calls, for offline push tests.

It implements what ``HfApi.create_repo`` and ``HfApi.upload_folder`` send (huggingface_hub's HTTP API): repo
creation, README metadata validation, the pre-upload check (``.safetensors`` files go through LFS, the rest inline),
the LFS batch API with the ``basic`` transfer and its PUT, and the NDJSON commit. Each repo's committed files are
kept in memory (``MockHub.repos``) with every request seen (``MockHub.requests``), so a test checks what arrived.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MockHub:
    """Start with ``with MockHub() as hub:``; point huggingface_hub at ``hub.url`` (HF_ENDPOINT or endpoint=)."""

    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.private: dict[str, bool] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, str | None]] = []   # (method, path, Authorization header)
        self.fail_status: int | None = None   # set: every request is answered with this HTTP status
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:   # quiet
                pass

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _reply(self, code: int, payload: dict | None = None) -> None:
                if hub.fail_status is not None:
                    code, payload = hub.fail_status, {"error": f"the mock answers {hub.fail_status}"}
                data = json.dumps(payload or {}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                hub.requests.append(("PUT", self.path, self.headers.get("Authorization")))
                m = re.fullmatch(r"/lfs-upload/([0-9a-f]{64})", self.path)
                body = self._body()
                if m is None or hashlib.sha256(body).hexdigest() != m.group(1):
                    return self._reply(400, {"error": "bad LFS upload"})
                hub.lfs[m.group(1)] = body
                self._reply(200)

            def do_POST(self) -> None:
                hub.requests.append(("POST", self.path, self.headers.get("Authorization")))
                body = self._body()
                path = self.path.split("?")[0]
                if not (self.headers.get("Authorization") or "").startswith("Bearer "):
                    return self._reply(401, {"error": "Invalid credentials in Authorization header"})
                if path == "/api/repos/create":
                    req = json.loads(body)
                    repo = f"{req['organization']}/{req['name']}" if req.get("organization") else req["name"]
                    if repo in hub.repos:
                        return self._reply(409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo}"})
                    hub.repos[repo] = {}
                    hub.private[repo] = req.get("visibility", "private" if req.get("private") else "public") == "private"
                    return self._reply(200, {"url": f"{hub.url}/{repo}"})
                if path == "/api/validate-yaml":
                    return self._reply(200, {"errors": [], "warnings": []})
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/preupload/([^/]+)", path)
                if m:
                    files = json.loads(body)["files"]
                    return self._reply(200, {"files": [
                        {"path": f["path"], "uploadMode": "lfs" if f["path"].endswith(".safetensors") else "regular",
                         "shouldIgnore": False} for f in files]})
                m = re.fullmatch(r"/([^/]+/[^/]+)\.git/info/lfs/objects/batch", path)
                if m:
                    objs = json.loads(body)["objects"]
                    return self._reply(200, {"transfer": "basic", "objects": [
                        {"oid": o["oid"], "size": o["size"],
                         "actions": {"upload": {"href": f"{hub.url}/lfs-upload/{o['oid']}"}}} for o in objs]})
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/commit/([^/]+)", path)
                if m:
                    repo = m.group(1)
                    if repo not in hub.repos:
                        return self._reply(404, {"error": "Repository not found"})
                    for line in body.decode().splitlines():
                        item = json.loads(line)
                        v = item["value"]
                        if item["key"] == "file":
                            hub.repos[repo][v["path"]] = base64.b64decode(v["content"])
                        elif item["key"] == "lfsFile":
                            if v["oid"] not in hub.lfs:
                                return self._reply(400, {"error": f"LFS object {v['oid']} was never uploaded"})
                            hub.repos[repo][v["path"]] = hub.lfs[v["oid"]]
                    oid = hashlib.sha1(body).hexdigest()
                    return self._reply(200, {"commitUrl": f"{hub.url}/{repo}/commit/{oid}", "commitOid": oid,
                                             "pullRequestUrl": None})
                self._reply(404, {"error": f"not mocked: POST {path}"})

            def do_GET(self) -> None:
                hub.requests.append(("GET", self.path, self.headers.get("Authorization")))
                self._reply(404, {"error": f"not mocked: GET {self.path}"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "MockHub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
