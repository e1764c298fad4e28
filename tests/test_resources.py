"""The memory estimate (elfreg.resources): exact parameter counts, a floor of what work holds, one line when it cannot
fit, read against RAM on the CPU and free device memory on CUDA."""

import pytest

from elfreg import resources
from elfreg.config import model_preset
from elfreg.resources import (DoesNotFit, Need, check_fits, grid_need, inference_need, model_need, sampler_grid_need,
                              student_parameters, training_need)
from elfreg.sampling.config import SamplerConfig
from elfreg.train.config import RunConfig, TrainConfig


@pytest.mark.parametrize("overrides", [
    {}, {"extra_token": "olt", "repa": False}, {"extra_token": "none", "repa": False, "head_token_ids": [1, 5, 9]},
    {"mlp_ratio": 2.5, "heads": 2, "num_w_tokens": 1}, {"repa_hidden": 96, "teacher_dim": 80, "reg_dim": 48},
])
def test_the_parameter_count_is_the_built_students(overrides):
    from elfreg.model.student import ElfStudent

    m = model_preset("tiny", **overrides)
    assert student_parameters(m) == ElfStudent(m).num_parameters()


def test_paper_sizes_count_without_building():
    # ELF-REG-B with the Qwen3 widths: ~0.3B parameters, most of them in the 151,669-token vocab head
    n = student_parameters(model_preset("elf-reg-b"))
    assert 2.5e8 < n < 4e8


def _fake_memory(monkeypatch, available: int | None) -> list:
    asked = []
    monkeypatch.setattr(resources, "available_bytes", lambda device: asked.append(str(device)) or available)
    return asked


def test_a_need_over_the_available_memory_is_one_line_naming_the_settings(monkeypatch):
    asked = _fake_memory(monkeypatch, 10 ** 9)
    need = Need("sampling 16 rows at once", "cpu", {"sampler states": 3 * 10 ** 9, "forward pass": 10 ** 6},
                "--batch-size")
    with pytest.raises(DoesNotFit) as info:
        check_fits(need)
    assert str(info.value) == ("sampling 16 rows at once needs at least 3.0 GB of RAM (sampler states 3.0 GB, forward "
                               "pass 1.0 MB), but 1.0 GB is available; lower --batch-size")
    assert asked == ["cpu"] and "\n" not in str(info.value)
    check_fits(Need("small", "cpu", {"x": 10 ** 8}))   # fits: nothing raised


def test_needs_on_one_device_add_up_and_devices_are_apart(monkeypatch):
    _fake_memory(monkeypatch, 10 ** 9)
    half = Need("a", "cpu", {"grid": 6 * 10 ** 8}, "--rho")
    check_fits(half, Need("b", "cuda:0", {"states": 6 * 10 ** 8}))
    with pytest.raises(DoesNotFit, match=r"^a together with b needs at least 1.2 GB of RAM .*lower --rho, "
                                         r"--batch-size$"):
        check_fits(half, Need("b", "cpu", {"states": 6 * 10 ** 8}, "--batch-size"))


def test_unknown_available_memory_refuses_nothing(monkeypatch):
    _fake_memory(monkeypatch, None)
    check_fits(Need("huge", "cpu", {"x": 10 ** 30}))


def test_a_billion_wide_model_is_refused_by_its_parameters_alone():
    m = model_preset("tiny")
    object.__setattr__(m, "width", 10 ** 9)   # past the config's own range, as a memory-only check sees it
    with pytest.raises(DoesNotFit, match=r"needs at least [\d,.]+ PB of RAM \(parameters .*lower model\.width"):
        check_fits(model_need(m, "the student of m/config.json"))


def test_the_sampler_grid_need_is_rho_times_nfe_points():
    cfg = SamplerConfig(nfe=64, rho=8)
    need = sampler_grid_need(cfg, batch=16)
    assert need.device == "cpu" and need.parts == {"master grid": 4 * 512 * 8, "kept grids": 16 * 64 * 8}
    full = sampler_grid_need(SamplerConfig(sampler="full-span", nfe=64), batch=2)
    assert full.parts["kept grids"] == 2 * 64 * 8 and "512" not in full.what
    assert grid_need(2 ** 32, 64, 16, "--rho").total > 10 ** 11


def test_inference_and_training_needs_grow_with_their_settings():
    m = model_preset("tiny")
    assert inference_need(m, 64, "cpu").total > inference_need(m, 8, "cpu").total
    assert inference_need(m, 8, "cpu", loaded=False).parts["parameters"] == 4 * student_parameters(m)
    assert inference_need(m, 8, "cpu").total > inference_need(m, 8, "cpu", pass_rows=1).total
    run = RunConfig(model=m, train=TrainConfig(batch_size=64, optimizer="adamw", precision="fp32"))
    need = training_need(run, "cpu")
    assert need.parts["parameters"] == 4 * student_parameters(m)
    assert need.parts["optimiser state"] == 8 * student_parameters(m)
    assert training_need(run, "cpu", world=4).parts["activations"] * 4 == need.parts["activations"]


def test_the_floor_stays_under_what_a_training_step_really_holds(one_thread):
    """The estimate is a floor: what a real training step of the tiny student holds at once (weights, gradients,
    EMA copy and AdamW state, plus every tensor autograd saves for the backward pass, counted exactly by a
    saved-tensors hook) is more, so the estimate refuses only what cannot fit."""
    import torch

    from elfreg.config import ObjectiveConfig
    from elfreg.model.student import ElfStudent

    m = model_preset("tiny", extra_token="none", repa=False)
    run = RunConfig(model=m, objective=ObjectiveConfig(use_repa=False, use_reg=False),
                    train=TrainConfig(batch_size=16, optimizer="adamw", precision="fp32"))
    net = ElfStudent(m)
    ema = [p.detach().clone() for p in net.parameters()]
    opt = torch.optim.AdamW(net.parameters())
    saved: dict = {}

    def pack(t):
        saved[(t.data_ptr(), t.shape, t.dtype)] = t.numel() * t.element_size()
        return t

    z = torch.randn(16, m.max_len, m.feature_dim)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = net(z, torch.randn_like(z), torch.rand(16), torch.rand(16) + 1, decoder=True)
        loss = out.x_hat.square().mean() + out.logits.mean()
    loss.backward()
    opt.step()
    size = sum(p.numel() * p.element_size() for p in net.parameters())
    state = sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values() if v.dim())
    held = 2 * size + sum(e.numel() * e.element_size() for e in ema) + state + sum(saved.values())
    assert training_need(run, "cpu").total < held, (training_need(run, "cpu").parts, held)


def test_cuda_reads_free_device_memory(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (5 * 10 ** 9 + index, 8 * 10 ** 9))
    assert resources.available_bytes("cuda:1") == 5 * 10 ** 9 + 1
    with pytest.raises(DoesNotFit, match=r"of cuda:1 memory .*but 5.0 GB is available"):
        check_fits(Need("training", "cuda:1", {"parameters": 6 * 10 ** 9}))


def test_ram_is_read_from_this_machine():
    ram = resources.ram_available_bytes()
    assert ram is None or 0 < ram <= (resources.ram_total_bytes() or ram)
    assert resources.available_bytes("meta") is None
    assert resources.usable_cpus() >= 1
