"""A run's checkpoints, trainer side: writing ckpt-<step> (weights, EMA model, optimiser, data and RNG state, the
model card's training record) and reading one back to resume or to continue from (``train.init_from``). The folder
format, atomic writes and the resume checks are :mod:`elfreg.train.checkpoint`'s."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from elfreg.atomic import atomic_write_text
from elfreg.configtools import dump_yaml, to_dict
from elfreg.train import checkpoint as ck
from elfreg.train.dist import barrier


def full_tensor(t: Tensor) -> Tensor:
    """The whole tensor of a plain or FSDP-sharded (DTensor) one (collective under FSDP)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def assign_full(dst: Tensor, full: Tensor) -> None:
    """Copy a full tensor into a plain or FSDP-sharded (DTensor) destination."""
    if hasattr(dst, "device_mesh"):
        from torch.distributed.tensor import distribute_tensor

        full = distribute_tensor(full.to(dst.dtype), dst.device_mesh, dst.placements)
    dst.copy_(full.to(dst.device) if not hasattr(full, "device_mesh") else full)


class Checkpointing:
    """The :class:`~elfreg.train.trainer.Trainer`'s checkpoint methods (its run's state in, out)."""

    def _assign_ema(self, ema_full: dict[str, Tensor]) -> None:
        with torch.no_grad():
            for n, v in self.ema.shadow.items():
                assign_full(v, ema_full[n])

    def _load_train_state(self, ema_full: dict[str, Tensor]) -> None:
        self._assign_ema(ema_full)
        world = self.state.get("world_size", 1)
        if world != self.info.world_size:
            raise ValueError(f"{self.resume_from} was written by {world} processes; resume with the same world size "
                             f"(this run has {self.info.world_size})")
        self._load_optimizer(self.resume_from, "resume")
        self.batches.load_state_dict(self.state["data"][self.info.rank])
        ck.set_rng_state(self.state["rng"])

    def _load_optimizer(self, d: Path, why: str) -> None:
        """The optimiser state of checkpoint ``d`` (FSDP: this rank's shard, which needs the world size it was
        written with)."""
        meta = json.loads((d / "optimizer.json").read_text())
        fsdp = self.cfg.train.parallel == "fsdp"
        if fsdp:
            world = json.loads((d / "train_state.json").read_text()).get("world_size", 1)
            if world != self.info.world_size:
                raise ValueError(f"{why}: {d} holds FSDP optimiser shards of {world} processes; this run has "
                                 f"{self.info.world_size} (use that many, or train.init_optimizer=fresh)")
        name = f"optimizer-rank{self.info.rank}.safetensors" if fsdp else "optimizer.safetensors"
        state = ck.unflatten_optimizer(ck.load_tensors(d / name), meta)
        for key, opt in self.optim.optimizers.items():  # FSDP: local shards back into DTensors
            params = [p for g in opt.param_groups for p in g["params"]]
            for idx, st in state[key]["state"].items():
                p = params[idx]
                if hasattr(p, "device_mesh"):
                    from torch.distributed.tensor import DTensor

                    for k, v in st.items():
                        if isinstance(v, Tensor) and v.shape == p.to_local().shape and v.ndim > 0:
                            st[k] = DTensor.from_local(v.to(p.device), p.device_mesh, p.placements)
        self.optim.load_state_dict(state)

    # -- checkpoints -----------------------------------------------------------------------------------------------
    def card_training(self, step: int) -> dict:
        """How the model was trained up to ``step``, for its model card (elfreg.card.training_record); collective
        under torch.distributed (``progress``)."""
        from elfreg.card import training_record

        losses = [h["loss"] for h in getattr(self, "_history", [])]
        last = getattr(self, "last_validation", None)
        validation = self.validation.record(last) if last is not None else None
        budget = getattr(self, "budget", None)
        progress = {"planned_steps": self.total_steps, **self.progress(step),
                    "time_budget": budget.summary() if budget is not None and budget.steps is not None else None}
        return training_record(to_dict(self.cfg), step, progress,
                               losses, self.info.world_size, self.precision.choice, self.example_prompt(),
                               validation)

    def example_prompt(self) -> str | None:
        """The first training row's prompt (the card's example of how to ask the model), read once; None when the
        run's data has no source to read it from (a dataset given in memory, as the demo's)."""
        if not hasattr(self, "_example_prompt"):
            import dataclasses

            from elfreg.train.setup import run_stream

            self._example_prompt = None
            if self.cfg.data.sources:
                one = dataclasses.replace(self.cfg, data=dataclasses.replace(self.cfg.data, shuffle_buffer=1))
                try:
                    self._example_prompt = str(next(iter(run_stream(one, epochs=1)))["prompt"])
                except Exception:   # an unreadable source (offline hub, ...) costs the card its example, never a save
                    self._example_prompt = None
        return self._example_prompt

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def save(self, step: int) -> Path | None:
        """Write ckpt-<step> (collective under FSDP; the main rank writes)."""
        info = self.info
        weights = {k: full_tensor(v).detach().cpu() for k, v in self.student.state_dict().items()}
        ema = {k: full_tensor(v).detach().cpu() for k, v in self.ema.shadow.items()}
        opt_tensors, opt_meta = ck.flatten_optimizer(self.optim.state_dict())
        data_states = [self.batches.state_dict()]
        if info.enabled:
            import torch.distributed as dist

            data_states = [None] * info.world_size
            dist.all_gather_object(data_states, self.batches.state_dict())
        shard_dir = self.output / ".optim-shards"
        if self.cfg.train.parallel == "fsdp" and info.enabled:
            ck.save_tensors(shard_dir / f"optimizer-rank{info.rank}.safetensors", opt_tensors)
        barrier(info)
        path = None
        training = self.card_training(step)   # collective (progress sums the overflow counts over ranks)
        if info.is_main:
            dtype = next(iter(self.student.state_dict().values())).dtype
            state = {"step": step, "world_size": info.world_size, "data": data_states, "rng": ck.rng_state(),
                     "tokens": int(self.state.get("tokens", 0))}
            if getattr(self, "budget", None) is not None:   # train.minutes: seconds spent, the decided length
                state["budget"] = self.budget.state()

            def write_model(folder: Path) -> None:
                self.elf.save_pretrained(folder, {k: v.to(dtype) for k, v in ema.items()}, training=training)

            def write_opt(p: Path) -> None:
                if self.cfg.train.parallel == "fsdp" and info.enabled:
                    for r in range(info.world_size):
                        name = f"optimizer-rank{r}.safetensors"
                        (shard_dir / name).replace(p.parent / name)
                else:
                    ck.save_tensors(p, opt_tensors)

            files = {
                "model": write_model,
                "weights.safetensors": lambda p: ck.save_tensors(p, weights),
                "optimizer.safetensors": write_opt,
                "optimizer.json": lambda p: atomic_write_text(p, json.dumps(opt_meta)),
                "train_state.json": lambda p: atomic_write_text(p, json.dumps(state)),
                "config.yaml": lambda p: dump_yaml(self.cfg, p),
            }
            protect = set(self.epoch_steps.values())
            path = ck.write_checkpoint(self.output, step, files, self.cfg.train.keep_last, protect)
            for key, s in self.epoch_steps.items():
                if s == step:
                    ck.link_epoch(self.output, key, path)
        barrier(info)
        return path
