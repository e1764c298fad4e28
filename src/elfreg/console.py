"""The ``elfreg`` console script, ``python -m elfreg`` and ``python -m elfreg.train``: Ctrl-C is taken in charge
before anything else is imported.

The commands answer a Ctrl-C with one line and exit code 130 once they run (elfreg.ctrlc); ``guarded`` covers the
moments before, while ``elfreg.cli`` or ``elfreg.train.cli`` and their imports load. Only ``os`` (loaded with the
interpreter) and the C half of ``signal`` come first (``signal.py`` itself imports ``enum``: milliseconds); what
remains is the interpreter's own start-up (its ``site`` module), before any elfreg code.
"""

import os

try:
    import _signal as signal   # CPython's C module under signal.py: SIGINT, SIG_IGN, SIG_DFL, signal, getsignal
except ImportError:   # another interpreter
    import signal


def guarded(prog: str, target: str) -> int:
    """Run ``target`` (``module:function``, returning an exit code) with Ctrl-C answered by one line from the start."""
    def before_start(signum, frame) -> None:
        os.write(2, f"{prog}: interrupted before it started; nothing was written\n".encode())
        os._exit(130)

    module, _, function = target.partition(":")
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:   # a background job keeps ignoring it
        return getattr(__import__(module, fromlist=[function]), function)()
    signal.signal(signal.SIGINT, before_start)
    try:
        return getattr(__import__(module, fromlist=[function]), function)()
    finally:   # the work is over: a Ctrl-C while the interpreter shuts down just ends it
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def run() -> int:
    """The ``elfreg`` command."""
    return guarded("elfreg", "elfreg.cli:main")
