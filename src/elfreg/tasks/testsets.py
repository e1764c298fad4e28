"""The evaluation test sets: loaders for GSM8K, MATH-500, HumanEval(+), MBPP(+) and MMLU (spec §6).

Evaluation scores on them and decontamination (elfreg.data) removes them from training data; both read them here,
the same files checked the same way.

The test sets ship with the package (``elfreg/tasks/benchdata``; licences, versions and sha256 in its
MANIFEST.json and README.md) and their sha256 is checked at every load. ``--data PATH`` loads another copy;
``ELFREG_DATA_DIR`` points at a folder with the same layout (``.jsonl`` or ``.jsonl.gz``). A file that is
not byte-identical to the pinned copy is loaded with a warning and recorded as such in the report.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import logging
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Iterator

from elfreg.tasks.answers import extract_choice, extract_gsm8k
from elfreg.tasks.formats import choice_letter
from elfreg.tasks.registry import task

from elfreg.tasks.benchmark import Benchmark, BenchmarkRegistry, Problem, sha256_file
from elfreg.tasks.mbpp_inputs import deserialize_inputs

log = logging.getLogger(__name__)

MBPP_TEST_IDS = range(11, 511)


@lru_cache(maxsize=1)
def manifest() -> dict:
    """The shipped benchmark files' manifest: name -> {file, rows, version, license, sha256, ...}."""
    return json.loads(resources.files("elfreg.tasks").joinpath("benchdata", "MANIFEST.json").read_text("utf-8"))[
        "benchmarks"]


DEFAULT_FILES = {name: entry["file"] for name, entry in manifest().items()}


def packaged_data_dir() -> Path:
    """The folder of the benchmark files shipped with elfreg."""
    return Path(str(resources.files("elfreg.tasks").joinpath("benchdata")))


def default_data_dir() -> Path:
    """``ELFREG_DATA_DIR`` when set (it must exist), else the benchmark files shipped with the package."""
    env = os.environ.get("ELFREG_DATA_DIR")
    if env:
        if not Path(env).is_dir():
            raise FileNotFoundError(f"ELFREG_DATA_DIR={env} is not a folder")
        return Path(env)
    return packaged_data_dir()


def _resolve(name: str, path: str | None) -> tuple[Path, str, str | None]:
    """(file, its sha256, the pinned version when the file is byte-identical to the shipped copy)."""
    entry = manifest()[name]
    if path:
        p = Path(path)
    else:
        root = default_data_dir()
        cands = [root / entry["file"], root / entry["file"].removesuffix(".gz")]
        p = next((c for c in cands if c.exists()), cands[0])
    if not p.exists():
        raise FileNotFoundError(f"{name}: data file {p} does not exist")
    digest = sha256_file(p)
    if digest in (entry["sha256"], entry["content_sha256"]):
        return p, digest, entry["version"]
    if not path and p.parent.parent == packaged_data_dir():
        raise ValueError(f"{name}: shipped data file {p} is damaged (sha256 {digest}, expected {entry['sha256']}); "
                         "reinstall elfreg")
    log.warning("%s: %s is not the pinned %s copy (sha256 %s); scoring it as given", name, p, entry["version"],
                digest[:16])
    return p, digest, None


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """Rows of a .jsonl or .jsonl.gz file; a malformed line raises ValueError naming file and line."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: malformed JSON ({e.msg})") from None


def load_gsm8k(path: str | None = None) -> Benchmark:
    """GSM8K test (1,319): gold = number after ``####`` with thousands separators removed."""
    p, digest, version = _resolve("gsm8k", path)
    probs = []
    for i, r in enumerate(read_jsonl(p)):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        probs.append(Problem(task_id=f"gsm8k/{i}", question=r["question"], reference=r["answer"], answer=gold))
    return Benchmark("gsm8k", "gsm8k", probs, str(p), digest, task("gsm8k").prompt,
                     answer_extractor=extract_gsm8k, data_version=version)


def load_math500(path: str | None = None) -> Benchmark:
    """MATH-500: gold = ``answer`` field, compared with math-verify."""
    p, digest, version = _resolve("math500", path)
    probs = [Problem(task_id=r["unique_id"], question=r["problem"], reference=r["solution"], answer=r["answer"],
                     extra={"subject": r.get("subject"), "level": r.get("level")}) for r in read_jsonl(p)]
    return Benchmark("math500", "math", probs, str(p), digest, task("math500").prompt, data_version=version)


def load_humaneval(path: str | None = None) -> Benchmark:
    """HumanEval (164): base tests = the ``test`` field's ``check(entry_point)``."""
    p, digest, version = _resolve("humaneval", path)
    probs = [Problem(task_id=r["task_id"], question=r["prompt"], reference=r["prompt"] + r["canonical_solution"],
                     entry_point=r["entry_point"], tests=f"{r['test']}\ncheck({r['entry_point']})\n",
                     extra={"preamble": r["prompt"], "code_prompt": r["prompt"]}) for r in read_jsonl(p)]
    return Benchmark("humaneval", "code", probs, str(p), digest, task("humaneval").prompt,
                     code_tests=("base",), data_version=version)


def load_humaneval_plus(path: str | None = None) -> Benchmark:
    """HumanEval+ v0.1.10: base = EvalPlus ``base_input``, plus = base + ``plus_input`` (differential)."""
    p, digest, version = _resolve("humaneval_plus", path)
    probs = [Problem(task_id=r["task_id"], question=r["prompt"], reference=r["prompt"] + r["canonical_solution"],
                     entry_point=r["entry_point"], base_inputs=r["base_input"], plus_inputs=r["plus_input"] or [],
                     atol=float(r["atol"]), extra={"preamble": r["prompt"], "code_prompt": r["prompt"]})
             for r in read_jsonl(p)]
    return Benchmark("humaneval_plus", "code", probs, str(p), digest, task("humaneval_plus").prompt,
                     code_tests=("base", "plus"), data_version=version)


def mbpp_entry_point(test: str) -> str:
    """The function an MBPP assert calls first, e.g. ``assert f(1) == 2`` -> ``f``."""
    for node in ast.walk(ast.parse(test)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in (
                "set", "sorted", "list", "tuple", "abs", "round", "math", "str", "int", "float", "len", "frozenset"):
            return node.func.id
    raise ValueError(f"no function call found in MBPP test {test!r}")


def load_mbpp(path: str | None = None) -> Benchmark:
    """MBPP test split (task_id 11-510, 500 problems): program = code, then test_setup_code, then asserts."""
    p, digest, version = _resolve("mbpp", path)
    probs = []
    for r in read_jsonl(p):
        if r["task_id"] not in MBPP_TEST_IDS:
            continue
        tests = "\n".join(r["test_list"])
        q = f"{r['text']}\nYour code should pass these tests:\n\n{tests}"
        probs.append(Problem(task_id=f"Mbpp/{r['task_id']}", question=q, reference=r["code"],
                             entry_point=mbpp_entry_point(r["test_list"][0]),
                             tests=f"{r.get('test_setup_code') or ''}\n{tests}\n",
                             extra={"keep_all": bool((r.get("test_setup_code") or "").strip()),
                                    "code_prompt": f'"""\n{r["text"]}\n{r["test_list"][0]}\n"""\n'}))
    if len(probs) != len(MBPP_TEST_IDS) and path is None:
        raise ValueError(f"{p}: expected 500 MBPP test problems (ids 11-510), found {len(probs)}")
    return Benchmark("mbpp", "code", probs, str(p), digest, task("mbpp").prompt, code_tests=("base",),
                     data_version=version)


def load_mbpp_plus(path: str | None = None) -> Benchmark:
    """MBPP+ v0.2.0 (378): EvalPlus inputs, with their tuples/sets restored per task (:mod:`.mbpp_inputs`)."""
    p, digest, version = _resolve("mbpp_plus", path)
    probs = []
    for r in read_jsonl(p):
        q = r["prompt"].strip().strip('"').strip()
        plus = r["plus_input"] or []  # Mbpp/793 stores an empty dict
        probs.append(Problem(task_id=r["task_id"], question=q, reference=r["canonical_solution"],
                             entry_point=r["entry_point"],
                             base_inputs=deserialize_inputs(r["task_id"], r["base_input"]),
                             plus_inputs=deserialize_inputs(r["task_id"], plus) if plus else [],
                             atol=float(r["atol"]), extra={"code_prompt": r["prompt"]}))
    return Benchmark("mbpp_plus", "code", probs, str(p), digest, task("mbpp_plus").prompt,
                     code_tests=("base", "plus"), data_version=version)


def _mmlu_problem(r: dict, task_id: str, where: str) -> Problem:
    """One MMLU row {subject, question, choices[4], answer A-D or 0-3} as a Problem; bad rows name ``where``."""
    choices, ans = r.get("choices"), choice_letter(r.get("answer"))
    if not isinstance(r.get("question"), str) or not isinstance(choices, list) or len(choices) != 4 \
            or not all(isinstance(c, str) for c in choices) or ans is None:
        raise ValueError(f"{where}: expected an MMLU row {{question, choices: 4 strings, answer: A-D or 0-3}}")
    return Problem(task_id, r["question"], f"The answer is ({ans})", ans,
                   extra={"choices": list(choices), "subject": r.get("subject", "")})


def _mmlu_csvs(p: Path) -> list[Path]:
    """The release layout: a folder with ``test/*_test.csv``, a folder of ``*_test.csv``, or one CSV."""
    if (p / "test").is_dir():
        return sorted((p / "test").glob("*_test.csv"))
    return sorted(p.glob("*_test.csv")) if p.is_dir() else [p]


def load_mmlu(path: str | None = None, name: str = "mmlu") -> Benchmark:
    """MMLU test (14,042; ``mmlu_dev``: the 285 dev questions): gold = the option letter, read from a rationale.

    Default: the copy shipped with elfreg (JSONL {subject, question, choices, answer}). ``path`` may also be the
    release's CSV layout (``data/`` with ``test/<subject>_test.csv``, a folder of those CSVs, or one CSV) or a
    JSONL with integer answers (the Hugging Face ``cais/mmlu`` export). Task ids are ``<subject>/<row in subject>``.
    """
    p = Path(path) if path else None
    if p is None or p.suffix in (".jsonl", ".gz") or p.name.endswith(".jsonl.gz"):
        p, digest, version = _resolve(name, path)
        probs, seen = [], {}
        for n, r in enumerate(read_jsonl(p), 1):
            subj = r.get("subject") or "mmlu"
            i = seen[subj] = seen.get(subj, -1) + 1
            probs.append(_mmlu_problem(r, f"{subj}/{i}", f"{p}:{n}"))
    else:
        files = _mmlu_csvs(p)
        if not files or not files[0].is_file():
            raise FileNotFoundError(f"{name}: no *_test.csv files or file at {p}")
        probs = []
        for f in files:
            subj = f.name.removesuffix("_test.csv").removesuffix(".csv")
            with open(f, newline="", encoding="utf-8") as fh:
                for i, row in enumerate(csv.reader(fh)):
                    if len(row) != 6:
                        raise ValueError(f"{f}:{i + 1}: expected question,A,B,C,D,answer (6 fields), got {len(row)}")
                    probs.append(_mmlu_problem({"subject": subj, "question": row[0], "choices": row[1:5],
                                                "answer": row[5]}, f"{subj}/{i}", f"{f}:{i + 1}"))
        digest = sha256_file(files[0]) if len(files) == 1 else "csv:" + ",".join(sha256_file(f)[:12] for f in files)
        version = None
    return Benchmark(name, "choice", probs, str(p), digest, task(name).prompt, answer_extractor=extract_choice,
                     data_version=version)


def load_mmlu_dev(path: str | None = None) -> Benchmark:
    """The 285 MMLU dev questions (5 per subject), shipped with elfreg: a quick check of an MMLU model."""
    return load_mmlu(path, "mmlu_dev")


def default_registry() -> BenchmarkRegistry:
    """A fresh registry with every shipped test set (callers may register more: evaluation adds the demo's tasks,
    :func:`elfreg.eval.registry.default_registry`)."""
    reg = BenchmarkRegistry()
    for name, fn in (("gsm8k", load_gsm8k), ("math500", load_math500), ("humaneval", load_humaneval),
                     ("humaneval_plus", load_humaneval_plus), ("mbpp", load_mbpp), ("mbpp_plus", load_mbpp_plus),
                     ("mmlu", load_mmlu), ("mmlu_dev", load_mmlu_dev)):
        reg.register(name, fn)
    return reg


def load_benchmark(name: str, path: str | None = None, registry: BenchmarkRegistry | None = None) -> Benchmark:
    """Load test set ``name`` from ``path`` (default: the copy shipped with elfreg) through ``registry`` (default:
    the shipped test sets')."""
    return (registry or default_registry()).load(name, path)
