"""What elfreg knows about its tasks, torch-free: how each is asked (:mod:`.formats`), how its answers are read and
judged (:mod:`.answers`, :mod:`.mathcheck`), one record per task (:mod:`.registry`), the synthetic tasks of the demo
(:mod:`.arith`, :mod:`.chain`, :mod:`.synthetic`), the shipped benchmark files (``benchdata/``) and how they are read
(:mod:`.testsets`, into the records of :mod:`.benchmark`; MBPP+ inputs' types by :mod:`.mbpp_inputs`).

Every layer above (data, sampling, eval, diagnose, the demo, lm-eval) reads task knowledge from here; nothing here
imports them. Evaluation and decontamination both read the test sets from here.
"""
