"""No answer key on disk (issue 19): however elfreg is installed, nothing of its package data (the benchmarks) or its
caches is visible inside the sandbox, searched from inside it.

The sandbox binds the interpreter's installation read-only: every prefix the interpreter reports (``sys.prefix``,
``sys.exec_prefix``, ``sys.base_prefix``), asked of the interpreter itself and treated alike. Here that interpreter
is one whose own prefix holds an installed copy of elfreg in its site-packages (package, benchmark data, dist-info),
plus an elfreg cache inside the same tree — the situation of elfreg installed into the base interpreter the
sandbox runs. (The prefix is a venv of the base interpreter: a second base installation cannot be built portably
in a test, e.g. this one's ``python`` finds ``libpython`` through an absolute RUNPATH.) A program walks every
folder it can see and lists whatever looks like elfreg or a benchmark file. A marker
beside the elfreg copy shows the site-packages folder itself is visible. (Hidden folders stay as empty, read-only
mount points, so their names remain; the search counts the files it can read.) Without the hiding, the search finds
the package's files: the test was checked against that."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import elfreg
from elfreg.sandbox import IsolationUnavailable, Sandbox, SandboxConfig, run_asserts

WALK = r"""
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
        base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True)
        os.chmod(root, 0o755)
        site = Path(subprocess.run([str(root / "bin" / "python"), "-I", "-c",
                                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
        shutil.copytree(Path(elfreg.__file__).parent, site / "elfreg",
                        ignore=shutil.ignore_patterns("__pycache__"))  # what a wheel install puts there
        info = site / "elfreg-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: elfreg\nVersion: 0.1.0\n")
        (info / "RECORD").write_text("elfreg/eval/benchdata/humaneval/HumanEval.jsonl.gz,,\n")
        (site / "visible_marker.txt").write_text("the site-packages folder is bound")
        cache = root / "share" / "elfreg-cache"
        cache.mkdir(parents=True)
        (cache / "humaneval-b796127e635a67f9-expected-v4.jsonl.gz").write_bytes(b"answers")
        assert (site / "elfreg" / "eval" / "benchdata" / "humaneval" / "HumanEval.jsonl.gz").exists()
        yield root, cache
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_nothing_of_elfreg_is_visible_inside(prefix, isolation):
    root, cache = prefix
    try:
        sb = Sandbox(SandboxConfig(isolation=isolation, python=str(root / "bin" / "python"), hide=(str(cache),)))
    except IsolationUnavailable as e:
        pytest.skip(f"no isolation on this machine: {e}")
    with sb:
        r = run_asserts(sb, WALK, "assert marker, 'the site-packages folder is not visible'\nassert not found, found[:8]",
                        120.0)
    assert r.passed, r.detail
