"""`elfreg serve`: an OpenAI-compatible HTTP server over an ElfModel, with continuous batching (optional extra
``elfreg[serve]``: FastAPI + uvicorn). ``batcher``: requests -> batches of rows; ``app``: the HTTP API."""

from elfreg.bounds import Range

MAX_BATCH = Range(1, 2 ** 16, integer=True)   # rows (prompts x n) per network call
MAX_WAIT_MS = Range(0, 60_000, unit="ms")       # the batching window
