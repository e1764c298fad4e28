"""Deprecated: the answer extractors moved to :mod:`elfreg.tasks.answers`, a task's extractor to
:func:`elfreg.tasks.registry.extract_for`, the adaptive rule's answer function to :mod:`elfreg.sampling.decode`;
this old path keeps working with a DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, {
    "EXTRACTORS": "elfreg.tasks.answers:EXTRACTORS", "Extractor": "elfreg.tasks.answers:Extractor",
    "extractor": "elfreg.tasks.answers:extractor", "whole_text": "elfreg.tasks.answers:whole_text",
    "extract_final_number": "elfreg.tasks.answers:extract_final_number",
    "answer_for": "elfreg.tasks.registry:extract_for", "text_answers": "elfreg.sampling.decode:text_answers",
})
