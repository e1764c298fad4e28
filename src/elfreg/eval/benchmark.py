"""Deprecated: the benchmark and problem records and the benchmark registry moved to :mod:`elfreg.tasks.benchmark`
(test-set loading is shared by evaluation and decontamination); this old path keeps working with a
DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, "elfreg.tasks.benchmark")
