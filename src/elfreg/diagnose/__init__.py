"""Trajectory diagnostics (spec §9): end-point error, token stability, answer agreement, flips, acceleration."""

from elfreg.diagnose.config import DiagnoseConfig
from elfreg.diagnose.metrics import (Flips, Response, answer_agrees, paired_flips, response_agrees, response_of,
                                     stable_fractions)
from elfreg.diagnose.path import PathStep, euler_path
from elfreg.diagnose.run import Problems, diagnose_model, read_problems
from elfreg.diagnose.tasks import AnswerTask, extract_final_number, resolve_task
from elfreg.diagnose.trajectory import AccelerationProfile, MasterTrajectory, run_acceleration, run_master

__all__ = [
    "DiagnoseConfig", "Flips", "Response", "answer_agrees", "paired_flips", "response_agrees", "response_of",
    "stable_fractions", "PathStep", "euler_path", "Problems", "diagnose_model", "read_problems", "AnswerTask",
    "extract_final_number", "resolve_task", "AccelerationProfile", "MasterTrajectory", "run_acceleration",
    "run_master",
]
