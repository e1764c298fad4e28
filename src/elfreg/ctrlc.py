"""Ctrl-C at any moment of a command is one line and exit code 130, never a traceback.

Until a command starts its work (imports and argument parsing: seconds, most of them torch's) nothing has been
written, so a Ctrl-C ends the process at once. While it works, Ctrl-C raises KeyboardInterrupt as usual, so files
are closed and what was done is kept; the command's caller says what was kept. One exception: a Ctrl-C that lands
inside an import also ends the process at once, because libraries turn a KeyboardInterrupt raised in their import
into another error (numpy: an ImportError) or swallow it (torch's optional numpy import), and the command would go
on or die with a traceback. Results are appended one fsynced line at a time and files written atomically, so
ending there loses nothing done.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import Callable

# What a Ctrl-C leaves behind, by command ({out}: the output the command was given).
INTERRUPTED = {
    "train": "the complete checkpoints in {out} are kept; the same command resumes from the newest",
    "distill": "the finished stages and the complete checkpoints in {out} are kept; the same command resumes",
    "generate": "the samples already in {out} are kept; the same command resumes (it skips them)",
    "eval": "the rows already in {out} (scored; eval run: generated too) are kept; the same command resumes (it "
            "skips them)",
    "demo": "the finished stages in {out} are kept; the same command resumes",
    "diagnose": "nothing was written (the outputs are written whole at the end); run the command again",
    "data": "nothing was written (the outputs are written whole at the end); run the command again",
    "lm-eval": "lm-eval keeps no partial results (unless --use_cache was given); run the command again",
    "serve": "the server stopped; requests in flight were not answered",
    "push": "a push is one commit: the repo holds the whole upload or none of it; run the command again",
}

_IMPORTING = "<frozen importlib._bootstrap"


def _in_import(frame: FrameType | None) -> bool:
    """Whether ``frame`` or one of its callers is the import machinery (a module is being imported)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORTING):
            return True
        frame = frame.f_back
    return False


class CtrlC:
    """The SIGINT handler of one command: ``with CtrlC(line) as ctrl:`` ... ``ctrl.working = True`` ... .

    ``line()`` is the one line printed when the process ends at once. ``seen`` says whether a Ctrl-C came (an
    exception escaping the command after it is the Ctrl-C's doing). Installed only in the main thread of a process
    whose Ctrl-C is not ignored (a background job), and only for this process (a forked child behaves as Python
    does by default)."""

    def __init__(self, line: Callable[[], str]) -> None:
        self.line = line
        self.working = False
        self.seen = False
        self._pid = os.getpid()
        self._previous = None

    def _exit_now(self) -> None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError, RuntimeError):   # closed, or the buffer held by the interrupted code
            pass
        os.write(2, (self.line().rstrip("\n") + "\n").encode("utf-8", "replace"))
        os._exit(130)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:   # a forked child: Python's own behaviour
            raise KeyboardInterrupt
        self.seen = True
        if not self.working or _in_import(frame):
            self._exit_now()
        raise KeyboardInterrupt

    def __enter__(self) -> "CtrlC":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


def run_alone(command: str, add_arguments: Callable, run: Callable, argv: list[str] | None = None) -> int:
    """``python -m elfreg.<command>``: that command's parser and ``run`` alone (what torchrun starts), with one line
    and exit code 130 on Ctrl-C, whenever it comes."""
    import argparse

    prog = f"python -m elfreg.{command}"
    parsed: list[argparse.Namespace] = []

    def interrupted() -> str:
        if not parsed:
            return f"{prog}: interrupted before it started; nothing was written"
        return f"{prog}: interrupted; {INTERRUPTED[command].format(out=parsed[0].output)}"

    with CtrlC(interrupted) as ctrl:
        parser = argparse.ArgumentParser(prog=prog)
        add_arguments(parser)
        parsed.append(parser.parse_args(argv))
        ctrl.working = True
        try:
            return run(parsed[0])
        except KeyboardInterrupt:
            print(interrupted(), file=sys.stderr)
            return 130
        except Exception:
            if not ctrl.seen:
                raise
            print(interrupted(), file=sys.stderr)
            return 130
