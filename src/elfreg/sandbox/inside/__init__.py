"""Everything that runs *inside* the sandbox: standard library only, shipped to the sandboxed interpreter as source.

* :mod:`.codec` — how values cross the boundary (also imported by the harness, so both sides agree);
* :mod:`.runner` — applies the limits, the seccomp filter and the uid, runs one payload, writes result records;
* :mod:`.server` — the fork server: a template process that forks one isolated child per payload and never
  reads a payload itself.

What crosses the boundary: into the sandbox, one payload per process (a JSON line and the binary parts it names,
``runner.pack_payload``; to that process alone: stdin or a memfd); out of it, result records on a pipe the harness
created, each checked by :mod:`elfreg.sandbox.records` before the harness reads it. Nothing else: no file,
environment variable or inherited memory of the harness.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent
# A fresh interpreter per program runs ``python -I -c RUNNER_SOURCE`` (payload on stdin); the fork server runs
# ``python -I -c SERVER_SOURCE --zygote CTRL_FD WORKDIR_BYTES``. The codec comes first: it carries the one
# ``from __future__`` import, and the runner uses its names.
RUNNER_SOURCE = "\n\n".join((_HERE / f).read_text(encoding="utf-8") for f in ("codec.py", "runner.py"))
SERVER_SOURCE = RUNNER_SOURCE + "\n\n" + (_HERE / "server.py").read_text(encoding="utf-8")
