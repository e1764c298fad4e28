"""The top-level command line: every command registers; a run imports only its own command's module."""

import subprocess
import sys

import pytest

from elfreg.cli import COMMANDS, _command, build_parser


def test_every_command_registers():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)


@pytest.mark.parametrize("argv,command", [
    (["generate", "--model", "m"], "generate"),
    (["--log-level", "DEBUG", "eval", "score"], "eval"),
    (["--log-level=DEBUG", "lm-eval", "--tasks", "x"], "lm-eval"),
    (["--help"], None),
    (["nonsense"], None),
    ([], None),
])
def test_the_command_is_found_after_the_top_level_options(argv, command):
    assert _command(argv) == command


def test_a_command_imports_its_own_module_only():
    code = ("import sys; from elfreg.cli import build_parser; build_parser('generate'); "
            "print(sorted(m for m in ('matplotlib', 'lm_eval', 'elfreg.diagnose', 'elfreg.eval', 'elfreg.demo') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
