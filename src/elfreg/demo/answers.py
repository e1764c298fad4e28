"""Deprecated: moved to :mod:`elfreg.tasks.synthetic`; this old path keeps working with a DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, "elfreg.tasks.synthetic")
