"""The demo tasks as evaluation benchmarks (`elfreg eval run --benchmark demo-arith|demo-chain`), exact match."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import ModuleType

from elfreg.tasks import arith, chain
from elfreg.tasks.benchmark import Benchmark, Problem, sha256_file
from elfreg.tasks.answers import extractor
from elfreg.tasks.registry import task


def load_demo_arith(path: str | None = None) -> Benchmark:
    """The arithmetic-chain task: a demo run's test.jsonl, else the whole default test split."""
    n = len(arith.all_problems()["test"])
    return _load("arith", path, arith, n, f"generated: elfreg.demo.arith default test split ({n} problems)")


def load_demo_chain(path: str | None = None) -> Benchmark:
    """The pointer-chasing task: a demo run's test.jsonl, else the default test split (seed 0, 200 problems)."""
    return _load("chain", path, chain, 200, "generated: elfreg.demo.task default test split (seed 0, 200 problems)")


def _load(kind: str, path: str | None, generator: ModuleType, count: int, generated: str) -> Benchmark:
    """Test problems from a demo run's test.jsonl ({id, question, answer} per line), else ``count`` generated ones."""
    if path is None:
        rows = [{"id": f"{kind}/{i}", "question": generator.format_prompt(p), "answer": p.answer}
                for i, p in enumerate(generator.make_split(count, 0, "test"))]
        source = generated
        digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    else:
        rows = []
        with open(path, encoding="utf-8") as f:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    r = json.loads(raw)
                    rows.append({"id": str(r["id"]), "question": str(r["question"]), "answer": str(r["answer"])})
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path}:{n}: expected {{id, question, answer}}: {exc}") from exc
        source, digest = str(Path(path)), sha256_file(path)
    probs = [Problem(task_id=r["id"], question=r["question"], reference=f"#### {r['answer']}", answer=r["answer"])
             for r in rows]
    spec = task(f"demo-{kind}")
    return Benchmark(spec.name, spec.kind, probs, source, digest, spec.prompt, answer_extractor=extractor(spec.extract))
