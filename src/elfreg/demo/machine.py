"""Deprecated: the machine description moved to :mod:`elfreg.machine` (the precision choice reads it too), the
demo's training precision to :mod:`elfreg.demo.prepare`. The old names still import from here, with a
DeprecationWarning."""

from elfreg.moved import moved

__getattr__ = moved(__name__, {**dict.fromkeys(("KERNEL_ENV", "VECTOR_FLAGS", "cpu_model", "vector_extensions",
                                                "machine_info"), "elfreg.machine"),
                               "training_precision": "elfreg.demo.prepare"})
