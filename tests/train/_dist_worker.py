"""Worker of the 2-process CPU/gloo tests (spawned; writes its final weights for the parent to compare)."""

from __future__ import annotations

import os
import traceback


def run(rank: int, world: int, port: int, config: str, overrides: list[str], output: str, result: str,
        clock_rates: list[float] | None = None) -> None:
    """``clock_rates``: a train.minutes run whose budget clock each rank moves by its own rate per step (a hook)."""
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
        if clock_rates is not None:
            now = [0.0]
            t.budget.clock = lambda: now[0]
            t.budget.start = 0.0
            t.hooks.append(lambda step: now.__setitem__(0, now[0] + clock_rates[rank]))
        res = t.run()
        full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().contiguous()
                for k, v in t.student.state_dict().items()}
        save_file(full, f"{result}-rank{rank}.safetensors")
        losses = torch.tensor([h["loss"] for h in res.history])
        save_file({"loss": losses, "steps": torch.tensor([res.step])}, f"{result}-loss-rank{rank}.safetensors")
    except Exception:
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()
