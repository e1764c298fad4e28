"""Deprecated: the `elfreg generate` command moved to :mod:`elfreg.generate.cli`, the sampler flags it shares with
`eval run` and `serve` to :mod:`elfreg.sampling.flags`, the model loader to :mod:`elfreg.loading`; this old path keeps
working with a DeprecationWarning."""

from elfreg.moved import alias_module

__getattr__, __dir__ = alias_module(__name__, {
    **dict.fromkeys(("register", "cmd_generate", "prompts_file", "prompts_of", "OUTPUT_FORMATS"),
                    "elfreg.generate.cli"),
    **dict.fromkeys(("add_sampler_arguments", "sampler_config_from_args", "generation_job", "PRECISIONS",
                     "_presets_text"), "elfreg.sampling.flags"),
    "load_elf_model": "elfreg.loading", "LoadedModel": "elfreg.sampling.generate",
    "ElfModelEncoder": "elfreg.pretrained",
    # what it imported, in their homes
    **dict.fromkeys(("GenerationJob", "run_generation"), "elfreg.sampling.generate"),
    **dict.fromkeys(("PromptFile", "inline_prompts", "read_prompts"), "elfreg.sampling.files"),
    **dict.fromkeys(("BATCH", "EXIT_RANGES", "GRIDS", "SAMPLER_RANGES", "SAMPLERS", "SAMPLES", "W_PRESETS",
                     "SamplerConfig"), "elfreg.sampling.config"),
    "DEFAULT_EXIT": "elfreg.sampling.exit", "TASKS": "elfreg.sampling.text", "sampler_config": "elfreg.sampling.text",
    "EXTRACTORS": "elfreg.tasks.answers",
})
