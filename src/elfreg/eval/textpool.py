"""Deprecated: the pool of killable, memory-limited worker processes is :mod:`elfreg.eval.workers`
(``TextPool`` is now ``KillablePool``: it holds nothing about text). The old names still import from here, with a
DeprecationWarning."""

from elfreg.moved import moved

__getattr__ = moved(__name__, {"TextPool": "elfreg.eval.workers:KillablePool", "Outcome": "elfreg.eval.workers"})
