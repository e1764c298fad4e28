"""The code sandbox (spec §6): generated programs run isolated, and every verdict is reached outside them.

The trust boundary is the package's layout:

* **inside the sandbox** — :mod:`elfreg.sandbox.inside` (standard library only, shipped as source): the value
  codec, the runner that applies the limits and runs one payload, and the fork server;
* **the harness** — everything else here:

  * :mod:`.sandbox` starts isolated processes (bubblewrap, fork server, uid, rlimits), with its settings in
    :mod:`.config` and the command lines in :mod:`.bwrap`; :mod:`.layout` decides what they see;
  * :mod:`.forkserver` drives the fork server;
  * :mod:`.collect` and :mod:`.records` read what a process writes back, as untrusted input;
  * :mod:`.codecheck` runs a program against a task's tests and reaches the verdict (with :mod:`.oracle`);
  * :mod:`.expected` computes and caches the reference solutions' outputs (MAC-verified).

What crosses the boundary: one payload into each process (to that process only), result records out of it.
The threat model, each attack class with its defence and its test, is in ``docs/evaluation.md``.
"""

from .codecheck import CheckResult, TimeRule, run_asserts, run_io, run_tests
from .collect import RunResult
from .config import ISOLATION_CHOICES, Isolation, IsolationUnavailable, SandboxConfig, SandboxError
from .expected import ExpectedOutputs
from .sandbox import Sandbox

__all__ = ["CheckResult", "TimeRule", "run_asserts", "run_io", "run_tests", "ExpectedOutputs", "ISOLATION_CHOICES",
           "Isolation", "IsolationUnavailable", "RunResult", "Sandbox", "SandboxConfig", "SandboxError"]
