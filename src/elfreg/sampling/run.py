"""Deprecated: the prompt files and results files of a generation run moved to :mod:`elfreg.sampling.files`; this old
path keeps working with a DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, "elfreg.sampling.files")
