"""elfreg.demo.bytecode: the modules it compiles at set-up exist, and it writes their bytecode."""

import importlib.util
import subprocess
import sys

from elfreg.demo import bytecode


def test_every_listed_module_exists():
    missing = [m for m in bytecode.MODULES + bytecode.ASIDE if importlib.util.find_spec(m) is None]
    assert not missing, f"elfreg.demo.bytecode.MODULES names modules that do not exist: {missing}"


def test_writes_bytecode_even_under_pythondontwritebytecode(tmp_path, monkeypatch):
    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("X = 1\n")
    code = ("import sys; from elfreg.demo import bytecode; bytecode.MODULES = ('probe_pkg.mod',); "
            "bytecode.ASIDE = (); sys.exit(bytecode.main([]))")
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": f"{tmp_path}:{':'.join(sys.path)}", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    assert list((pkg / "__pycache__").glob("mod.*.pyc")), "no bytecode written for the listed module"
