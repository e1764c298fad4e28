"""Worker of the 2-process CPU/gloo tests (spawned; writes its final weights for the parent to compare)."""

from __future__ import annotations

import os
import traceback


def run(rank: int, world: int, port: int, config: str, overrides: list[str], output: str, result: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from safetensors.torch import save_file

        from elfreg.train.config import load_run_config
        from elfreg.train.trainer import Trainer

        t = Trainer(load_run_config(config, overrides), output)
        res = t.run()
        full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().contiguous()
                for k, v in t.student.state_dict().items()}
        save_file(full, f"{result}-rank{rank}.safetensors")
        losses = torch.tensor([h["loss"] for h in res.history])
        save_file({"loss": losses}, f"{result}-loss-rank{rank}.safetensors")
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()
