"""The training step's CUDA path: bf16 autocast against fp32, a one-process NCCL group, the FSDP2-wrapped step
against the plain one. The cuda cases are GPU-marked (skipped without CUDA); the same checks run on the CPU (gloo,
bf16 autocast on the CPU) so that their logic is exercised in every run."""

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from helpers import REPO
from _tiny import tiny_overrides
from elfreg.config import ObjectiveConfig, model_preset
from elfreg.model.student import ElfStudent
from elfreg.objective import TrainBatch, draw
from elfreg.train.config import TrainConfig, load_run_config
from elfreg.train.dist import LossModule, init_distributed, wrap
from elfreg.train.optim import build_optimizers
from elfreg.train.trainer import Trainer

CONFIG = str(REPO / "configs/tiny-smoke.yaml")   # not relative: the tests may start anywhere
DEVICES = [pytest.param("cuda", marks=pytest.mark.gpu), "cpu"]
GROUPS = [pytest.param("cuda", "nccl", marks=pytest.mark.gpu), ("cpu", "gloo")]


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([_full(p.grad).flatten().float().cpu() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_autocast_step_matches_fp32(tmp_path, tiny_lm_dir, sums_jsonl, device):
    """One Trainer.step_once (train.precision bf16 vs fp32, same init, data and draws): loss, gradient norm and
    gradient direction agree to bf16 precision."""
    out = {}
    for precision in ("fp32", "bf16"):
        over = tiny_overrides(tiny_lm_dir, sums_jsonl, **{
            "train.steps": 1, "train.batch_size": 8, "train.device": device, "train.precision": precision,
            "train.stats_canvases": 8, "train.clip_grad": 0, "model.width": 128, "model.heads": 2})
        t = Trainer(load_run_config(CONFIG, over), tmp_path / precision)
        g = torch.Generator().manual_seed(0)  # the zero-initialised output layer would stop the body's gradients
        with torch.no_grad():
            t.student.final_linear.weight.copy_(0.05 * torch.randn(t.student.final_linear.weight.shape, generator=g))
        m = t.step_once(0)
        out[precision] = (m["loss"], m["grad_norm"], _grads(t.student))
    (l32, n32, g32), (l16, n16, g16) = out["fp32"], out["bf16"]
    assert abs(l16 - l32) <= 2e-2 * abs(l32), (l16, l32)
    assert abs(n16 - n32) <= 5e-2 * n32, (n16, n32)
    assert torch.nn.functional.cosine_similarity(g16, g32, dim=0) > 0.99


@pytest.mark.parametrize("device,backend", GROUPS)
def test_one_process_group(tmp_path, device, backend):
    """The collectives elfreg uses (all_reduce, all_gather_object, barrier) on a one-process group."""
    kw = {"device_id": torch.device("cuda", 0)} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, **kw)
    try:
        info = init_distributed()
        assert (info.rank, info.world_size, info.is_main) == (0, 1, True)
        t = torch.arange(4.0, device=device)
        dist.all_reduce(t)
        assert torch.equal(t.cpu(), torch.arange(4.0))
        objs = [None]
        dist.all_gather_object(objs, {"rank": 0, "state": [1, 2]})
        assert objs == [{"rank": 0, "state": [1, 2]}]
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _batch(m, b: int, device: str) -> TrainBatch:
    g = torch.Generator().manual_seed(3)
    length, d = m.max_len, m.feature_dim
    pm = torch.zeros(b, length, dtype=torch.bool)
    pm[:, :4] = True
    cm = ~pm
    cm[:, -3:] = False
    batch = TrainBatch(x=torch.randn(b, length, d, generator=g), tokens=torch.randint(0, m.vocab_size, (b, length),
                                                                                      generator=g),
                       prompt_mask=pm, content_mask=cm, teacher=torch.randn(b, length, m.teacher_dim, generator=g),
                       reg=torch.randn(b, m.reg_dim, generator=g),
                       teacher_at_source=torch.randn(b, m.teacher_dim, generator=g))
    return batch.to(device)


@pytest.mark.parametrize("device,backend", GROUPS)
def test_fsdp2_wrapped_step_matches_plain(tmp_path, device, backend):
    """The student wrapped as the trainer wraps it for train.parallel=fsdp (FSDP2, one process) gives the plain
    student's loss, gradients and, after one reference-Muon/AdamW step, weights."""
    kw = {"device_id": torch.device("cuda", 0)} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1, **kw)
    try:
        torch.manual_seed(0)
        m = model_preset("tiny", max_len=16, max_prompt_len=8)
        plain = ElfStudent(m)
        torch.nn.init.normal_(plain.final_linear.weight, std=0.05)
        plain.to(device)
        sharded = copy.deepcopy(plain)
        module = wrap(sharded, "fsdp", SimpleNamespace(enabled=True), torch.device(device))
        assert module.sink and any(hasattr(p, "device_mesh") for p in sharded.parameters())
        ocfg = ObjectiveConfig(self_cond_prob=0.5, decoder_prob=0.3)
        batch = _batch(m, 6, device)
        draws = draw(ocfg, [torch.Generator().manual_seed(i) for i in range(6)], m.max_len, m.feature_dim, m.reg_dim)
        ref = LossModule(plain)(batch, draws, ocfg, None)
        got = module(batch, draws, ocfg, None)
        ref.loss.backward()
        got.loss.backward()
        torch.testing.assert_close(got.loss.detach(), ref.loss.detach(), rtol=1e-5, atol=1e-6)
        for p, q in zip(plain.parameters(), sharded.parameters()):
            for model_p in (p, q):
                if model_p.grad is None:  # as the trainer does: every parameter steps
                    model_p.grad = torch.zeros_like(model_p)
            torch.testing.assert_close(_full(q.grad), p.grad, rtol=1e-4, atol=1e-6)
        tc = TrainConfig(parallel="fsdp", muon_params="all")  # the reference Muon on every matrix
        for net in (plain, sharded):
            build_optimizers(net, tc).step()
        for (name, p), q in zip(plain.named_parameters(), sharded.parameters()):
            torch.testing.assert_close(_full(q).detach(), p.detach(), rtol=1e-4, atol=1e-6, msg=name)
    finally:
        dist.destroy_process_group()
