"""Worker of the 2-process CPU/gloo distillation test (spawned; writes the final student's weights)."""

from __future__ import annotations

import os
import traceback


def run(rank: int, world: int, port: int, teacher: str, overrides: list[str], output: str, result: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from safetensors.torch import save_file

        from elfreg.distill import distill, load_distill_config

        res = distill(teacher, output, load_distill_config(None, overrides, teacher=teacher))
        from elfreg.train import checkpoint as ck

        last = res.output / res.summary["stages"][-1]["folder"]
        save_file(ck.load_tensors(ck.latest_checkpoint(last) / "weights.safetensors"), f"{result}-rank{rank}.safetensors")
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()
