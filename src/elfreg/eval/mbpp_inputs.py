"""Deprecated: the MBPP+ input types moved to :mod:`elfreg.tasks.mbpp_inputs`; this old path keeps working with a
DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, "elfreg.tasks.mbpp_inputs")
