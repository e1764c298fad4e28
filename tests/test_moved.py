"""Every name that moved keeps its old import path, with a DeprecationWarning naming its new home (elfreg.moved)."""

import importlib
import warnings

import pytest

from elfreg.moved import moved

# (old module, name there, new module, name there)
MOVED = [
    ("elfreg.sandbox.sandbox", "ISOLATION_CHOICES", "elfreg.sandbox.config", "ISOLATION_CHOICES"),
    ("elfreg.sandbox.sandbox", "default_cache_root", "elfreg.sandbox.config", "default_cache_root"),
    ("elfreg.sandbox.sandbox", "elfreg_paths", "elfreg.sandbox.bwrap", "elfreg_paths"),
    *[("elfreg.demo.machine", n, "elfreg.machine", n)
      for n in ("KERNEL_ENV", "VECTOR_FLAGS", "cpu_model", "vector_extensions", "machine_info")],
    ("elfreg.demo.machine", "training_precision", "elfreg.demo.prepare", "training_precision"),
    *[("elfreg.demo.run", n, "elfreg.demo.prepare", n)
      for n in ("default_cache_dir", "task_module", "task_config", "task_rows", "head_token_ids", "backbone_config",
                "training_precision")],
    *[("elfreg.demo.run", n, "elfreg.demo.evaluation", n)
      for n in ("sample_texts", "sample_texts_nfe", "per_problem", "accuracy", "sampler_config", "CELL_LISTS",
                "AccuracyCurve", "read_points")],
    *[("elfreg.demo.run", n, "elfreg.demo.runs", n)
      for n in ("DEMO_ONLY", "run_config", "stop_hook", "WARMUP_STEPS", "TIMED_STEPS", "BARRIER_TIMEOUT_S")],
    # the demo's runner itself (elfreg.demo.run -> elfreg.demo.runner), and the names it imported from their homes
    *[("elfreg.demo.run", n, "elfreg.demo.runner", n)
      for n in ("run_demo", "side_by_side", "time_lanes", "PLAN_FILE", "saved_plan", "make_plan", "train_all",
                "evaluate_all", "train_and_evaluate", "claim_runs")],
    *[("elfreg.demo.run", n, "elfreg.demo.prepare", n) for n in ("DemoData", "prepare", "with_training_precision")],
    *[("elfreg.demo.run", n, "elfreg.demo.evaluation", n) for n in ("encode_test", "eval_cells", "evaluate",
                                                                    "merge_evals")],
    *[("elfreg.demo.run", n, "elfreg.demo.runs", n) for n in ("Stopped", "lane_order", "run_fingerprint", "done_steps",
                                                              "time_run", "train_run")],
    ("elfreg.demo.run", "LanePool", "elfreg.demo.lanes", "LanePool"),
    # ElfModel's module (elfreg.hub -> elfreg.pretrained); the hub access it re-exported is elfreg.hubaccess'
    *[("elfreg.hub", n, "elfreg.pretrained", n) for n in ("ElfModel", "ElfModelEncoder", "FORMAT_VERSION",
                                                          "check_shapes")],
    *[("elfreg.hub", n, "elfreg.hubaccess", n) for n in ("FILES", "hub_unreachable", "resolve_model_dir")],
    ("elfreg.hub", "LEGACY_PROMPT_TEMPLATE", "elfreg.tasks.formats", "LEGACY_PROMPT_TEMPLATE"),
    # the generate command (elfreg.sampling.cli -> elfreg.generate.cli), the sampler flags it shares with eval run
    # and serve (elfreg.sampling.flags), generation's own types (elfreg.sampling.generate)
    *[("elfreg.sampling.cli", n, "elfreg.generate.cli", n)
      for n in ("register", "cmd_generate", "prompts_file", "prompts_of", "OUTPUT_FORMATS")],
    *[("elfreg.sampling.cli", n, "elfreg.sampling.flags", n)
      for n in ("add_sampler_arguments", "sampler_config_from_args", "generation_job", "PRECISIONS")],
    *[("elfreg.sampling.cli", n, "elfreg.sampling.generate", n)
      for n in ("LoadedModel", "GenerationJob", "run_generation")],
    ("elfreg.sampling.cli", "load_elf_model", "elfreg.loading", "load_elf_model"),
    ("elfreg.sampling.cli", "ElfModelEncoder", "elfreg.pretrained", "ElfModelEncoder"),
    ("elfreg.sampling.cli", "read_prompts", "elfreg.sampling.files", "read_prompts"),
    ("elfreg.sampling.cli", "sampler_config", "elfreg.sampling.text", "sampler_config"),
    # a generation run's prompt and results files (elfreg.sampling.run -> elfreg.sampling.files)
    *[("elfreg.sampling.run", n, "elfreg.sampling.files", n)
      for n in ("PromptFile", "STDIN", "read_prompts", "inline_prompts", "iter_prompt_records", "part_path",
                "fingerprint_path", "generation_settings", "claim_results_file", "note_results_file",
                "generate_to_file", "generate_to_stream", "merge_parts")],
    ("elfreg.demo.report", "_cell", "elfreg.demo.claims", "find_cell"),
    ("elfreg.demo.report", "_fmt", "elfreg.demo.claims", "fmt_cell"),
    ("elfreg.demo.report", "_compare", "elfreg.demo.claims", "compare"),
    *[("elfreg.demo.report", n, "elfreg.demo.claims", n)
      for n in ("_by_train_seed", "_var", "_paired_parts", "_paired_se", "seeds_to_decide", "reach_step",
                "reach_thresholds", "reach_seeds_to_decide", "reach_claims")],
    ("elfreg.train.trainer", "plan_run", "elfreg.train.setup", "plan_run"),
    ("elfreg.train.trainer", "_full", "elfreg.train.checkpointing", "full_tensor"),
    ("elfreg.train.trainer", "_assign", "elfreg.train.checkpointing", "assign_full"),
    *[("elfreg.backbones", f"_{n}", "elfreg.backbones_load", n)
      for n in ("check_source", "local_gguf", "num_blocks", "gguf_hash")],
    *[("elfreg.backbones", n, "elfreg.backbones_load", n)
      for n in ("_tokenizer_entry", "_convert_tokenizer", "_shared_gguf_name_maps", "_save_plain", "_set_num_blocks")],
    ("elfreg.eval.textpool", "TextPool", "elfreg.eval.workers", "KillablePool"),
    ("elfreg.eval.textpool", "Outcome", "elfreg.eval.workers", "Outcome"),
    # loading the test sets, shared by evaluation and decontamination (elfreg.eval -> elfreg.tasks); the registry
    # with the demo's tasks stays evaluation's (elfreg.eval.registry)
    *[("elfreg.eval.benchmark", n, "elfreg.tasks.benchmark", n)
      for n in ("Problem", "Benchmark", "BenchmarkRegistry", "sha256_file")],
    *[("elfreg.eval.datasets", n, "elfreg.tasks.testsets", n)
      for n in ("MBPP_TEST_IDS", "DEFAULT_FILES", "manifest", "packaged_data_dir", "default_data_dir", "read_jsonl",
                "mbpp_entry_point", "load_gsm8k", "load_math500", "load_humaneval", "load_humaneval_plus", "load_mbpp",
                "load_mbpp_plus", "load_mmlu", "load_mmlu_dev")],
    *[("elfreg.eval.datasets", n, "elfreg.tasks.benchmark", n)
      for n in ("Problem", "Benchmark", "BenchmarkRegistry", "sha256_file")],
    ("elfreg.eval.datasets", "deserialize_inputs", "elfreg.tasks.mbpp_inputs", "deserialize_inputs"),
    *[("elfreg.eval.datasets", n, "elfreg.eval.registry", n) for n in ("default_registry", "load_benchmark")],
    *[("elfreg.eval.mbpp_inputs", n, "elfreg.tasks.mbpp_inputs", n) for n in ("deserialize_inputs", "RULE_OF_TASK")],
]

# Names an old module still uses itself: importable from it as before, the same object as in their new home.
KEPT = [
    ("elfreg.sandbox.sandbox", "SandboxConfig", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "IsolationUnavailable", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "Isolation", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "SandboxError", "elfreg.sandbox.config"),
    ("elfreg.sandbox.sandbox", "RunResult", "elfreg.sandbox.collect"),
    ("elfreg.sandbox.sandbox", "machine_memory", "elfreg.sandbox.config"),
    *[("elfreg.demo.runner", n, "elfreg.demo.prepare")
      for n in ("DemoData", "prepare", "with_training_precision")],
    *[("elfreg.demo.runner", n, "elfreg.demo.evaluation") for n in ("encode_test", "eval_cells", "evaluate",
                                                                    "merge_evals")],
    *[("elfreg.demo.runner", n, "elfreg.demo.runs") for n in ("Stopped", "lane_order", "run_fingerprint",
                                                              "done_steps", "time_run", "train_run")],
    # generation's own types, below the model layer; the loader's module still offers them
    *[("elfreg.loading", n, "elfreg.sampling.generate") for n in ("LoadedModel", "PROMPT_FORMATS",
                                                                  "generation_device")],
    ("elfreg.cli", "INTERRUPTED", "elfreg.ctrlc"),
    *[("elfreg.demo.report", n, "elfreg.demo.claims") for n in ("Claim", "claims")],
    *[("elfreg.train.trainer", n, "elfreg.train.setup") for n in ("run_stream", "count_rows", "plan_from_counts",
                                                                  "match_backbones", "check_backbones", "need_teacher")],
    *[("elfreg.backbones", n, "elfreg.backbones_load") for n in ("load_tokenizer", "convert_tokenizer_aside",
                                                                 "load_gguf_model", "find_layer_list")],
]


@pytest.mark.parametrize("old, name, new, new_name", MOVED, ids=[f"{m[0]}.{m[1]}" for m in MOVED])
def test_an_old_path_warns_and_gives_the_moved_object(old, name, new, new_name):
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}.{new_name}"):
        got = getattr(importlib.import_module(old), name)
    assert got is getattr(importlib.import_module(new), new_name)


@pytest.mark.parametrize("old, name, new", KEPT, ids=[f"{m[0]}.{m[1]}" for m in KEPT])
def test_a_name_the_old_module_still_uses_imports_silently(old, name, new):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = getattr(importlib.import_module(old), name)
    assert got is getattr(importlib.import_module(new), name)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        moved("elfreg.somewhere", {"a": "elfreg.config"})("nothing")
