import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from elfreg.sampling.config import SamplerConfig
from elfreg.sampling.results_io import read_records
from elfreg.sampling.files import generate_to_file, read_prompts

from ._fixtures import pipeline, strip_timing, write_prompts

CFG = SamplerConfig(sampler="renoise", nfe=4, rho=2, seed=7)
# the adaptive exit: rows leave their batches at different steps; a row's NFE must not depend on its rank either
ADAPTIVE = SamplerConfig(sampler="adaptive", nfe=16, rho=2, seed=7, check_every=1, patience=1)


def _worker(rank, world, store, prompts_path, out, cfg):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        generate_to_file(pipeline(cfg, 2), read_prompts(prompts_path), out, samples=3, rank=rank, world=world,
                         progress=False)
    finally:
        dist.destroy_process_group()


@pytest.mark.dist
@pytest.mark.parametrize("cfg", [CFG, ADAPTIVE], ids=["renoise", "adaptive"])
def test_two_gloo_ranks_match_single_process(tmp_path, cfg):
    prompts_path = write_prompts(tmp_path / "p.jsonl")
    single = tmp_path / "single.jsonl"
    generate_to_file(pipeline(cfg, 5), read_prompts(prompts_path), single, samples=3, progress=False)
    sharded = tmp_path / "sharded.jsonl"
    mp.spawn(_worker, args=(2, str(tmp_path / "store"), str(prompts_path), str(sharded), cfg), nprocs=2, join=True)
    assert not list(tmp_path.glob("sharded.rank*"))
    recs = read_records(sharded)
    assert len(recs) == 15
    assert strip_timing(recs) == strip_timing(read_records(single))
    if cfg.sampler == "adaptive":
        assert len({r["nfe_spent"] for r in recs}) > 1   # rows left their batches at different steps
