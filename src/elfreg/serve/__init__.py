"""`elfreg serve`: an OpenAI-compatible HTTP server over an ElfModel, with continuous batching (optional extra
``elfreg[serve]``: FastAPI + uvicorn). ``batcher``: requests -> batches of rows; ``app``: the HTTP API."""
