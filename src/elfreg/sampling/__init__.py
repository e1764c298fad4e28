"""Time grids and samplers of ELF-REG (spec §5): full-span, prefix early-stop, re-noising, the adaptive exit;
the one trajectory loop they share; generation pipeline."""

from elfreg.sampling.config import SAMPLERS, SamplerConfig, W_PRESETS, w_for_task
from elfreg.sampling.decode import text_answers
from elfreg.sampling.exit import DEFAULT_EXIT, ExitRule, ExitTracker, nfe_summary
from elfreg.sampling.grids import logit_normal_grid, master_grid, power_grid, sampler_grid, uniform_grid
from elfreg.sampling.network import NFECount, NFECounter, StudentLike
from elfreg.sampling.pipeline import EncodedPrompts, GenerationPipeline, validate_prompts
from elfreg.sampling.samplers import SampleOutput, response_positions, sample
from elfreg.sampling.seeding import sample_generator, sample_seed
from elfreg.sampling.trajectory import PathStep, Trajectory
from elfreg.sampling.watch import StepView, Watch, step_hook
from elfreg.tasks.answers import EXTRACTORS, extractor
from elfreg.tasks.registry import extract_for as answer_for

__all__ = [
    "SAMPLERS", "SamplerConfig", "W_PRESETS", "w_for_task", "logit_normal_grid", "master_grid", "power_grid",
    "sampler_grid", "uniform_grid", "NFECount", "NFECounter", "StudentLike", "EncodedPrompts",
    "GenerationPipeline", "validate_prompts", "SampleOutput", "sample", "response_positions", "sample_generator",
    "sample_seed", "PathStep", "Trajectory", "DEFAULT_EXIT", "ExitRule", "ExitTracker", "nfe_summary", "EXTRACTORS",
    "answer_for", "extractor", "text_answers", "StepView", "Watch", "step_hook",
]
