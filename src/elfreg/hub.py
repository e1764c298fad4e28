"""Deprecated: ``ElfModel`` (a trained model: save, load, push, generate) moved to :mod:`elfreg.pretrained`; the hub
access it re-exported (``FILES``, ``hub_unreachable``, ``resolve_model_dir``) lives in :mod:`elfreg.hubaccess`. This
old path keeps working with a DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, {
    **dict.fromkeys(("ElfModel", "ElfModelEncoder", "FORMAT_VERSION", "check_shapes"), "elfreg.pretrained"),
    **dict.fromkeys(("FILES", "hub_unreachable", "resolve_model_dir"), "elfreg.hubaccess"),
    "LEGACY_PROMPT_TEMPLATE": "elfreg.tasks.formats",
})
