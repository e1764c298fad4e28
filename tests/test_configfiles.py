"""Shipped run configs by name: from a source checkout, and from a wheel (configs carried as package data)."""

import argparse
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from elfreg.configfiles import config_arg, config_names, resolve_config
from elfreg.train.config import load_run_config

REPO = Path(__file__).resolve().parents[1]


def test_configs_resolve_by_name_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # not the repository root: configs/tiny-smoke.yaml is no relative path here
    want = (REPO / "configs" / "tiny-smoke.yaml").read_bytes()
    for text in ("tiny-smoke", "tiny-smoke.yaml", "configs/tiny-smoke.yaml"):
        assert resolve_config(text).read_bytes() == want
    assert resolve_config("gsm8k/elf-reg-b").read_bytes() == (REPO / "configs/gsm8k/elf-reg-b.yaml").read_bytes()
    assert {"tiny-smoke", "gsm8k/elf-reg-b"} <= set(config_names())
    own = tmp_path / "tiny-smoke.yaml"   # an existing file wins over a shipped name
    own.write_text("train: {steps: 3}\n")
    assert resolve_config("tiny-smoke.yaml").resolve() == own
    with pytest.raises(argparse.ArgumentTypeError, match="nor a shipped config.*tiny-smoke"):
        config_arg("no-such-config")
    with pytest.raises(argparse.ArgumentTypeError):
        config_arg("../configs/../../etc/passwd")


def test_an_install_without_configs_says_so(monkeypatch):
    monkeypatch.setattr("elfreg.configfiles.shipped_dirs", lambda: [])
    with pytest.raises(FileNotFoundError, match=r"demo: no such file.*\(this install holds none: its configs/"):
        resolve_config("demo")


def test_a_wheel_carries_the_configs_and_loads_them_by_name(tmp_path):
    src = tmp_path / "src-tree"   # build from a copy: the build writes build/ and egg-info beside its sources
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "configs", src / "configs")
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, capture_output=True)
    wheel = next(wheels.glob("elfreg-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert {"elfreg/configs/tiny-smoke.yaml", "elfreg/configs/gsm8k/elf-reg-b.yaml"} <= names
        site = tmp_path / "site"
        z.extractall(site)   # what pip installs: the package alone, no configs/ folder beside it
    probe = ("from elfreg.configfiles import resolve_config, shipped_dirs;"
             "from elfreg.train.config import load_run_config;"
             "p = resolve_config('tiny-smoke'); print(p); print(shipped_dirs());"
             "print(load_run_config(p).train.steps)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin"},
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert out[0] == str(site / "elfreg" / "configs" / "tiny-smoke.yaml")
    assert str(REPO) not in out[1]   # found in the installed package, not in this checkout
    assert out[2] == str(load_run_config(REPO / "configs" / "tiny-smoke.yaml").train.steps)
