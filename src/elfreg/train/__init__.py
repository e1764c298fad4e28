"""Training (issue 5): run config, Muon/AdamW loop with EMA, checkpoints and resume, DDP/FSDP, feature cache."""

from elfreg.train.config import DataConfig, RunConfig, TrainConfig, load_run_config, run_config_from_dict
from elfreg.train.features import CachedFeatures, standardize_batch
from elfreg.train.rng import example_generators, example_seed
from elfreg.train.trainer import Trainer, TrainingDiverged, TrainResult, train

__all__ = [
    "CachedFeatures", "DataConfig", "RunConfig", "TrainConfig", "TrainResult", "Trainer", "TrainingDiverged",
    "example_generators", "example_seed", "load_run_config", "run_config_from_dict", "standardize_batch", "train",
]
