"""The batcher's worker against a stand-in pipeline: a cancelled request stops before the next network call, a full
queue refuses, a request's failure of any kind is its own, a dead worker is seen and revived."""

import threading

import pytest

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.network import NFECounter
from elfreg.serve.batcher import Batcher, Cancelled, Job, QueueFull


class Pipeline:
    """Calls its counter ``calls`` times per batch (as the samplers do); ``on_call(i)`` runs inside call i."""

    def __init__(self, calls, on_call=lambda i: None, fail=None):
        self.calls, self.on_call, self.fail = calls, on_call, fail
        self.counter = NFECounter(self.network)
        self.made = 0

    def network(self, *args, **kwargs):
        self.on_call(self.made)
        self.made += 1

    def validate(self, texts, source, lines):
        if self.fail is not None:
            raise self.fail

    def run_rows(self, texts, keys, watch=None):
        for _ in range(self.calls):
            self.counter(None, None, None, None)
        return [{"text": t, "key": k} for t, k in zip(texts, keys)]


def test_a_cancelled_request_stops_before_the_next_network_call():
    started = threading.Event()
    jobs = []

    def on_call(i):
        if i == 5:
            jobs[0].cancel()   # the client went away during call 5
            started.set()

    pipe = Pipeline(10_000, on_call)
    batcher = Batcher(lambda cfg: pipe, max_batch=4, max_wait_ms=0)
    try:
        jobs.append(Job(["q"], 2, SamplerConfig()))
        future = batcher.submit(jobs[0])
        assert started.wait(30)
        with pytest.raises(Cancelled):
            future.result(timeout=30)
        assert pipe.made == 6 and batcher.cancelled == 1   # calls 0..5, none after the cancel
        ok = batcher.submit(Job(["r"], 1, SamplerConfig(seed=1)))
        assert [r["text"] for r in ok.result(timeout=30)] == ["r"]
    finally:
        batcher.close()


def test_a_full_queue_refuses_and_a_failure_of_any_kind_is_the_requests_own():
    gate = threading.Event()
    pipe = Pipeline(1, lambda i: gate.wait(30))
    batcher = Batcher(lambda cfg: pipe, max_batch=1, max_wait_ms=0, max_queue=1)
    try:
        first = batcher.submit(Job(["a"], 1, SamplerConfig()))
        while batcher.queue.qsize():   # the worker took it
            pass
        second = batcher.submit(Job(["b"], 1, SamplerConfig()))
        with pytest.raises(QueueFull):
            batcher.submit(Job(["c"], 1, SamplerConfig()))
        gate.set()
        assert first.result(timeout=30)[0]["text"] == "a" and second.result(timeout=30)[0]["text"] == "b"
        pipe.fail = TypeError("not a ValueError")   # e.g. the tokenizer on text it cannot encode
        with pytest.raises(TypeError):
            batcher.submit(Job(["d"], 1, SamplerConfig())).result(timeout=30)
        pipe.fail = None
        assert batcher.submit(Job(["e"], 1, SamplerConfig())).result(timeout=30)[0]["text"] == "e"
    finally:
        batcher.close()


def test_a_dead_worker_fails_its_requests_and_is_revived():
    class Dies(BaseException):
        pass

    pipe = Pipeline(1)
    pipe.fail = Dies("gone")
    batcher = Batcher(lambda cfg: pipe, max_batch=1, max_wait_ms=0)
    try:
        with pytest.raises(RuntimeError, match="worker stopped"):
            batcher.submit(Job(["a"], 1, SamplerConfig())).result(timeout=30)
        batcher._thread.join(30)
        assert not batcher.alive and batcher.died == "Dies: gone"
        pipe.fail = None
        assert batcher.submit(Job(["b"], 1, SamplerConfig())).result(timeout=30)[0]["text"] == "b"
        assert batcher.alive and batcher.restarts == 1
    finally:
        batcher.close()
