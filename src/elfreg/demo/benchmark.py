"""The demo task as an evaluation benchmark (`elfreg eval run --benchmark demo-chain`), scored by exact match."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from elfreg.demo import task as chain
from elfreg.eval.benchmark import Benchmark, Problem, sha256_file
from elfreg.eval.prompts import gsm8k_prompt


def load_demo_chain(path: str | None = None) -> Benchmark:
    """Test problems from a demo run's test.jsonl ({id, question, answer} per line), else the default test split."""
    if path is None:
        rows = [{"id": f"chain/{i}", "question": chain.format_prompt(p), "answer": p.answer}
                for i, p in enumerate(chain.make_split(200, 0, "test"))]
        source = "generated: elfreg.demo.task default test split (seed 0, 200 problems)"
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
    return Benchmark("demo-chain", "exact", probs, source, digest, gsm8k_prompt,
                     answer_extractor=chain.extract_answer)
