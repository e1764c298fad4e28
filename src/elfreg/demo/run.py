"""Deprecated: the demo's runner moved to :mod:`elfreg.demo.runner` (``run_demo``: the plan, the lanes, resuming, the
results), the runs' data to :mod:`elfreg.demo.prepare`, one training run to :mod:`elfreg.demo.runs`, the evaluation to
:mod:`elfreg.demo.evaluation`; this old path keeps working with a DeprecationWarning."""

from elfreg.moved import alias_module

_RUNNER = ("side_by_side", "time_lanes", "PLAN_FILE", "saved_plan", "make_plan", "train_all", "evaluate_all",
           "train_and_evaluate", "claim_runs", "_claim_runs", "run_demo")
# names this module held (or imported) before the demo's data, evaluation and runs moved to modules of their own
_PREPARE = ("default_cache_dir", "task_module", "task_config", "task_rows", "head_token_ids", "backbone_config",
            "training_precision", "DemoData", "prepare", "with_training_precision")
_EVALUATION = ("sample_texts", "sample_texts_nfe", "per_problem", "accuracy", "sampler_config", "CELL_LISTS",
               "AccuracyCurve", "read_points", "encode_test", "eval_cells", "evaluate", "merge_evals")
_RUNS = ("DEMO_ONLY", "run_config", "stop_hook", "WARMUP_STEPS", "TIMED_STEPS", "BARRIER_TIMEOUT_S", "Stopped",
         "lane_order", "run_fingerprint", "done_steps", "time_run", "train_run")
__getattr__, __dir__ = alias_module(__name__, {**dict.fromkeys(_RUNNER, "elfreg.demo.runner"),
                                               **dict.fromkeys(_PREPARE, "elfreg.demo.prepare"),
                                               **dict.fromkeys(_EVALUATION, "elfreg.demo.evaluation"),
                                               **dict.fromkeys(_RUNS, "elfreg.demo.runs"),
                                               **dict.fromkeys(("LanePool", "evaluate_job", "time_job", "train_job"),
                                                               "elfreg.demo.lanes")})
