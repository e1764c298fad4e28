"""Deprecated: the test-set loaders moved to :mod:`elfreg.tasks.testsets` (decontamination reads the test sets as
evaluation does); the registry with the demo's tasks and its ``load_benchmark`` to :mod:`elfreg.eval.registry`.
This old path keeps working with a DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, {
    **dict.fromkeys(("MBPP_TEST_IDS", "DEFAULT_FILES", "manifest", "packaged_data_dir", "default_data_dir",
                     "read_jsonl", "mbpp_entry_point", "load_gsm8k", "load_math500", "load_humaneval",
                     "load_humaneval_plus", "load_mbpp", "load_mbpp_plus", "load_mmlu", "load_mmlu_dev"),
                    "elfreg.tasks.testsets"),
    **dict.fromkeys(("Benchmark", "BenchmarkRegistry", "Problem", "sha256_file"), "elfreg.tasks.benchmark"),
    "deserialize_inputs": "elfreg.tasks.mbpp_inputs",
    **dict.fromkeys(("default_registry", "load_benchmark"), "elfreg.eval.registry"),
})
