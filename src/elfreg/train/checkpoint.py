"""Training checkpoints: ``ckpt-<step>/`` folders written whole into a temporary folder, then renamed.

A checkpoint holds ``model/`` (an ElfModel folder with the EMA weights: loadable by ``ElfModel.from_pretrained``),
``weights.safetensors`` (the raw student weights), ``optimizer*.safetensors`` + ``optimizer.json`` (tensors and
the rest of each optimiser's state), ``train_state.json`` (step, data position, RNG states), ``config.yaml``
(the resolved run config) and a ``COMPLETE`` marker. No pickle anywhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from elfreg.atomic import _fsync_dir, atomic_write, atomic_write_text

CKPT_RE = re.compile(r"^ckpt-(\d+)$")

# Settings a run may change when it resumes: where and how it runs, how often it logs and saves (docs/training.md
# "Checkpoints and resume"); every other key must equal the checkpoint's config.yaml.
RESUMABLE = frozenset({"train.log_every", "train.save_every", "train.keep_last", "train.keep_epochs",
                       "train.progress", "train.tensorboard", "train.wandb_project", "train.device", "train.compile",
                       "train.grad_checkpointing", "train.grad_share_every", "data.cache_dir", "canvas.max_overflow_fraction",
                       "canvas.overflow_check_rows"})
# The run's length may change too (extended or cut) when the learning rate does not depend on it: a constant
# schedule after the warm-up; a decaying schedule ends at the run's last step, so its length is part of the run.
LENGTH = frozenset({"train.steps", "train.epochs"})


def ckpt_dir(output: Path, step: int) -> Path:
    return Path(output) / f"ckpt-{step:08d}"


def list_checkpoints(output: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints in ``output``, oldest first."""
    out = []
    if Path(output).is_dir():
        for p in Path(output).iterdir():
            m = CKPT_RE.match(p.name)
            if m and (p / "COMPLETE").is_file():
                out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(output: Path) -> Path | None:
    ckpts = list_checkpoints(output)
    return ckpts[-1][1] if ckpts else None


def resume_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The keys of a resolved run config (``to_dict`` form) that must not change on resume, dotted."""
    from elfreg.fingerprint import flatten

    flat = flatten(json.loads(json.dumps(cfg)))
    constant = all(flat.get(k, "constant") == "constant"
                   for k in ("train.lr_schedule", "train.repa_weight_schedule", "train.reg_weight_schedule"))
    free = RESUMABLE | (LENGTH if constant else frozenset())
    return {k: v for k, v in flat.items() if k not in free and k != "paper" and not k.startswith("paper.")}


def check_resume(ckpt: Path, cfg: Any, output: Path) -> None:
    """Refuse to resume from ``ckpt`` with a config that differs from its config.yaml in a key that changes the
    run (RunMismatch: one line naming the keys and both values)."""
    import yaml

    from elfreg.configtools import to_dict
    from elfreg.fingerprint import RunMismatch, differences, mismatch_message

    path = Path(ckpt) / "config.yaml"
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the checkpoint's config ({type(exc).__name__}); pass --restart to "
                         "start over") from None
    diffs = differences(resume_settings(saved), resume_settings(to_dict(cfg)))
    if diffs:
        raise RunMismatch(mismatch_message(output, diffs, "--output"))


def flatten_optimizer(state: dict[str, dict]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Optimiser state dicts -> (tensors for safetensors, JSON-able rest). DTensors are stored as local shards."""
    tensors: dict[str, Tensor] = {}
    meta: dict[str, Any] = {}
    for name, sd in state.items():
        entries = {}
        for idx, st in sd["state"].items():
            kinds = {}
            for key, v in st.items():
                if isinstance(v, Tensor):
                    v = v.to_local() if hasattr(v, "to_local") else v
                    tensors[f"{name}.{idx}.{key}"] = v.detach().cpu().contiguous()
                    kinds[key] = "tensor"
                else:
                    kinds[key] = v
            entries[str(idx)] = kinds
        groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
        meta[name] = {"state": entries, "param_groups": groups}
    return tensors, meta


def unflatten_optimizer(tensors: dict[str, Tensor], meta: dict[str, Any]) -> dict[str, dict]:
    """Inverse of ``flatten_optimizer`` (local tensors)."""
    out = {}
    for name, m in meta.items():
        state = {}
        for idx, kinds in m["state"].items():
            state[int(idx)] = {k: (tensors[f"{name}.{idx}.{k}"] if v == "tensor" else v) for k, v in kinds.items()}
        groups = [{k: (tuple(v) if k in ("betas", "ns_coefficients") else v) for k, v in g.items()}
                  for g in m["param_groups"]]
        out[name] = {"state": state, "param_groups": groups}
    return out


def write_checkpoint(output: Path, step: int, files: dict[str, Any], keep_last: int,
                     protect: set[int] | frozenset[int] = frozenset()) -> Path:
    """Write one checkpoint atomically (temporary folder + rename) and keep only the newest ``keep_last``
    (checkpoints of the steps in ``protect`` — the kept epochs — are never pruned).

    ``files`` maps a relative name to a callable ``write(path)`` (or, for ``model``, ``write(folder)``).
    """

    output = Path(output)
    final = ckpt_dir(output, step)
    tmp = output / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for name, write in files.items():
            write(tmp / name)
        atomic_write_text(tmp / "COMPLETE", json.dumps({"step": step}))
        if final.exists():  # a re-run of the same step (after a crash between rename and prune)
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old_step, old in list_checkpoints(output)[:-keep_last]:
        if old_step not in protect:
            shutil.rmtree(old, ignore_errors=True)
    return final


def link_epoch(output: Path, key: str, ckpt: Path) -> Path:
    """``epoch-<key>`` -> the checkpoint folder, a relative symlink replaced atomically (e.g. epoch-7.5)."""
    link = Path(output) / f"epoch-{key}"
    tmp = Path(output) / f".tmp-epoch-{key}-{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(Path(ckpt).name, tmp)
    os.replace(tmp, link)
    _fsync_dir(output)
    return link


def clean_temporaries(output: Path) -> None:
    """Remove half-written checkpoint folders left by a killed run."""
    if Path(output).is_dir():
        for p in Path(output).iterdir():
            if p.name.startswith(".tmp-ckpt-"):
                shutil.rmtree(p, ignore_errors=True)


def save_tensors(path: Path, tensors: dict[str, Tensor]) -> None:
    from safetensors.torch import save_file

    data = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    atomic_write(path, lambda p: save_file(data, str(p)))


def load_tensors(path: Path) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path))


def rng_state() -> dict[str, Any]:
    """Global torch RNG states as JSON-able lists (training draws come from per-example generators)."""
    state = {"cpu": torch.get_rng_state().tolist()}
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(torch.tensor(state["cpu"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])
