"""Build hook: the wheel carries the run configs (``configs/``) as package data ``elfreg/configs``, so
``elfreg train --config tiny-smoke`` works from a pip install (elfreg.configfiles). The rest is pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithConfigs(build_py):
    """build_py, plus configs/**/*.yaml copied to <build>/elfreg/configs/."""

    def run(self):
        super().run()
        src = Path(__file__).resolve().parent / "configs"
        dst = Path(self.build_lib) / "elfreg" / "configs"
        for f in sorted(src.rglob("*.yaml")):
            target = dst / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)


setup(cmdclass={"build_py": BuildWithConfigs})
