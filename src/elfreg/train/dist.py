"""Process-group setup and model wrapping (DDP, FSDP2) for ``torchrun`` launches (reference facts §6)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> DistInfo:
    """Join the process group torchrun describes (env WORLD_SIZE > 1), or use one already initialised."""
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    return DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(spec: str, info: DistInfo) -> torch.device:
    if spec != "auto":
        return torch.device(spec)
    if torch.cuda.is_available():
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


class LossModule(nn.Module):
    """Wraps the student so the whole loss runs inside one forward (DDP's reducer sees every use)."""

    def __init__(self, student: nn.Module, sink: bool = False, loss: nn.Module | None = None) -> None:
        super().__init__()
        self.student = student
        self.sink = sink
        self.loss = loss   # loss(student, batch, draws, cfg, counts); None: the training objective (elf_reg_loss)

    def forward(self, batch, draws, cfg, counts):
        from elfreg.objective import elf_reg_loss

        out = (self.loss if self.loss is not None else elf_reg_loss)(self.student, batch, draws, cfg, counts)
        if self.sink:  # 0·Σp: every parameter gets a gradient on every rank (FSDP reduce-scatters must match)
            out.loss = out.loss + sum((p * 0).sum() for p in self.student.parameters())
        return out


def wrap(student: nn.Module, parallel: str, info: DistInfo, device: torch.device,
         loss: nn.Module | None = None) -> nn.Module:
    """LossModule around the student: DDP (find unused parameters: decoder rows may be absent) or FSDP2. ``loss``:
    another loss than the training objective (elfreg.distill's, which holds a frozen teacher: it is replicated, never
    sharded, and has no gradient to reduce)."""
    module = LossModule(student, sink=info.enabled and parallel == "fsdp", loss=loss)
    if not info.enabled:
        return module
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None,
                                       find_unused_parameters=True)
    from torch.distributed.fsdp import fully_shard

    # Parameters stay gathered from the first forward to the backward (ZeRO-2 style): the self-conditioning
    # passes run on some ranks only (data-dependent), so per-forward all-gathers would not match across ranks.
    for block in student.blocks:
        fully_shard(block, reshard_after_forward=False)
    # Called outside the student's forward, by the training objective only: a unit of its own there. A distillation
    # loss never calls it, and a unit that never runs stays sharded through the step, outside the sink.
    if student.repa_projector is not None and loss is None:
        fully_shard(student.repa_projector, reshard_after_forward=False)
    fully_shard(student, reshard_after_forward=False)
    return module


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()
