"""One distillation step's loss on a tiny student: every branch mix, finite, with gradients."""

import pytest
import torch

from elfreg.config import ObjectiveConfig, model_preset
from elfreg.distill.draws import distill_draws
from elfreg.distill.loss import distill_loss
from elfreg.distill.pd import PDRound
from elfreg.model.student import ElfStudent
from elfreg.objective import TrainBatch


def _setup(decoder_prob, flow_map=False):
    torch.manual_seed(0)
    m = model_preset("tiny", width=32, depth=1, heads=2, repa_block=1, bottleneck_dim=16, repa_hidden=32,
                     feature_dim=8, reg_dim=6, teacher_dim=8, vocab_size=20, max_len=6, max_prompt_len=2,
                     flow_map=flow_map)
    student = ElfStudent(m)
    teacher = ElfStudent(model_preset("tiny", **{**m.__dict__, "flow_map": False})).eval()
    for net in (student, teacher):   # final_linear starts at zero: a prediction of 0 everywhere is an exact flow map
        torch.nn.init.normal_(net.final_linear.weight, std=0.5)
    b, length = 4, 6
    prompt = torch.zeros(b, length, dtype=torch.bool)
    prompt[:, :2] = True
    batch = TrainBatch(x=torch.randn(b, length, 8), tokens=torch.randint(0, 20, (b, length)), prompt_mask=prompt,
                       content_mask=~prompt, reg=torch.randn(b, 6))
    cfg = ObjectiveConfig(decoder_prob=decoder_prob, use_repa=False)
    gens = [torch.Generator().manual_seed(i) for i in range(b)]
    return student, teacher, batch, distill_draws(cfg, gens, length, 8, 6, 64), cfg


@pytest.mark.parametrize("method", ["pd", "flowmap"])
@pytest.mark.parametrize("decoder_prob", [0.0, 0.5, 1.0])
def test_every_branch_mix_gives_a_finite_loss_and_gradients(method, decoder_prob):
    student, teacher, batch, draws, cfg = _setup(decoder_prob, flow_map=method == "flowmap")
    out = distill_loss(student, teacher, batch, draws, cfg, method, PDRound(1, 4, 16), 0.25, 0.1,
                       torch.tensor(4.0))
    assert torch.isfinite(out.loss) and out.loss > 0
    out.loss.backward()
    head = student.head_u.grad
    assert (head is not None and bool(head.abs().sum() > 0)) == (decoder_prob > 0)   # the CE rows reach the head
    if decoder_prob < 1:
        assert out.terms["l2"] > 0 and out.terms["loss_reg"] > 0
    else:
        assert out.terms["l2"] == 0 and out.terms["loss_reg"] == 0
    assert float(out.terms["decoder_frac"]) == float(draws.is_decoder.float().mean())


def test_ema_targets_come_from_the_ema_weights_loaded_every_step():
    """distill.target_weights=ema: the two-hop targets are the EMA's, refreshed from the (in-place updated) weights
    at every step; the gradient still flows into the student only."""
    import copy

    from elfreg.distill.loss import DistillLoss

    student, teacher, batch, draws, cfg = _setup(0.0, flow_map=True)
    other = copy.deepcopy(student)
    torch.nn.init.normal_(other.final_linear.weight, std=0.5)   # "EMA" weights unlike the student's
    shadow = {n: p.detach().clone() for n, p in other.named_parameters()}
    loss = DistillLoss(teacher, "flowmap", None, 0.0, 0.5)   # no diagonal rows: every target is a two-hop one
    online = loss(student, batch, draws, cfg).loss
    loss.ema_targets(student, shadow)
    by_ema = loss(student, batch, draws, cfg)
    # the same as distill_loss with the EMA network as the target maker, and not the online loss
    want = distill_loss(student, teacher, batch, draws, cfg, "flowmap", None, 0.0, 0.5, None, other)
    assert torch.equal(by_ema.loss, want.loss) and not torch.equal(by_ema.loss, online)
    by_ema.loss.backward()
    assert student.final_linear.weight.grad is not None and loss.target_net.final_linear.weight.grad is None
    with torch.no_grad():   # the EMA moves in place (as EMA.update does): the next step sees it
        for n, p in student.named_parameters():
            shadow[n].copy_(p)
    assert torch.equal(loss(student, batch, draws, cfg).loss, online)
    with pytest.raises(ValueError, match="only the flow map"):
        DistillLoss(teacher, "pd", PDRound(1, 4, 16)).ema_targets(student, shadow)
